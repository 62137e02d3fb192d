// Loads a reference fixture case (tests/reference/make_fixtures.py output: case.json + tensors.safetensors)
// into engine structs, and small comparison helpers shared by the reference tests.
#pragma once

#include <map>
#include <memory>
#include <optional>
#include <string>
#include <vector>

#include "engine/engine.h"
#include "model/safetensors.h"

namespace tinkerd::testing {

struct FixtureAdapter {
    std::string name;
    engine::LoraSpec spec;
};

struct FixtureCall {
    std::optional<std::string> adapter;  // none = base model
    engine::ForwardBackwardInput input;  // adapter id filled in by the test
    double expected_loss = 0;
};

struct FixtureAdam {
    std::string adapter;
    size_t call = 0;
    int steps = 0;
    engine::AdamParams params;
    std::vector<double> expected_losses;
};

struct Fixture {
    std::string name;
    std::string model_dir;
    std::vector<FixtureAdapter> adapters;
    std::vector<FixtureCall> calls;
    std::vector<FixtureAdam> adam;
    std::shared_ptr<model::SafetensorsFile> tensors;
    double logprob_bound = 0;  // fp32_logprob_bound(*this), computed once by load_fixture

    // Tensors under "<prefix>/" with the prefix stripped, as host tensors.
    std::map<std::string, engine::HostTensor> tensors_under(const std::string & prefix) const;
    std::vector<double> values(const std::string & name) const;
};

// Bound on |fp32 logprob - float64 reference| for this fixture's model, derived in fixture.cpp from the float32
// unit roundoff, the model's longest reduction, its depth and the largest logit; the same on every CPU.
double fp32_logprob_bound(const Fixture & f);
// The same bound for the model in model_dir (its config.json) whose logits reach max_abs_logit.
double fp32_logprob_bound(const std::string & model_dir, double max_abs_logit);

// The fixtures directory: $TINKERD_FIXTURES_DIR, else <build dir>/fixtures.
std::string fixtures_dir();
Fixture load_fixture(const std::string & case_name);

// max |a - b|
double max_abs_diff(const std::vector<double> & a, const std::vector<double> & b);
// max over i of |a - b| - rtol·|b| (numpy allclose passes when this is <= atol)
double max_allclose_excess(const std::vector<double> & a, const std::vector<double> & b, double rtol);
// max |a - b| / max(max |b|, tiny)
double max_rel_diff(const std::vector<double> & a, const std::vector<double> & b);

}  // namespace tinkerd::testing
