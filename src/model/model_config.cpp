// Parsing of Hugging Face config.json into ModelConfig. Reads the fields the supported architectures
// (Llama, Qwen2, Qwen3, Qwen3-MoE) need, applies the transformers defaults, and rejects what tinkerd cannot run
// with an error naming the field or the unsupported value.
#include "model/model_config.h"

#include <cmath>
#include <filesystem>
#include <fstream>
#include <sstream>

#include <nlohmann/json.hpp>

#include "common/json_depth.h"
namespace tinkerd::model {

namespace {

using nlohmann::json;

constexpr const char * CONFIG_PREFIX = "config.json: ";

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

bool is_qwen3_5(const std::string & architecture) {
    return architecture == "Qwen3_5ForConditionalGeneration" || architecture == "Qwen3_5ForCausalLM" ||
           architecture == "Qwen3_5MoeForConditionalGeneration" || architecture == "Qwen3_5MoeForCausalLM";
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
    } else if (config.architecture == "Qwen3ForCausalLM" || config.architecture == "Qwen3MoeForCausalLM") {
        config.family = config.architecture == "Qwen3ForCausalLM" ? ArchFamily::QWEN3 : ArchFamily::QWEN3_MOE;
        config.attention_bias = attention_bias.value();
        config.qk_norm = true;
    } else if (is_qwen3_5(config.architecture)) {
        const bool moe = config.architecture.rfind("Qwen3_5Moe", 0) == 0;
        config.family = moe ? ArchFamily::QWEN3_5_MOE : ArchFamily::QWEN3_5;
        config.qk_norm = true;
    } else {
        return unsupported(CONFIG_PREFIX + ("unsupported architecture '" + config.architecture +
                                            "' (supported: LlamaForCausalLM, Qwen2ForCausalLM, Qwen3ForCausalLM, "
                                            "Qwen3MoeForCausalLM)"));
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

// The expert fields of a Qwen3-MoE config, with transformers' defaults, and which layers are sparse.
Result<void> parse_moe(const json & obj, ModelConfig & config) {
    if (config.family != ArchFamily::QWEN3_MOE && config.family != ArchFamily::QWEN3_5_MOE) {
        return {};
    }
    const char * experts_key = is_present(obj, "num_experts") ? "num_experts" : "num_local_experts";
    struct Field {
        const char * key;
        int64_t fallback;
        int64_t * target;
    };
    int64_t sparse_step = 1;
    const Field fields[] = {{experts_key, 128, &config.n_experts},
                            {"num_experts_per_tok", 8, &config.n_experts_per_token},
                            {"moe_intermediate_size", 768, &config.moe_intermediate_size},
                            {"decoder_sparse_step", 1, &sparse_step}};
    for (const Field & field : fields) {
        auto value = optional_int(obj, field.key, field.fallback);
        TRY_STATUS(value);
        *field.target = value.value();
        if (*field.target <= 0) {
            return invalid_argument(CONFIG_PREFIX + (std::string("field '") + field.key + "' must be positive, got " +
                                                     std::to_string(*field.target)));
        }
    }
    if (config.n_experts_per_token > config.n_experts) {
        return invalid_argument(CONFIG_PREFIX +
                                ("num_experts_per_tok (" + std::to_string(config.n_experts_per_token) +
                                 ") exceeds the number of experts (" + std::to_string(config.n_experts) + ")"));
    }
    auto norm = optional_bool(obj, "norm_topk_prob", false);
    TRY_STATUS(norm);
    config.norm_topk_prob = norm.value();
    config.sparse_layers.assign(config.n_layers, false);
    for (int64_t layer = 0; layer < config.n_layers; ++layer) {
        config.sparse_layers[layer] = (layer + 1) % sparse_step == 0;
    }
    if (config.family == ArchFamily::QWEN3_5_MOE) {  // every layer sparse, plus a shared expert
        config.sparse_layers.assign(config.n_layers, true);
        auto shared = optional_int(obj, "shared_expert_intermediate_size", 0);
        TRY_STATUS(shared);
        config.shared_expert_intermediate_size = shared.value();
        return {};
    }
    if (is_present(obj, "mlp_only_layers")) {
        const json & dense = obj.at("mlp_only_layers");
        if (!dense.is_array()) {
            return invalid_argument(CONFIG_PREFIX + ("field 'mlp_only_layers' must be a list, got " + dense.dump()));
        }
        for (const json & item : dense) {
            auto layer = as_int(item, "mlp_only_layers");
            TRY_STATUS(layer);
            if (layer.value() >= 0 && layer.value() < config.n_layers) {
                config.sparse_layers[layer.value()] = false;
            }
        }
    }
    return {};
}

// Which layers are Gated DeltaNet: "layer_types", else every layer but each full_attention_interval-th.
Result<void> parse_layer_types(const json & obj, ModelConfig & config) {
    config.linear_attention_layers.assign(config.n_layers, false);
    if (is_present(obj, "layer_types")) {
        const json & types = obj.at("layer_types");
        if (!types.is_array() || static_cast<int64_t>(types.size()) != config.n_layers) {
            return invalid_argument(CONFIG_PREFIX + std::string("field 'layer_types' must be a list of "
                                                                "num_hidden_layers strings"));
        }
        for (int64_t layer = 0; layer < config.n_layers; ++layer) {
            const json & t = types[layer];
            if (!t.is_string() || (t != "linear_attention" && t != "full_attention")) {
                return unsupported(CONFIG_PREFIX + ("layer_types[" + std::to_string(layer) + "] = " + t.dump() +
                                                    " (supported: linear_attention, full_attention)"));
            }
            config.linear_attention_layers[layer] = t == "linear_attention";
        }
        return {};
    }
    auto interval = optional_int(obj, "full_attention_interval", 4);
    TRY_STATUS(interval);
    if (interval.value() <= 0) {
        return invalid_argument(CONFIG_PREFIX + std::string("field 'full_attention_interval' must be positive"));
    }
    for (int64_t layer = 0; layer < config.n_layers; ++layer) {
        config.linear_attention_layers[layer] = (layer + 1) % interval.value() != 0;
    }
    return {};
}

// The Gated DeltaNet sizes, the output gate and the partial rotary factor of a Qwen3.5 text config.
Result<void> parse_hybrid(const json & obj, ModelConfig & config) {
    if (config.family != ArchFamily::QWEN3_5 && config.family != ArchFamily::QWEN3_5_MOE) {
        return {};
    }
    TRY_STATUS(parse_layer_types(obj, config));
    struct Field {
        const char * key;
        int64_t fallback;
        int64_t * target;
    };
    const Field fields[] = {{"linear_num_key_heads", 16, &config.linear_k_heads},
                            {"linear_num_value_heads", 32, &config.linear_v_heads},
                            {"linear_key_head_dim", 128, &config.linear_k_head_dim},
                            {"linear_value_head_dim", 128, &config.linear_v_head_dim},
                            {"linear_conv_kernel_dim", 4, &config.linear_conv_kernel}};
    for (const Field & field : fields) {
        auto value = optional_int(obj, field.key, field.fallback);
        TRY_STATUS(value);
        *field.target = value.value();
        if (*field.target <= 0) {
            return invalid_argument(CONFIG_PREFIX + (std::string("field '") + field.key + "' must be positive"));
        }
    }
    if (config.linear_v_heads % config.linear_k_heads != 0) {
        return invalid_argument(CONFIG_PREFIX + std::string("linear_num_key_heads must divide linear_num_value_heads"));
    }
    auto gate = optional_bool(obj, "attn_output_gate", true);
    TRY_STATUS(gate);
    config.attn_output_gate = gate.value();
    const json & rope = is_present(obj, "rope_parameters") ? obj.at("rope_parameters") : obj;
    auto partial = optional_double(rope, "partial_rotary_factor", 0.25);
    TRY_STATUS(partial);
    if (!(partial.value() > 0.0 && partial.value() <= 1.0)) {
        return invalid_argument(CONFIG_PREFIX + std::string("partial_rotary_factor must be in (0, 1]"));
    }
    config.partial_rotary_factor = partial.value();
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
    // Qwen3.5 checkpoints (image-text-to-text) describe their text model under "text_config".
    const bool nested = is_qwen3_5(config.architecture) && is_present(obj, "text_config");
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
