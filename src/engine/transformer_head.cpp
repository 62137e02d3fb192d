// Transformer::target_logprobs: the lm_head and its per-segment LoRA as chunked target logprobs
// (target_logprobs.h). Only u = scale·h·Aᵀ [n, R] goes through ordinary autograd; the [T, V] logits
// and their gradient never exist. Also lm_head_weight: the stored lm_head, or its fp32 copy for an A/B on GPUs.
#include "engine/kernels/gpu_matmul.h"
#include "engine/target_logprobs.h"
#include "engine/transformer.h"

namespace tinkerd::engine {

torch::Tensor Transformer::target_logprobs(const torch::Tensor & h, const std::vector<RowSegment> & segments,
                                           const torch::Tensor & index) const {
    std::vector<HeadLoraSegment> loras;
    for (const RowSegment & s : segments) {
        const torch::Tensor * a = s.adapter ? s.adapter->lora_a(-1, LoraTarget::LM_HEAD) : nullptr;
        if (a == nullptr) {
            continue;
        }
        torch::Tensor h_seg = h.narrow(0, s.begin, s.end - s.begin).to(a->scalar_type());  // [n, C]
        torch::Tensor u = torch::matmul(h_seg, a->t()) * s.adapter->scale;                 // [n, R]
        loras.push_back({s.begin, s.end, u, *s.adapter->lora_b(-1, LoraTarget::LM_HEAD)});
    }
    // The stored lm_head (bf16 too: kernels::matmul_weight does fp32 math on it, GPUs split products).
    return chunked_target_logprobs(h, lm_head_weight(), loras, index);
}

const torch::Tensor & Transformer::lm_head_weight() const {
    return lm_head_exact_.defined() && !kernels::gpu_fast_paths() ? lm_head_exact_ : weights_.lm_head;
}

}  // namespace tinkerd::engine
