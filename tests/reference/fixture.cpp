// Fixture loading for the reference tests (see fixture.h).
#include "fixture.h"

#include <algorithm>
#include <cmath>
#include <cstdlib>
#include <cstring>
#include <fstream>
#include <sstream>
#include <stdexcept>

#include <nlohmann/json.hpp>

namespace tinkerd::testing {

using nlohmann::json;

std::string fixtures_dir() {
    if (const char * dir = std::getenv("TINKERD_FIXTURES_DIR")) {
        return dir;
    }
    return TINKERD_DEFAULT_FIXTURES_DIR;  // <build dir>/fixtures, where `make fixtures` writes them
}

static engine::HostTensor parse_tensor(const json & j) {
    std::vector<int64_t> shape = j.at("shape").get<std::vector<int64_t>>();
    if (j.at("dtype") == "int64") {
        return engine::make_host_tensor_i64(shape, j.at("data").get<std::vector<int64_t>>());
    }
    return engine::make_host_tensor_f32(shape, j.at("data").get<std::vector<float>>());
}

static engine::LoraSpec parse_spec(const json & j) {
    engine::LoraSpec spec;
    spec.rank = j.at("rank");
    spec.alpha = j.at("alpha");
    auto targets = j.at("targets").get<std::vector<std::string>>();
    auto has = [&](const char * t) { return std::find(targets.begin(), targets.end(), t) != targets.end(); };
    spec.train_attn = has("q_proj");
    spec.train_mlp = has("gate_proj");
    spec.train_unembed = has("lm_head");
    return spec;
}

static FixtureCall parse_call(const json & j) {
    FixtureCall call;
    if (!j.at("adapter").is_null()) {
        call.adapter = j.at("adapter").get<std::string>();
    }
    call.input.loss_fn = j.at("loss_fn");
    for (const auto & [k, v] : j.at("loss_fn_config").items()) {
        call.input.loss_fn_config[k] = v.get<double>();
    }
    for (const auto & d : j.at("datums")) {
        engine::Datum datum;
        datum.tokens = d.at("tokens").get<std::vector<int64_t>>();
        for (const auto & [k, v] : d.at("loss_inputs").items()) {
            datum.loss_inputs[k] = parse_tensor(v);
        }
        call.input.datums.push_back(std::move(datum));
    }
    call.expected_loss = j.at("expected_loss");
    return call;
}

static FixtureAdam parse_adam(const json & j) {
    FixtureAdam adam;
    adam.adapter = j.at("adapter");
    adam.call = j.at("call");
    adam.steps = j.at("steps");
    const json & p = j.at("params");
    adam.params = {p.at("learning_rate"), p.at("beta1"),        p.at("beta2"),
                   p.at("eps"),           p.at("weight_decay"), p.at("grad_clip_norm")};
    if (p.value("optimizer", "adamw") == "dimuon") {
        adam.params.kind = engine::OptimizerKind::DIMUON;
        adam.params.damping = p.at("damping");
        adam.params.rank_lr_correction_exponent = p.at("rank_lr_correction_exponent");
    }
    adam.expected_losses = j.at("expected_losses").get<std::vector<double>>();
    return adam;
}

Fixture load_fixture(const std::string & case_name) {
    const std::string dir = fixtures_dir() + "/" + case_name;
    std::ifstream in(dir + "/case.json");
    if (!in) {
        throw std::runtime_error("missing fixture " + dir + "/case.json (run tests/reference/make_fixtures.py)");
    }
    json j = json::parse(in);
    Fixture f;
    f.name = case_name;
    const std::string rel = j.value("model_dir_relative", "");
    f.model_dir = !rel.empty() && rel[0] != '/' ? dir + "/" + rel : j.at("model_dir").get<std::string>();
    for (const auto & a : j.at("adapters")) {
        f.adapters.push_back({a.at("name"), parse_spec(a)});
    }
    for (const auto & c : j.at("calls")) {
        f.calls.push_back(parse_call(c));
    }
    for (const auto & a : j.at("adam")) {
        f.adam.push_back(parse_adam(a));
    }
    auto file = model::SafetensorsFile::open(dir + "/tensors.safetensors");
    if (!file.ok()) {
        throw std::runtime_error(file.error().message);
    }
    f.tensors = *file;
    f.logprob_bound = fp32_logprob_bound(f);
    return f;
}

std::map<std::string, engine::HostTensor> Fixture::tensors_under(const std::string & prefix) const {
    std::map<std::string, engine::HostTensor> out;
    for (const std::string & name : tensors->names()) {
        if (name.rfind(prefix + "/", 0) != 0) {
            continue;
        }
        model::TensorView v = tensors->get(name).value();
        engine::HostTensor h{v.dtype, v.shape, {}};
        h.bytes.resize(v.n_bytes);
        std::memcpy(h.bytes.data(), v.data, v.n_bytes);
        out[name.substr(prefix.size() + 1)] = std::move(h);
    }
    return out;
}

std::vector<double> Fixture::values(const std::string & name) const {
    model::TensorView v = tensors->get(name).value();
    engine::HostTensor h{v.dtype, v.shape, {}};
    h.bytes.resize(v.n_bytes);
    std::memcpy(h.bytes.data(), v.data, v.n_bytes);
    return engine::host_tensor_values(h);
}

// Error analysis of an fp32 forward pass against the float64 reference (u = 2^-24, fp32's unit roundoff):
// - one dot product of length n, summed in any order, errs by about sqrt(n)·u relative to the magnitude of
//   its terms (the probabilistic bound of Higham & Mary, 2019; the worst case n·u is never approached by
//   rounding errors of either sign). Take n = K, the model's longest reduction (hidden, MLP or vocabulary
//   size: the LSE over the vocabulary is one too);
// - each of the L blocks adds its own such error to the residual stream, and the head one more: L + 1 terms,
//   added up (not in quadrature: a block also passes on the errors of those before it);
// - a logprob z_t - LSE(z) is a difference of quantities of the logits' size Z (the largest |logit|).
// So |Δ logprob| <= u·Z·sqrt(K)·(L + 1). Which kernels, which summation order or which CPU produced the
// fp32 result does not enter. Measured against it (AMD EPYC Zen 4, torch 2.15's MKL, default CPU path):
// stories260K 5.2e-5 of a 1.8e-4 bound, llama_tiny 4.0e-6 of 1.0e-5, qwen3_tiny 2.6e-6 of 1.0e-5.
double fp32_logprob_bound(const std::string & model_dir, double max_abs_logit) {
    std::ifstream in(model_dir + "/config.json");
    if (!in) {
        throw std::runtime_error("no config.json in " + model_dir);
    }
    const json config = json::parse(in);
    double K = std::max(config.at("hidden_size").get<double>(), config.at("vocab_size").get<double>());
    for (const char * key : {"intermediate_size", "moe_intermediate_size", "shared_expert_intermediate_size"}) {
        if (config.contains(key) && config.at(key).is_number()) {
            K = std::max(K, config.at(key).get<double>());
        }
    }
    const double L = config.at("num_hidden_layers").get<double>();
    constexpr double u = 0x1p-24;
    return u * std::max(1.0, max_abs_logit) * std::sqrt(K) * (L + 1);
}

double fp32_logprob_bound(const Fixture & f) {
    double Z = 0;
    for (const auto & [name, t] : f.tensors_under("logits")) {
        for (double x : engine::host_tensor_values(t)) {
            Z = std::max(Z, std::abs(x));
        }
    }
    return fp32_logprob_bound(f.model_dir, Z);
}

double max_abs_diff(const std::vector<double> & a, const std::vector<double> & b) {
    if (a.size() != b.size()) {
        return INFINITY;
    }
    double m = 0;
    for (size_t i = 0; i < a.size(); ++i) {
        m = std::max(m, std::abs(a[i] - b[i]));
    }
    return m;
}

double max_allclose_excess(const std::vector<double> & a, const std::vector<double> & b, double rtol) {
    if (a.size() != b.size()) {
        return INFINITY;
    }
    double m = 0;
    for (size_t i = 0; i < a.size(); ++i) {
        m = std::max(m, std::abs(a[i] - b[i]) - rtol * std::abs(b[i]));
    }
    return m;
}

double max_rel_diff(const std::vector<double> & a, const std::vector<double> & b) {
    double scale = 1e-30;
    for (double x : b) {
        scale = std::max(scale, std::abs(x));
    }
    return max_abs_diff(a, b) / scale;
}

}  // namespace tinkerd::testing
