// A Hugging Face reference case (make_hf_fixtures.py: <fixtures>/hf/<case>/case.json + tensors.safetensors)
// loaded into engine inputs, shared by hf_reference_test.cpp and hf_export_tool.cpp.
// Loading throws with the path and the command to run when the fixture is missing.
#pragma once

#include <fstream>
#include <stdexcept>
#include <string>
#include <vector>

#include <nlohmann/json.hpp>

#include "fixture.h"

namespace tinkerd::testing {

inline const std::vector<std::string> HF_CASES = {"hf_llama_tiny",     "hf_qwen2_tiny",   "hf_qwen3_tiny",
                                                  "hf_qwen3_moe_tiny", "hf_qwen3_5_tiny", "hf_qwen3_5_moe_tiny",
                                                  "hf_stories260K"};

inline engine::HostTensor host_copy(const model::TensorView & v) {
    const auto * p = static_cast<const uint8_t *>(v.data);
    return {v.dtype, v.shape, std::vector<uint8_t>(p, p + v.n_bytes)};
}

struct HfCase {
    std::string name;
    std::string dir;         // <fixtures>/hf/<case>
    std::string model_dir;   // exactly as transformers' save_pretrained wrote it
    std::string compat_dir;  // the same weights, config.json with rope_theta / rope_scaling at top level
    engine::LoraSpec spec;
    std::vector<std::string> targets;
    std::vector<engine::Datum> datums;  // cross_entropy inputs: target_tokens and weights
    double expected_loss = 0;
    double max_abs_logit = 0;  // the float64 reference's largest |logit| (base or adapted): the bound's scale
    std::vector<int64_t> probe;
    std::shared_ptr<model::SafetensorsFile> tensors;

    std::vector<double> values(const std::string & name) const {
        return engine::host_tensor_values(host_copy(tensors->get(name).value()));
    }
    // Tensors under "<prefix>/" with the prefix stripped.
    std::map<std::string, engine::HostTensor> under(const std::string & prefix) const {
        std::map<std::string, engine::HostTensor> out;
        for (const std::string & name : tensors->names()) {
            if (name.rfind(prefix + "/", 0) == 0) {
                out[name.substr(prefix.size() + 1)] = host_copy(tensors->get(name).value());
            }
        }
        return out;
    }
};

// A cross_entropy datum of a case's JSON: its tokens, targets and weights.
inline engine::Datum ce_datum(const nlohmann::json & d) {
    engine::Datum datum;
    datum.tokens = d.at("tokens").get<std::vector<int64_t>>();
    const auto n = static_cast<int64_t>(datum.tokens.size());
    datum.loss_inputs["target_tokens"] = engine::make_host_tensor_i64({n}, d.at("targets").get<std::vector<int64_t>>());
    datum.loss_inputs["weights"] = engine::make_host_tensor_f32({n}, d.at("weights").get<std::vector<float>>());
    return datum;
}

inline HfCase load_hf_case(const std::string & name) {
    HfCase c;
    c.name = name;
    c.dir = fixtures_dir() + "/hf/" + name;
    std::ifstream in(c.dir + "/case.json");
    if (!in) {
        throw std::runtime_error("missing HF fixture " + c.dir +
                                 "/case.json: run `make fixtures` (tests/reference/make_hf_fixtures.py)");
    }
    const nlohmann::json j = nlohmann::json::parse(in);
    c.model_dir = j.at("model_dir");
    c.compat_dir = j.at("model_compat_dir");
    c.targets = j.at("targets").get<std::vector<std::string>>();
    auto has = [&](const char * t) { return std::find(c.targets.begin(), c.targets.end(), t) != c.targets.end(); };
    c.spec.rank = j.at("rank");
    c.spec.alpha = j.at("alpha");
    c.spec.train_attn = has("q_proj");
    c.spec.train_mlp = has("gate_proj");
    c.spec.train_unembed = has("lm_head");
    for (const auto & d : j.at("datums")) {
        c.datums.push_back(ce_datum(d));
    }
    c.expected_loss = j.at("expected_loss");
    if (!j.contains("max_abs_logit")) {
        throw std::runtime_error(c.dir + "/case.json predates max_abs_logit: run `make fixtures` again");
    }
    c.max_abs_logit = j.at("max_abs_logit");
    c.probe = j.at("probe").get<std::vector<int64_t>>();
    auto file = model::SafetensorsFile::open(c.dir + "/tensors.safetensors");
    if (!file.ok()) {
        throw std::runtime_error(file.error().message);
    }
    c.tensors = *file;
    return c;
}

}  // namespace tinkerd::testing
