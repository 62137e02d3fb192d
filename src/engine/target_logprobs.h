// Target logprobs of the lm_head without ever holding [T, V] logits or their gradient at once: rows go
// through the vocabulary in chunks. A training forward keeps each chunk's softmax for the backward when memory
// allows ([T, V] fp32); otherwise it keeps only h, the per-row logsumexp and the target index, and the
// backward recomputes each chunk's logits (one more lm_head product) to form its softmax gradient.
#pragma once

#include <vector>

#include <torch/torch.h>

namespace tinkerd::engine {

// The lm_head LoRA of rows [begin, end) of h: their logits gain u·Bᵀ.
struct HeadLoraSegment {
    int64_t begin = 0;
    int64_t end = 0;
    torch::Tensor u;  // [end - begin, R] = scale·h_seg·Aᵀ, h's dtype (may require grad)
    torch::Tensor b;  // [V, R] LoRA B, h's dtype (may require grad)
};

// Whether a forward that needs gradients keeps its softmax [T, V] for the backward (bit-identical to
// recomputing it: the same ops on the same values). automatic: when T·V elements fit in an eighth of the
// memory available now, on the CPU only (TINKERD_KEEP_HEAD_SOFTMAX=1 / 0 forces it either way).
enum class HeadSoftmax { automatic, keep, recompute };

// picked [T, Kmax] = logit[t, index[t, k]] − logsumexp(logit[t, :]) with logits = h·Wᵀ (+ u·Bᵀ on the
// segments' rows), computed chunk_rows rows at a time. h [T, C] fp32 (or fp64), w [V, C] the frozen
// base lm_head (bf16, fp32 or fp64: kernels::matmul_weight), index [T, Kmax] int64.
// Autograd gives gradients for h and every segment's u and b; w and index are constants.
torch::Tensor chunked_target_logprobs(const torch::Tensor & h, const torch::Tensor & w,
                                      const std::vector<HeadLoraSegment> & segments, const torch::Tensor & index,
                                      int64_t chunk_rows = 256, HeadSoftmax softmax = HeadSoftmax::automatic);

}  // namespace tinkerd::engine
