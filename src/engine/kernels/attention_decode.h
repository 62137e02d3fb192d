// Decode-step attention read in place from the KV cache slabs: one new query row per sequence against the
// sequence's cached keys/values (fp32, CPU), without stacking the caches. Softmax in fp32 with the max
// subtracted, as cached_attention (kv_cache.h) computes it for n = 1.
#pragma once

#include <vector>

#include <torch/torch.h>

namespace tinkerd::engine::kernels {

// q [B, H, D] fp32 (row b = sequence b's new token); keys[b], values[b] [KV, >= lengths[b], D] fp32 views of
// the slabs (stride(1) == D, stride(2) == 1; the new token already written at lengths[b] - 1).
// Query head h uses kv head h / (H / KV). Returns [B, H * D]: softmax(q·kᵀ / √D) · v per (b, h).
torch::Tensor attention_decode(const torch::Tensor & q, const std::vector<torch::Tensor> & keys,
                               const std::vector<torch::Tensor> & values, const std::vector<int64_t> & lengths);

// True when attention_decode can read these caches (CPU, fp32, rows of D contiguous floats).
bool attention_decode_applies(const torch::Tensor & q, const std::vector<torch::Tensor> & keys,
                              const std::vector<torch::Tensor> & values);

namespace detail {
// One (sequence, kv head) of attention_decode: q, out [G, D] (the G query heads sharing the kv head); k, v [L, D]
// rows; scores [G, L] scratch; scale 1/√D as a float.
void attend_kv_head(const float * q, const float * k, const float * v, int64_t L, int64_t G, int64_t D, float scale,
                    float * scores, float * out);
}  // namespace detail

}  // namespace tinkerd::engine::kernels
