// Fused forward and backward of the transformer's elementwise blocks (RMSNorm, RoPE, SwiGLU): one pass
// over the rows each way instead of 5-10 libtorch ops and their temporaries. CPU fp32/fp64; other
// devices and dtypes run the plain torch composition (*_reference), which the tests compare against.
#pragma once

#include <torch/torch.h>

namespace tinkerd::engine {

// y = x · rsqrt(mean(x², -1) + eps) · weight over the last dim; x [..., C], weight [C] (no gradient).
torch::Tensor fused_rms_norm(const torch::Tensor & x, const torch::Tensor & weight, double eps);
torch::Tensor rms_norm_reference(const torch::Tensor & x, const torch::Tensor & weight, double eps);

// Rotary embedding, halves convention: y = x·cos + cat(-x₂, x₁)·sin. x [T, heads, D]; cos, sin [T, 1, D]
// with equal halves (cat(freqs, freqs)), no gradient.
torch::Tensor fused_rope(const torch::Tensor & x, const torch::Tensor & cos, const torch::Tensor & sin);
torch::Tensor rope_reference(const torch::Tensor & x, const torch::Tensor & cos, const torch::Tensor & sin);

// SwiGLU's product silu(gate) · up; gate, up [T, F].
torch::Tensor fused_swiglu(const torch::Tensor & gate, const torch::Tensor & up);
torch::Tensor swiglu_reference(const torch::Tensor & gate, const torch::Tensor & up);

}  // namespace tinkerd::engine
