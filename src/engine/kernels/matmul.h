// Base-weight products with fp32 math over bf16-stored weights ("bf16 storage, fp32 math"): the weights
// stay bf16 in memory (half the bytes to read while decoding) and every product accumulates in fp32 on
// fp32 activations, so a bf16 checkpoint computes what fp32 would on the bf16-rounded weights.
#pragma once

#include <torch/torch.h>

namespace tinkerd::engine::kernels {

// y [T, out] fp32 = x [T, in] fp32 · w [out, in]ᵀ, w bf16 (or fp32: plain matmul). fp32 accumulation.
torch::Tensor matmul_weight(const torch::Tensor & x, const torch::Tensor & w);

// dx [T, in] fp32 = dy [T, out] fp32 · w [out, in], w bf16 (or fp32). The backward of matmul_weight.
torch::Tensor matmul_weight_backward(const torch::Tensor & dy, const torch::Tensor & w);

// y = x · wᵀ with autograd for x only (w is a frozen base weight): the op the transformer calls.
torch::Tensor base_linear(const torch::Tensor & x, const torch::Tensor & w);

// The generic ops the kernels replace (the reference in tests, and the path on GPUs and other CPUs).
torch::Tensor matmul_weight_generic(const torch::Tensor & x, const torch::Tensor & w);
torch::Tensor matmul_weight_backward_generic(const torch::Tensor & dy, const torch::Tensor & w);

}  // namespace tinkerd::engine::kernels
