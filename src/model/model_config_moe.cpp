// config.json of the mixture-of-experts and hybrid families: the expert fields of Qwen3-MoE and Qwen3.5-MoE
// (which layers are sparse, the shared expert) and Qwen3.5's Gated DeltaNet layout (layer_types, the
// linear-attention sizes, the output gate, the partial rotary factor). Split from model_config.cpp.
#include "model/config_json.h"

namespace tinkerd::model::config_json {

namespace {

// Qwen3.5-MoE: every layer sparse, a shared expert (default 512 wide), always renormalised top-k (transformers'
// Qwen3_5MoeTopKRouter ignores norm_topk_prob); a non-empty mlp_only_layers is refused (transformers ignores it).
Result<void> parse_qwen3_5_moe_layers(const json & obj, ModelConfig & config) {
    config.sparse_layers.assign(config.n_layers, true);
    config.norm_topk_prob = true;
    auto shared = optional_int(obj, "shared_expert_intermediate_size", 512);
    TRY_STATUS(shared);
    if (shared.value() < 0) {
        return invalid_argument(CONFIG_PREFIX + std::string("field 'shared_expert_intermediate_size' must be >= 0"));
    }
    config.shared_expert_intermediate_size = shared.value();
    if (is_present(obj, "mlp_only_layers") &&
        (!obj.at("mlp_only_layers").is_array() || !obj.at("mlp_only_layers").empty())) {
        return unsupported(CONFIG_PREFIX + ("mlp_only_layers = " + obj.at("mlp_only_layers").dump() +
                                            " (Qwen3.5-MoE: every layer is sparse; supported: [])"));
    }
    return {};
}

// Qwen3-MoE: layer l is sparse when (l + 1) % decoder_sparse_step == 0 and l is not in mlp_only_layers.
Result<void> parse_qwen3_moe_layers(const json & obj, ModelConfig & config, int64_t sparse_step) {
    auto norm = optional_bool(obj, "norm_topk_prob", false);
    TRY_STATUS(norm);
    // Qwen3-VL-MoE's router (transformers' Qwen3VLMoeTextTopKRouter) always renormalises the top k.
    config.norm_topk_prob = norm.value() || config.architecture == "Qwen3VLMoeForConditionalGeneration";
    config.sparse_layers.assign(config.n_layers, false);
    for (int64_t layer = 0; layer < config.n_layers; ++layer) {
        config.sparse_layers[layer] = (layer + 1) % sparse_step == 0;
    }
    if (!is_present(obj, "mlp_only_layers")) {
        return {};
    }
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
    return {};
}

}  // namespace

// The expert fields of a Qwen3-MoE / Qwen3.5-MoE config, with transformers' defaults for the family (Qwen3-MoE:
// 128 experts of 768, Qwen3.5-MoE: 256 of 512; top 8), and which layers are sparse.
Result<void> parse_moe(const json & obj, ModelConfig & config) {
    if (config.family != ArchFamily::QWEN3_MOE && config.family != ArchFamily::QWEN3_5_MOE) {
        return {};
    }
    const bool qwen3_5 = config.family == ArchFamily::QWEN3_5_MOE;
    const char * experts_key = is_present(obj, "num_experts") ? "num_experts" : "num_local_experts";
    struct Field {
        const char * key;
        int64_t fallback;
        int64_t * target;
    };
    int64_t sparse_step = 1;
    const Field fields[] = {{experts_key, qwen3_5 ? 256 : 128, &config.n_experts},
                            {"num_experts_per_tok", 8, &config.n_experts_per_token},
                            {"moe_intermediate_size", qwen3_5 ? 512 : 768, &config.moe_intermediate_size},
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
    return qwen3_5 ? parse_qwen3_5_moe_layers(obj, config) : parse_qwen3_moe_layers(obj, config, sparse_step);
}

namespace {

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

}  // namespace

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

}  // namespace tinkerd::model::config_json
