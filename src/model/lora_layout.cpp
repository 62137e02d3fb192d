// LoRA layout: target selection, factor shapes (dense and shared-outer experts), key names, counts.
#include "model/lora_layout.h"

namespace tinkerd::model {

const char * lora_target_name(LoraTarget target) {
    // Experts as in Tinker's own adapter files (tinker-cookbook's weights/ merge reads them): w1 gate, w3 up,
    // w2 down.
    static const char * names[] = {"q_proj",    "k_proj",     "v_proj",     "o_proj",     "gate_proj", "up_proj",
                                   "down_proj", "experts.w1", "experts.w3", "experts.w2", "lm_head"};
    return names[static_cast<int>(target)];
}

ProjectionShape projection_shape(const ModelConfig & c, LoraTarget target) {
    const int64_t q_dim = c.n_heads * c.head_dim;
    const int64_t kv_dim = c.n_kv_heads * c.head_dim;
    switch (target) {
        case LoraTarget::Q:
            return {c.hidden_size, q_dim};
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

bool is_expert(LoraTarget target) {
    return target == LoraTarget::EXPERT_GATE || target == LoraTarget::EXPERT_UP || target == LoraTarget::EXPERT_DOWN;
}

// Whether the layer has this projection at all: a sparse layer has experts instead of the dense MLP.
bool exists_in_layer(const ModelConfig & c, int64_t layer, LoraTarget target) {
    const bool dense_mlp = target == LoraTarget::GATE || target == LoraTarget::UP || target == LoraTarget::DOWN;
    if (dense_mlp) {
        return !c.is_sparse_layer(layer);
    }
    return !is_expert(target) || c.is_sparse_layer(layer);
}

bool is_selected(const LoraSelection & s, LoraTarget target) {
    if (target == LoraTarget::LM_HEAD) {
        return s.unembed;
    }
    return static_cast<int>(target) <= static_cast<int>(LoraTarget::O) ? s.attn : s.mlp;
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

std::string peft_key(int64_t layer, LoraTarget target, bool is_b) {
    const char * suffix = is_b ? ".lora_B.weight" : ".lora_A.weight";
    if (target == LoraTarget::LM_HEAD) {
        return std::string("base_model.model.lm_head") + suffix;
    }
    const bool is_attn = static_cast<int>(target) <= static_cast<int>(LoraTarget::O);
    return "base_model.model.model.layers." + std::to_string(layer) + (is_attn ? ".self_attn." : ".mlp.") +
           lora_target_name(target) + suffix;
}

}  // namespace tinkerd::model
