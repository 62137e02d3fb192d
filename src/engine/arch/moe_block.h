// The routed mixture-of-experts MLP of Qwen3-MoE and Qwen3.5-MoE (every family's sparse layers): a router, the
// top-k experts of each token, each expert's SwiGLU, the weighted sum, and Qwen3.5-MoE's gated shared expert;
// LoRA on the experts in Tinker's "shared-outer" layout (model/lora_layout.h: the hidden-side factor is shared).
#pragma once

#include <vector>

#include <torch/torch.h>

#include "engine/lora.h"
#include "engine/weights.h"
#include "model/model_config.h"

namespace tinkerd::engine {

// Router and experts of one sparse layer: `mlp.gate.weight` and either one tensor per expert
// (`mlp.experts.<e>.{gate,up,down}_proj.weight`, the Hugging Face checkpoints) or transformers 5's fused
// `mlp.experts.gate_up_proj` [E, 2F, C] / `mlp.experts.down_proj` [E, C, F]; with a shared expert
// (Qwen3.5-MoE: config.shared_expert_intermediate_size > 0) also `mlp.shared_expert.{gate,up,down}_proj.weight`
// (into w_gate / w_up / w_down) and `mlp.shared_expert_gate.weight` [1, C].
Result<void> load_moe_weights(const WeightLoader & loader, const model::ModelConfig & config, int64_t layer,
                              LayerWeights & out);

// Each token's experts and their weights, as transformers computes them: softmax of the router logits (in
// the activation dtype, fp32 normally), torch::topk (so ties between experts resolve as in transformers: the
// same call on the same values), renormalised over the k chosen when norm_topk_prob.
struct Routing {
    torch::Tensor weights;  // [T, k] act dtype; differentiable with respect to x
    torch::Tensor experts;  // [T, k] int64
};
Routing route_tokens(const torch::Tensor & x, const torch::Tensor & router, int64_t top_k, bool norm_topk_prob);

// x [T, C] -> [T, C]: Σ over each token's k experts of weight · expert(x), experts summed in ascending
// order (as transformers does); each segment's adapter adds its expert LoRA deltas. With a shared expert,
// + sigmoid(x·shared_expert_gateᵀ) · SwiGLU_shared(x) (its LoRA: the SHARED_* targets; the gate is not trained).
torch::Tensor moe_forward(const LayerWeights & weights, const model::ModelConfig & config, const torch::Tensor & x,
                          const std::vector<RowSegment> & segments, int64_t layer);

}  // namespace tinkerd::engine
