// Parsing of Hugging Face config.json into ModelConfig: the typed field readers (config_json.h) and the
// fields every family shares (architecture, sizes, attention, RoPE, norms, token ids), with transformers'
// defaults; errors name the field or the unsupported value. Experts and the hybrid layout: model_config_moe.cpp.
#include "model/model_config.h"

#include <cmath>
#include <filesystem>
#include <fstream>
#include <sstream>

#include "common/json_depth.h"
#include "model/config_json.h"

namespace tinkerd::model {

namespace config_json {

bool is_present(const json & obj, const std::string & key) {
    return obj.contains(key) && !obj.at(key).is_null();
}

Error missing_field(const std::string & key) {
    return invalid_argument(CONFIG_PREFIX + ("missing field '" + key + "'"));
}

Result<int64_t> as_int(const json & value, const std::string & key) {
    if (value.is_number_integer()) {
        return value.get<int64_t>();
    }
    // Some exporters write integral values as floats (e.g. 8192.0); accept those when exact.
    const double x = value.is_number_float() ? value.get<double>() : 0.5;
    if (std::floor(x) == x && std::fabs(x) < 9.0e18) {
        return static_cast<int64_t>(x);
    }
    return invalid_argument(CONFIG_PREFIX + ("field '" + key + "' must be an integer, got " + value.dump()));
}

Result<int64_t> required_int(const json & obj, const std::string & key) {
    if (!is_present(obj, key)) {
        return missing_field(key);
    }
    return as_int(obj.at(key), key);
}

Result<int64_t> optional_int(const json & obj, const std::string & key, int64_t fallback) {
    return is_present(obj, key) ? as_int(obj.at(key), key) : Result<int64_t>(fallback);
}

Result<double> optional_double(const json & obj, const std::string & key, double fallback) {
    if (!is_present(obj, key)) {
        return fallback;
    }
    if (!obj.at(key).is_number()) {
        return invalid_argument(CONFIG_PREFIX + ("field '" + key + "' must be a number, got " + obj.at(key).dump()));
    }
    return obj.at(key).get<double>();
}

Result<bool> optional_bool(const json & obj, const std::string & key, bool fallback) {
    if (!is_present(obj, key)) {
        return fallback;
    }
    if (!obj.at(key).is_boolean()) {
        return invalid_argument(CONFIG_PREFIX + ("field '" + key + "' must be a boolean, got " + obj.at(key).dump()));
    }
    return obj.at(key).get<bool>();
}

Result<std::string> optional_string(const json & obj, const std::string & key) {
    if (!is_present(obj, key)) {
        return std::string();
    }
    if (!obj.at(key).is_string()) {
        return invalid_argument(CONFIG_PREFIX + ("field '" + key + "' must be a string, got " + obj.at(key).dump()));
    }
    return obj.at(key).get<std::string>();
}

}  // namespace config_json

namespace {

using namespace config_json;

bool is_qwen3_5(const std::string & architecture) {
    return architecture == "Qwen3_5ForConditionalGeneration" || architecture == "Qwen3_5ForCausalLM" ||
           architecture == "Qwen3_5MoeForConditionalGeneration" || architecture == "Qwen3_5MoeForCausalLM";
}

bool is_qwen3_vl(const std::string & architecture) {
    return architecture == "Qwen3VLForConditionalGeneration" || architecture == "Qwen3VLMoeForConditionalGeneration";
}

// Sets architecture, family and the family-specific flags (attention_bias, qk_norm).
Result<void> parse_architecture(const json & obj, ModelConfig & config) {
    if (!is_present(obj, "architectures") || !obj.at("architectures").is_array() || obj.at("architectures").empty() ||
        !obj.at("architectures")[0].is_string()) {
        return missing_field("architectures");
    }
    config.architecture = obj.at("architectures")[0].get<std::string>();
    auto attention_bias = optional_bool(obj, "attention_bias", false);
    TRY_STATUS(attention_bias);
    if (config.architecture == "LlamaForCausalLM") {
        config.family = ArchFamily::LLAMA;
        config.attention_bias = attention_bias.value();
    } else if (config.architecture == "Qwen2ForCausalLM") {
        config.family = ArchFamily::QWEN2;
        config.attention_bias = true;
    } else if (config.architecture == "Qwen3ForCausalLM" || config.architecture == "Qwen3MoeForCausalLM" ||
               is_qwen3_vl(config.architecture)) {
        const bool moe =
            config.architecture == "Qwen3MoeForCausalLM" || config.architecture == "Qwen3VLMoeForConditionalGeneration";
        config.family = moe ? ArchFamily::QWEN3_MOE : ArchFamily::QWEN3;
        config.attention_bias = attention_bias.value();
        config.qk_norm = true;
    } else if (is_qwen3_5(config.architecture)) {
        const bool moe = config.architecture.rfind("Qwen3_5Moe", 0) == 0;
        config.family = moe ? ArchFamily::QWEN3_5_MOE : ArchFamily::QWEN3_5;
        config.qk_norm = true;
    } else {
        return unsupported(CONFIG_PREFIX + ("unsupported architecture '" + config.architecture +
                                            "' (supported: LlamaForCausalLM, Qwen2ForCausalLM, Qwen3ForCausalLM, "
                                            "Qwen3MoeForCausalLM, Qwen3_5ForCausalLM, Qwen3_5MoeForCausalLM and "
                                            "their ForConditionalGeneration models, Qwen3VLForConditionalGeneration, "
                                            "Qwen3VLMoeForConditionalGeneration)"));
    }
    return {};
}

// Reads the required integer sizes; each must be positive.
Result<void> parse_required_sizes(const json & obj, ModelConfig & config) {
    struct Field {
        const char * key;
        int64_t * target;
    };
    const Field required[] = {{"vocab_size", &config.vocab_size},
                              {"hidden_size", &config.hidden_size},
                              {"intermediate_size", &config.intermediate_size},
                              {"num_hidden_layers", &config.n_layers},
                              {"num_attention_heads", &config.n_heads}};
    for (const Field & field : required) {
        if (config.family == ArchFamily::QWEN3_5_MOE && std::string(field.key) == "intermediate_size" &&
            !is_present(obj, field.key)) {
            config.intermediate_size = 1;  // every layer is sparse: no dense MLP
            continue;
        }
        auto value = required_int(obj, field.key);
        TRY_STATUS(value);
        *field.target = value.value();
        if (*field.target <= 0) {
            return invalid_argument(CONFIG_PREFIX + (std::string("field '") + field.key + "' must be positive, got " +
                                                     std::to_string(*field.target)));
        }
    }
    return {};
}

// Attention head layout and context length, with defaults derived from the required sizes.
Result<void> parse_attention_sizes(const json & obj, ModelConfig & config) {
    auto kv_heads = optional_int(obj, "num_key_value_heads", config.n_heads);
    TRY_STATUS(kv_heads);
    config.n_kv_heads = kv_heads.value();
    if (config.n_kv_heads <= 0 || config.n_heads % config.n_kv_heads != 0) {
        return invalid_argument(CONFIG_PREFIX + ("num_key_value_heads (" + std::to_string(config.n_kv_heads) +
                                                 ") must be positive and divide num_attention_heads (" +
                                                 std::to_string(config.n_heads) + ")"));
    }
    if (!is_present(obj, "head_dim") && config.hidden_size % config.n_heads != 0) {
        return invalid_argument(CONFIG_PREFIX + ("hidden_size (" + std::to_string(config.hidden_size) +
                                                 ") is not divisible by num_attention_heads (" +
                                                 std::to_string(config.n_heads) + ") and head_dim is not given"));
    }
    auto head_dim = optional_int(obj, "head_dim", config.hidden_size / config.n_heads);
    TRY_STATUS(head_dim);
    config.head_dim = head_dim.value();
    if (config.head_dim <= 0) {
        return invalid_argument(CONFIG_PREFIX +
                                ("field 'head_dim' must be positive, got " + std::to_string(config.head_dim)));
    }
    auto max_pos = optional_int(obj, "max_position_embeddings", 2048);
    TRY_STATUS(max_pos);
    config.max_position_embeddings = max_pos.value();
    if (config.max_position_embeddings <= 0) {
        return invalid_argument(CONFIG_PREFIX + std::string("field 'max_position_embeddings' must be positive"));
    }
    return {};
}

Result<double> required_positive_double(const json & obj, const std::string & key, const std::string & label) {
    if (!is_present(obj, key)) {
        return missing_field(label);
    }
    auto value = optional_double(obj, key, 0.0);
    TRY_STATUS(value);
    if (!(value.value() > 0.0)) {
        return invalid_argument(CONFIG_PREFIX + ("field '" + label + "' must be positive"));
    }
    return value.value();
}

// Fills the llama3 RoPE frequency-scaling parameters; all four are required, as in transformers.
Result<void> parse_llama3_scaling(const json & scaling, RopeScaling & out) {
    out.type = "llama3";
    auto factor = required_positive_double(scaling, "factor", "rope_scaling.factor");
    TRY_STATUS(factor);
    auto low = required_positive_double(scaling, "low_freq_factor", "rope_scaling.low_freq_factor");
    TRY_STATUS(low);
    auto high = required_positive_double(scaling, "high_freq_factor", "rope_scaling.high_freq_factor");
    TRY_STATUS(high);
    if (!is_present(scaling, "original_max_position_embeddings")) {
        return missing_field("rope_scaling.original_max_position_embeddings");
    }
    auto original =
        as_int(scaling.at("original_max_position_embeddings"), "rope_scaling.original_max_position_embeddings");
    TRY_STATUS(original);
    if (original.value() <= 0 || high.value() <= low.value()) {
        return invalid_argument(CONFIG_PREFIX +
                                std::string("rope_scaling: need original_max_position_embeddings > 0 and "
                                            "high_freq_factor > low_freq_factor"));
    }
    out.factor = factor.value();
    out.low_freq_factor = low.value();
    out.high_freq_factor = high.value();
    out.original_max_position_embeddings = original.value();
    return {};
}

// The scaling object ("rope_scaling", or transformers 5's "rope_parameters", which also holds rope_theta).
Result<void> parse_rope_scaling(const json & scaling, const std::string & key, ModelConfig & config) {
    if (!scaling.is_object()) {
        return invalid_argument(CONFIG_PREFIX +
                                ("field '" + key + "' must be an object or null, got " + scaling.dump()));
    }
    auto type =
        is_present(scaling, "rope_type") ? optional_string(scaling, "rope_type") : optional_string(scaling, "type");
    TRY_STATUS(type);
    if (type.value() == "default" || (type.value().empty() && key == "rope_parameters")) {
        return {};
    }
    if (type.value() == "llama3") {
        return parse_llama3_scaling(scaling, config.rope_scaling);
    }
    if (type.value().empty()) {
        return missing_field(key + ".rope_type");
    }
    return unsupported(CONFIG_PREFIX +
                       ("unsupported " + key + " type '" + type.value() + "' (supported: llama3, default)"));
}

Result<void> parse_rope(const json & obj, ModelConfig & config) {
    // transformers >= 5 saves rope_theta and the scaling fields together under "rope_parameters".
    const bool has_parameters = is_present(obj, "rope_parameters");
    if (has_parameters && !obj.at("rope_parameters").is_object()) {
        return invalid_argument(CONFIG_PREFIX + ("field 'rope_parameters' must be an object or null, got " +
                                                 obj.at("rope_parameters").dump()));
    }
    const json & theta_source =
        has_parameters && is_present(obj.at("rope_parameters"), "rope_theta") ? obj.at("rope_parameters") : obj;
    auto theta = optional_double(theta_source, "rope_theta", 10000.0);
    TRY_STATUS(theta);
    config.rope_theta = theta.value();
    if (!(config.rope_theta > 0.0)) {
        return invalid_argument(CONFIG_PREFIX + std::string("field 'rope_theta' must be positive"));
    }
    if (is_present(obj, "rope_scaling")) {
        return parse_rope_scaling(obj.at("rope_scaling"), "rope_scaling", config);
    }
    return has_parameters ? parse_rope_scaling(obj.at("rope_parameters"), "rope_parameters", config) : Result<void>{};
}

// Reads a token id that may be an integer, a list of integers (the first is used) or null (-1).
Result<int64_t> parse_token_id(const json & obj, const std::string & key) {
    if (!is_present(obj, key)) {
        return int64_t{-1};
    }
    const json & value = obj.at(key);
    if (value.is_array()) {
        return value.empty() ? Result<int64_t>(int64_t{-1}) : as_int(value[0], key);
    }
    return as_int(value, key);
}

// Everything else: norms, activation, embeddings, dtype, token ids and features tinkerd does not implement.
Result<void> parse_misc(const json & obj, ModelConfig & config) {
    auto eps = optional_double(obj, "rms_norm_eps", 1e-6);
    TRY_STATUS(eps);
    config.rms_norm_eps = eps.value();
    if (!(config.rms_norm_eps > 0.0)) {
        return invalid_argument(CONFIG_PREFIX + std::string("field 'rms_norm_eps' must be positive"));
    }
    auto act = optional_string(obj, "hidden_act");
    TRY_STATUS(act);
    if (!act.value().empty() && act.value() != "silu") {
        return unsupported(CONFIG_PREFIX + ("unsupported hidden_act '" + act.value() + "' (supported: silu)"));
    }
    for (const char * flag : {"mlp_bias", "use_sliding_window"}) {
        auto enabled = optional_bool(obj, flag, false);
        TRY_STATUS(enabled);
        if (enabled.value()) {
            return unsupported(CONFIG_PREFIX + (std::string(flag) + " = true is not supported"));
        }
    }
    auto tie = optional_bool(obj, "tie_word_embeddings", false);
    TRY_STATUS(tie);
    config.tie_word_embeddings = tie.value();
    // Newer transformers write "dtype" instead of "torch_dtype".
    auto dtype = optional_string(obj, is_present(obj, "torch_dtype") ? "torch_dtype" : "dtype");
    TRY_STATUS(dtype);
    config.torch_dtype = dtype.value();
    auto bos = parse_token_id(obj, "bos_token_id");
    TRY_STATUS(bos);
    config.bos_token_id = bos.value();
    auto eos = parse_token_id(obj, "eos_token_id");
    TRY_STATUS(eos);
    config.eos_token_id = eos.value();
    return {};
}

}  // namespace

Result<ModelConfig> parse_model_config(const std::string & json_text) {
    json obj;
    TRY_STATUS(check_json_depth(json_text, "config.json"));
    try {
        obj = json::parse(json_text);
    } catch (const json::exception & e) {
        return invalid_argument(CONFIG_PREFIX + std::string("not valid JSON: ") + e.what());
    }
    if (!obj.is_object()) {
        return invalid_argument(CONFIG_PREFIX + std::string("top level is not a JSON object"));
    }
    ModelConfig config;
    TRY_STATUS(parse_architecture(obj, config));
    // Qwen3.5 and Qwen3-VL checkpoints (image-text-to-text) describe their text model under "text_config".
    const bool nested =
        (is_qwen3_5(config.architecture) || is_qwen3_vl(config.architecture)) && is_present(obj, "text_config");
    if (nested && !obj.at("text_config").is_object()) {
        return invalid_argument(CONFIG_PREFIX + std::string("field 'text_config' must be an object"));
    }
    json body = nested ? obj.at("text_config") : obj;
    if (nested && !is_present(body, "tie_word_embeddings") && is_present(obj, "tie_word_embeddings")) {
        body["tie_word_embeddings"] = obj.at("tie_word_embeddings");
    }
    TRY_STATUS(parse_required_sizes(body, config));
    TRY_STATUS(parse_attention_sizes(body, config));
    TRY_STATUS(parse_rope(body, config));
    TRY_STATUS(parse_misc(body, config));
    TRY_STATUS(parse_moe(body, config));
    TRY_STATUS(parse_hybrid(body, config));
    TRY_STATUS(parse_vision(obj, body, config));
    return config;
}

Result<ModelConfig> load_model_config(const std::string & model_dir) {
    const std::string path = (std::filesystem::path(model_dir) / "config.json").string();
    std::ifstream in(path, std::ios::binary);
    if (!in) {
        return not_found("config.json not found: " + path);
    }
    std::ostringstream text;
    text << in.rdbuf();
    if (in.bad()) {
        return internal_error("cannot read " + path);
    }
    return parse_model_config(text.str());
}

}  // namespace tinkerd::model
