// Fixture loading for the reference tests (see fixture.h).
#include "fixture.h"

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
