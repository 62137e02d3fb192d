// The bf16 dot-product path of matmul.h for many rows: inputs already rounded to bf16, weight blocks packed
// into oneDNN's VNNI layout (pairs along the reduction) and multiplied by libtorch's exported oneDNN brgemm
// micro-kernel (ATen/native/CPUBlas.h) with fp32 accumulation and fp32 output.
#pragma once

#include <torch/torch.h>

namespace tinkerd::engine::kernels::detail {

// True when this CPU has bf16 dot-product instructions (AVX-512-BF16 or AMX-BF16) and a probe product
// through brgemm equals the fp32 reference; checked once per process.
bool brgemm_bf16_supported();

// y [T, out] fp32 = xb [T, in] bf16 · w [out, in]ᵀ (bf16, contiguous); in must be even.
void brgemm_forward(const torch::Tensor & xb, const torch::Tensor & w, torch::Tensor & y);

// dx [T, in] fp32 = dyb [T, out] bf16 · w [out, in] (bf16, contiguous); out must be even.
void brgemm_backward(const torch::Tensor & dyb, const torch::Tensor & w, torch::Tensor & dx);

}  // namespace tinkerd::engine::kernels::detail
