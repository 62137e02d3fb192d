// LoRA layout: target selection, factor shapes (dense and shared-outer experts), key names, counts.
#include "model/lora_layout.h"

#include <algorithm>

namespace tinkerd::model {

const char * lora_target_name(LoraTarget target) {
    // Experts as in Tinker's own adapter files (tinker-cookbook's weights/ merge reads them): w1 gate, w3 up,
    // w2 down.
    static const char * names[] = {"q_proj",
                                   "k_proj",
                                   "v_proj",
                                   "o_proj",
                                   "gate_proj",
                                   "up_proj",
                                   "down_proj",
                                   "experts.w1",
                                   "experts.w3",
                                   "experts.w2",
                                   "shared_expert.gate_proj",
                                   "shared_expert.up_proj",
                                   "shared_expert.down_proj",
                                   "in_proj_q",
                                   "in_proj_k",
                                   "in_proj_v",
                                   "in_proj_z",
                                   "out_proj",
                                   "lm_head"};
    static_assert(sizeof(names) / sizeof(names[0]) == static_cast<size_t>(LoraTarget::LM_HEAD) + 1,
                  "one name per LoraTarget");
    return names[static_cast<int>(target)];
}

ProjectionShape projection_shape(const ModelConfig & c, LoraTarget target) {
    const int64_t q_dim = c.n_heads * c.head_dim;
    const int64_t kv_dim = c.n_kv_heads * c.head_dim;
    const int64_t key_dim = c.linear_k_heads * c.linear_k_head_dim;    // Kd
    const int64_t value_dim = c.linear_v_heads * c.linear_v_head_dim;  // Vd
    switch (target) {
        case LoraTarget::Q:  // with an output gate, q_proj emits [query_h ‖ gate_h] per head
            return {c.hidden_size, c.attn_output_gate ? 2 * q_dim : q_dim};
        case LoraTarget::K:
        case LoraTarget::V:
            return {c.hidden_size, kv_dim};
        case LoraTarget::O:
            return {q_dim, c.hidden_size};
        case LoraTarget::GATE:
        case LoraTarget::UP:
            return {c.hidden_size, c.intermediate_size};
        case LoraTarget::DOWN:
            return {c.intermediate_size, c.hidden_size};
        case LoraTarget::EXPERT_GATE:
        case LoraTarget::EXPERT_UP:
            return {c.hidden_size, c.moe_intermediate_size};
        case LoraTarget::EXPERT_DOWN:
            return {c.moe_intermediate_size, c.hidden_size};
        case LoraTarget::SHARED_GATE:
        case LoraTarget::SHARED_UP:
            return {c.hidden_size, c.shared_expert_intermediate_size};
        case LoraTarget::SHARED_DOWN:
            return {c.shared_expert_intermediate_size, c.hidden_size};
        case LoraTarget::LINEAR_Q:
        case LoraTarget::LINEAR_K:
            return {c.hidden_size, key_dim};
        case LoraTarget::LINEAR_V:
        case LoraTarget::LINEAR_Z:
            return {c.hidden_size, value_dim};
        case LoraTarget::LINEAR_OUT:
            return {value_dim, c.hidden_size};
        case LoraTarget::LM_HEAD:
            return {c.hidden_size, c.vocab_size};
    }
    return {};
}

int64_t LoraPair::size() const {
    int64_t a = 1, b = 1;
    for (int64_t d : a_shape) {
        a *= d;
    }
    for (int64_t d : b_shape) {
        b *= d;
    }
    return a + b;
}

namespace {

bool in_range(LoraTarget target, LoraTarget first, LoraTarget last) {
    return static_cast<int>(target) >= static_cast<int>(first) && static_cast<int>(target) <= static_cast<int>(last);
}

bool is_attention(LoraTarget target) {
    return in_range(target, LoraTarget::Q, LoraTarget::O);
}

bool is_linear_attention(LoraTarget target) {
    return in_range(target, LoraTarget::LINEAR_Q, LoraTarget::LINEAR_OUT);
}

// Whether the layer has this projection at all: a sparse layer has experts (and maybe a shared expert)
// instead of the dense MLP; a linear-attention layer has the Gated DeltaNet projections instead of q/k/v/o.
bool exists_in_layer(const ModelConfig & c, int64_t layer, LoraTarget target) {
    if (is_attention(target)) {
        return !c.is_linear_attention_layer(layer);
    }
    if (is_linear_attention(target)) {
        return c.is_linear_attention_layer(layer);
    }
    if (in_range(target, LoraTarget::GATE, LoraTarget::DOWN)) {
        return !c.is_sparse_layer(layer);
    }
    if (in_range(target, LoraTarget::SHARED_GATE, LoraTarget::SHARED_DOWN)) {
        return c.is_sparse_layer(layer) && c.shared_expert_intermediate_size > 0;
    }
    return c.is_sparse_layer(layer);  // the experts
}

bool is_selected(const LoraSelection & s, LoraTarget target) {
    if (target == LoraTarget::LM_HEAD) {
        return s.unembed;
    }
    return is_attention(target) || is_linear_attention(target) ? s.attn : s.mlp;
}

LoraPair make_pair(const ModelConfig & c, int64_t layer, LoraTarget target, int64_t rank) {
    const ProjectionShape p = projection_shape(c, target);
    const int64_t E = c.n_experts;
    LoraPair pair{layer, target, {rank, p.in}, {p.out, rank}, p.in};
    if (target == LoraTarget::EXPERT_GATE || target == LoraTarget::EXPERT_UP) {
        pair.a_shape = {1, rank, p.in};  // shared by the experts
        pair.b_shape = {E, p.out, rank};
    } else if (target == LoraTarget::EXPERT_DOWN) {
        pair.a_shape = {E, rank, p.in};
        pair.b_shape = {1, p.out, rank};  // shared by the experts
    }
    return pair;
}

}  // namespace

std::vector<LoraPair> lora_pairs(const ModelConfig & config, const LoraSelection & selection, int64_t rank) {
    std::vector<LoraPair> pairs;
    for (int64_t layer = 0; layer < config.n_layers; ++layer) {
        for (int t = 0; t < N_LAYER_TARGETS; ++t) {
            const auto target = static_cast<LoraTarget>(t);
            if (is_selected(selection, target) && exists_in_layer(config, layer, target)) {
                pairs.push_back(make_pair(config, layer, target, rank));
            }
        }
    }
    if (selection.unembed) {
        pairs.push_back(make_pair(config, -1, LoraTarget::LM_HEAD, rank));
    }
    return pairs;
}

int64_t lora_parameter_count(const ModelConfig & config, const LoraSelection & selection, int64_t rank) {
    int64_t total = 0;
    for (const LoraPair & pair : lora_pairs(config, selection, rank)) {
        total += pair.size();
    }
    return total;
}

std::vector<std::string> lora_target_modules(const ModelConfig & config, const LoraSelection & selection) {
    std::vector<std::string> modules;
    for (const LoraPair & pair : lora_pairs(config, selection, 1)) {
        const std::string name = lora_target_name(pair.target);
        if (std::find(modules.begin(), modules.end(), name) == modules.end()) {
            modules.push_back(name);
        }
    }
    return modules;
}

std::string peft_key(int64_t layer, LoraTarget target, bool is_b) {
    const char * suffix = is_b ? ".lora_B.weight" : ".lora_A.weight";
    if (target == LoraTarget::LM_HEAD) {
        return std::string("base_model.model.lm_head") + suffix;
    }
    const char * module = is_attention(target)          ? ".self_attn."
                          : is_linear_attention(target) ? ".linear_attn."
                                                        : ".mlp.";
    return "base_model.model.model.layers." + std::to_string(layer) + module + lora_target_name(target) + suffix;
}

}  // namespace tinkerd::model
