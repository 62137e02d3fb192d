// Replays the PyTorch reference fixtures through the engine in fp32: target logprobs, losses and LoRA
// gradients for every loss, 5 AdamW steps, a batch mixing three adapters and the base model, and
// packed vs one-sequence-at-a-time. Logprob bounds are derived (fixture.cpp), gradients 1e-4 relative.
// TINKERD_TEST_DEVICE (default cpu) puts the engines on another device: scripts/gpu-check.sh runs this on a GPU.
#include <cmath>
#include <cstdio>
#include <cstdlib>

#include <gtest/gtest.h>

#include "engine/kernels/matmul.h"
#include "fixture.h"

namespace tinkerd::testing {
namespace {

using engine::AdapterId;
using engine::Engine;

// An engine over the fixture's model with its adapters imported from init/<name>.
struct EngineSetup {
    std::unique_ptr<Engine> engine;
    std::map<std::string, AdapterId> ids;

    engine::ForwardBackwardInput input_for(const FixtureCall & call) const {
        engine::ForwardBackwardInput in = call.input;
        in.adapter = call.adapter ? ids.at(*call.adapter) : engine::BASE_MODEL;
        return in;
    }
};

EngineSetup make_setup(const Fixture & f, engine::ComputeDType dtype) {
    EngineSetup s;
    engine::EngineOptions options{dtype, 2};
    const char * device = std::getenv("TINKERD_TEST_DEVICE");
    options.device = device != nullptr && *device != '\0' ? device : "cpu";
    auto loaded = Engine::load(f.model_dir, options);
    if (!loaded.ok()) {
        throw std::runtime_error(loaded.error().message);
    }
    s.engine = std::move(loaded).value();
    for (const auto & a : f.adapters) {
        AdapterId id = s.engine->create_adapter(a.spec).value();
        auto status = s.engine->import_adapter(id, f.tensors_under("init/" + a.name), false);
        if (!status.ok()) {
            throw std::runtime_error(status.error().message);
        }
        s.ids[a.name] = id;
    }
    return s;
}

std::vector<double> values(const engine::HostTensor & t) {
    return engine::host_tensor_values(t);
}

class ReferenceTest : public ::testing::TestWithParam<std::string> {
  protected:
    void SetUp() override { fixture_ = load_fixture(GetParam()); }
    // stories260K has logits near 17, where fp32 rounding alone reaches a few 1e-6.
    Fixture fixture_;
};

// fp32 tolerances. Logprobs: |got - want| <= fp32_logprob_bound(f) (fixture.cpp: u·Z·sqrt(K)·(L+1), from the
// model's shape and largest logit; 8e-6..1e-5 on the tiny models, 1.8e-4 on stories260K, whose logits reach 17) plus
// 1e-6·|want|. Two fp32 results (packed vs alone) may each be that far off: 2x between them.
// Losses: the per-token logprob bound times the number of summed terms, since the RL sums cancel.
constexpr double LOGPROB_RTOL = 1e-6;
double logprob_atol(const Fixture & f) {
    return f.logprob_bound;
}

// AdamW weights after 5 steps, in units of the learning rate. stories260K is ill-conditioned in fp32:
// make_fixtures.py's own fp32 replay drifts 7.7e-4 lr from its float64 result there (6e-5..1e-4 on the
// tiny models), and our fp32 engine measures 1.1e-3 on an AMD EPYC (OpenBLAS kernels differ by CPU).
double adam_weight_atol_in_lr(const Fixture & f) {
    return f.name == "stories260K" ? 3e-3 : 1e-3;
}

int64_t n_terms(const engine::ForwardBackwardInput & input) {
    int64_t n = 0;
    for (const auto & d : input.datums) {
        n += static_cast<int64_t>(d.loss_inputs.at("target_tokens").bytes.size() / sizeof(int64_t));
    }
    return n;
}

// Checks one call's outputs against the fixture: logprobs per datum and the loss.
void expect_call_matches(const Fixture & f, size_t c, const engine::ForwardBackwardOutput & out) {
    const FixtureCall & call = f.calls[c];
    ASSERT_EQ(out.logprobs.size(), call.input.datums.size());
    for (size_t d = 0; d < out.logprobs.size(); ++d) {
        auto expected = f.values("logprobs/" + std::to_string(c) + "/" + std::to_string(d));
        EXPECT_EQ(out.logprobs[d].shape, call.input.datums[d].loss_inputs.at("target_tokens").shape);
        const double diff = max_abs_diff(values(out.logprobs[d]), expected);
        std::printf("%s call %zu datum %zu: logprobs max |diff| %.3g (bound %.3g)\n", f.name.c_str(), c, d, diff,
                    logprob_atol(f));
        EXPECT_LE(max_allclose_excess(values(out.logprobs[d]), expected, LOGPROB_RTOL), logprob_atol(f))
            << "call " << c << " datum " << d << ", max abs diff " << diff;
    }
    const double loss = out.metrics.at("loss:sum");
    const double scale = std::max({1.0, std::abs(call.expected_loss), static_cast<double>(n_terms(call.input))});
    EXPECT_NEAR(loss, call.expected_loss, logprob_atol(f) * scale) << "call " << c;
}

void expect_grads_match(const std::map<std::string, engine::HostTensor> & got,
                        const std::map<std::string, std::vector<double>> & expected, const std::string & what) {
    ASSERT_EQ(got.size(), expected.size()) << what;
    for (const auto & [key, want] : expected) {
        ASSERT_TRUE(got.count(key)) << what << ": missing " << key;
        EXPECT_LT(max_rel_diff(values(got.at(key)), want), 1e-4) << what << ": " << key;
    }
}

std::map<std::string, std::vector<double>> fixture_grads(const Fixture & f, size_t c) {
    std::map<std::string, std::vector<double>> out;
    for (const auto & [key, t] : f.tensors_under("grad/" + std::to_string(c))) {
        out[key] = values(t);
    }
    return out;
}

TEST_P(ReferenceTest, EachCallAloneMatchesLogprobsLossAndGradients) {
    const Fixture & f = fixture_;
    for (size_t c = 0; c < f.calls.size(); ++c) {
        EngineSetup s = make_setup(f, engine::ComputeDType::FP32);
        const bool train = f.calls[c].adapter.has_value();
        auto results = s.engine->forward_backward({s.input_for(f.calls[c])}, train);
        ASSERT_TRUE(results[0].ok()) << "call " << c << ": " << results[0].error().message;
        expect_call_matches(f, c, *results[0]);
        if (train) {
            expect_grads_match(s.engine->export_gradients(s.ids.at(*f.calls[c].adapter)).value(), fixture_grads(f, c),
                               f.name + " call " + std::to_string(c));
        }
    }
}

TEST_P(ReferenceTest, MixedBatchOfThreeAdaptersAndBaseEqualsEachAlone) {
    const Fixture & f = fixture_;
    EngineSetup s = make_setup(f, engine::ComputeDType::FP32);
    std::vector<engine::ForwardBackwardInput> inputs;
    for (const auto & call : f.calls) {
        inputs.push_back(s.input_for(call));
    }
    // forward_backward rejects base-model inputs, so train the adapters and forward the base separately
    // inside the same packed batch via forward(); first the full mixed forward:
    auto forward = s.engine->forward_backward(inputs, false);
    for (size_t c = 0; c < f.calls.size(); ++c) {
        ASSERT_TRUE(forward[c].ok()) << forward[c].error().message;
        expect_call_matches(f, c, *forward[c]);
    }
    inputs.pop_back();  // the base-model call (last) cannot train
    ASSERT_FALSE(f.calls.back().adapter.has_value());
    auto trained = s.engine->forward_backward(inputs, true);
    std::map<std::string, std::map<std::string, std::vector<double>>> expected;  // adapter -> summed grads
    for (size_t c = 0; c < inputs.size(); ++c) {
        ASSERT_TRUE(trained[c].ok()) << trained[c].error().message;
        expect_call_matches(f, c, *trained[c]);
        for (auto & [key, g] : fixture_grads(f, c)) {
            auto & sum = expected[*f.calls[c].adapter][key];
            sum.resize(g.size(), 0.0);
            for (size_t i = 0; i < g.size(); ++i)
                sum[i] += g[i];
        }
    }
    for (const auto & [name, grads] : expected) {
        expect_grads_match(s.engine->export_gradients(s.ids.at(name)).value(), grads, "mixed batch " + name);
    }
}

TEST_P(ReferenceTest, PackedEqualsOneSequenceAtATime) {
    const Fixture & f = fixture_;
    EngineSetup s = make_setup(f, engine::ComputeDType::FP32);
    const auto packed_input = s.input_for(f.calls[0]);
    auto packed = s.engine->forward_backward({packed_input}, false);
    ASSERT_TRUE(packed[0].ok());
    for (size_t d = 0; d < packed_input.datums.size(); ++d) {
        auto single_input = packed_input;
        single_input.datums = {packed_input.datums[d]};
        auto single = s.engine->forward_backward({single_input}, false);
        ASSERT_TRUE(single[0].ok());
        EXPECT_LE(max_allclose_excess(values(single[0]->logprobs[0]), values(packed[0]->logprobs[d]), LOGPROB_RTOL),
                  2 * logprob_atol(f));
    }
}

// The loss before AdamW step `step`: each step's forward may err by the per-token bound per summed term, and
// each earlier step's update was computed from such a forward (its gradient as far off, relatively), moving
// the weights and so the next loss by about as much again: (step + 1) forward bounds.
double adam_loss_bound(const Fixture & f, const FixtureAdam & adam, int step) {
    const auto terms = static_cast<double>(std::max<int64_t>(1, n_terms(f.calls[adam.call].input)));
    return logprob_atol(f) * terms * (step + 1);
}

TEST_P(ReferenceTest, AdamWStepsMatchTorchOptimAdamW) {
    const Fixture & f = fixture_;
    for (size_t k = 0; k < f.adam.size(); ++k) {
        const FixtureAdam & adam = f.adam[k];
        EngineSetup s = make_setup(f, engine::ComputeDType::FP32);
        const AdapterId id = s.ids.at(adam.adapter);
        auto input = s.input_for(f.calls[adam.call]);
        for (int step = 0; step < adam.steps; ++step) {
            auto r = s.engine->forward_backward({input}, true);
            ASSERT_TRUE(r[0].ok()) << r[0].error().message;
            const double want = adam.expected_losses[step];
            std::printf("%s adam %zu step %d: loss diff %.3g (bound %.3g)\n", f.name.c_str(), k, step,
                        std::abs(r[0]->metrics.at("loss:sum") - want), adam_loss_bound(f, adam, step));
            EXPECT_NEAR(r[0]->metrics.at("loss:sum"), want, adam_loss_bound(f, adam, step))
                << "adam " << k << " step " << step;
            ASSERT_TRUE(s.engine->optim_step(id, adam.params).ok());
        }
        auto weights = s.engine->export_adapter(id, false).value();
        for (const auto & [key, want] : f.tensors_under("adam_final/" + std::to_string(k))) {
            EXPECT_LT(max_abs_diff(values(weights.at(key)), values(want)),
                      adam_weight_atol_in_lr(f) * adam.params.learning_rate)
                << "adam " << k << " " << key;
        }
    }
}

// bf16 base weights (the fast path) against the float64 reference: not exact by design. Prints the
// measured error (docs/benchmarks.md quotes it) and bounds it loosely so a real bug still fails.
// bf16 weights under both --matmul numerics: exact fp32 math, and inputs rounded to bf16 (bf16 dot products).
TEST_P(ReferenceTest, Bf16WeightsStayCloseToTheReference) {
    const Fixture & f = fixture_;
    for (auto inputs : {engine::kernels::MatmulInputs::fp32, engine::kernels::MatmulInputs::bf16}) {
        const bool rounded = inputs == engine::kernels::MatmulInputs::bf16;
        SCOPED_TRACE(rounded ? "bf16 inputs" : "fp32 inputs");
        engine::kernels::set_matmul_inputs(inputs);
        engine::kernels::set_brgemm_enabled(rounded);  // where the CPU has it
        double worst_lp = 0, worst_grad = 0, worst_loss = 0;
        for (size_t c = 0; c < f.calls.size(); ++c) {
            EngineSetup s = make_setup(f, engine::ComputeDType::BF16);
            const bool train = f.calls[c].adapter.has_value();
            auto results = s.engine->forward_backward({s.input_for(f.calls[c])}, train);
            ASSERT_TRUE(results[0].ok()) << results[0].error().message;
            for (size_t d = 0; d < results[0]->logprobs.size(); ++d) {
                auto want = f.values("logprobs/" + std::to_string(c) + "/" + std::to_string(d));
                worst_lp = std::max(worst_lp, max_abs_diff(values(results[0]->logprobs[d]), want));
            }
            const double loss = results[0]->metrics.at("loss:sum");
            worst_loss = std::max(worst_loss, std::abs(loss - f.calls[c].expected_loss) /
                                                  std::max(1.0, std::abs(f.calls[c].expected_loss)));
            if (train) {
                auto grads = s.engine->export_gradients(s.ids.at(*f.calls[c].adapter)).value();
                for (const auto & [key, want] : fixture_grads(f, c)) {
                    worst_grad = std::max(worst_grad, max_rel_diff(values(grads.at(key)), want));
                }
            }
        }
        std::printf(
            "[bf16 vs fp64 reference, %s inputs] %s: logprobs max abs %.3g, loss rel %.3g, grads max rel %.3g\n",
            rounded ? "bf16" : "fp32", f.name.c_str(), worst_lp, worst_loss, worst_grad);
        // Measured (2026-11, bf16 inputs then, with bf16-rounded outputs too): tiny models lp <= 0.054, loss rel
        // <= 0.085, grads rel <= 0.094; stories260K lp 0.74, loss rel 0.20, grads rel 0.62 (its fp32 weights
        // rounded to bf16 are a different model: the shared hf-bf16 copy's greedy text diverges from hf-f32
        // after 185 tokens). Bounds ~2x that, for both numerics.
        const bool real_model = f.name == "stories260K";
        EXPECT_LT(worst_lp, real_model ? 1.5 : 0.15);
        EXPECT_LT(worst_loss, real_model ? 0.8 : 0.15);
        EXPECT_LT(worst_grad, real_model ? 1.25 : 0.25);
    }
    engine::kernels::set_matmul_inputs(engine::kernels::MatmulInputs::fp32);
    engine::kernels::set_brgemm_enabled(false);
}

INSTANTIATE_TEST_SUITE_P(Cases, ReferenceTest,
                         ::testing::Values("llama_tiny", "qwen3_tiny", "qwen2_tiny", "stories260K"));

}  // namespace
}  // namespace tinkerd::testing
