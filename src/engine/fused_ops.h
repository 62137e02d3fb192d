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

// The per-row loops behind fused_rms_norm and fused_rope on raw fp32 rows, for code that runs its own parallel
// region (decode_layers.h): one compiled copy each, shared with the fused ops, so both compute the same bits.
// y [C] = x [C] · rsqrt(mean(x²) + eps) · w [C]; returns the rsqrt factor.
float rms_norm_row_f32(const float * x, const float * w, float * y, int64_t c, double eps);
// One token's heads x, y [heads, D] rotated by its cos, sin [D] (halves convention, as fused_rope).
void rope_token_f32(const float * x, const float * cos, const float * sin, float * y, int64_t heads, int64_t d);

}  // namespace tinkerd::engine
