// LoRA layout: which projections of a model a LoRA adapter trains (Tinker's train_attn / train_mlp /
// train_unembed), the shapes of their A and B factors, their PEFT key names and the parameter count.
// Torch-free, so the engine builds adapters from it and tests check it against the cookbook's table.
#pragma once

#include <cstdint>
#include <string>
#include <vector>

#include "model/model_config.h"

namespace tinkerd::model {

// Dense projections, the experts of a sparse (MoE) layer and its shared expert (Qwen3.5-MoE), the Gated
// DeltaNet projections of a linear-attention layer (Qwen3.5: the fused in_proj_qkv is trained as three
// LoRAs, as Tinker does), and the model-level lm_head.
enum class LoraTarget {
    Q = 0,
    K,
    V,
    O,
    GATE,
    UP,
    DOWN,
    EXPERT_GATE,
    EXPERT_UP,
    EXPERT_DOWN,
    SHARED_GATE,
    SHARED_UP,
    SHARED_DOWN,
    LINEAR_Q,
    LINEAR_K,
    LINEAR_V,
    LINEAR_Z,
    LINEAR_OUT,
    LM_HEAD
};
inline constexpr int N_LAYER_TARGETS = 18;  // Q..LINEAR_OUT; LM_HEAD is model-level

const char * lora_target_name(LoraTarget target);  // "q_proj", ..., "experts.w1" (gate), "lm_head"

// Which parts an adapter trains (Tinker's create_lora_training_client flags).
struct LoraSelection {
    bool attn = true;
    bool mlp = true;
    bool unembed = true;
};

// The (in, out) features of a dense target's base projection (an expert's own projection for the
// expert targets).
struct ProjectionShape {
    int64_t in = 0;
    int64_t out = 0;
};
ProjectionShape projection_shape(const ModelConfig & config, LoraTarget target);

// One trained projection: y += (alpha/R)·(x·Aᵀ)·Bᵀ. Dense: A [R, in], B [out, R]. Experts use Tinker's
// "shared-outer" scheme: the factor on the hidden dimension C is shared by the E experts of the layer,
// the other is per expert, with Tinker's file shapes (a leading 1 on the shared factor) — gate/up:
// A [1, R, C] shared, B [E, F, R]; down: A [E, R, F], B [1, C, R] shared.
struct LoraPair {
    int64_t layer = -1;  // -1 for the lm_head
    LoraTarget target = LoraTarget::Q;
    std::vector<int64_t> a_shape;
    std::vector<int64_t> b_shape;
    int64_t fan_in = 0;  // in-features of A's rows: A is drawn uniformly from ±1/sqrt(fan_in), as PEFT
    int64_t size() const;
};

// Every trained pair in parameter order (layers in order, their targets in enum order, then lm_head).
std::vector<LoraPair> lora_pairs(const ModelConfig & config, const LoraSelection & selection, int64_t rank);
// Sum of the pairs' A and B sizes.
int64_t lora_parameter_count(const ModelConfig & config, const LoraSelection & selection, int64_t rank);

// The module names an adapter of this selection trains, as adapter_config.json's target_modules lists them
// (each once, in parameter order): the names inside peft_key — "q_proj", "in_proj_q", "in_proj_z", "out_proj",
// "experts.w1", "shared_expert.gate_proj", ..., "lm_head" — so every family's real targets are named.
std::vector<std::string> lora_target_modules(const ModelConfig & config, const LoraSelection & selection);

// Adapter file key of a target's A or B, PEFT's naming: "base_model.model.model.layers.3.self_attn.q_proj.
// lora_A.weight". Experts (PEFT has no such module) as Tinker's own files name them:
// "base_model.model.model.layers.3.mlp.experts.w1.lora_A.weight" (w1 gate, w3 up, w2 down), shapes above.
std::string peft_key(int64_t layer, LoraTarget target, bool is_b);

}  // namespace tinkerd::model
