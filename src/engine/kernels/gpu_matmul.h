// The GPU's products of bf16 base weights with fp32 activations (matmul.h's CUDA half): the lm_head's exact
// product as three bf16 tensor-core products, and the other base products on bf16-rounded inputs with fp32
// results; TINKERD_GPU_PATHS=reference turns both (and the fused RMSNorm, fused_ops.cpp) off for an A/B.
#pragma once

#include <torch/torch.h>

namespace tinkerd::engine::kernels {

// x [..., k] fp32 · b [k, m] bf16 -> [..., m] fp32 on a GPU's bf16 tensor cores without rounding x: x as a [n, k]
// is split into three bf16 parts (hi = bf16(a), mid = bf16(a − hi), lo = bf16(a − hi − mid): 3 x 8 significant
// bits = fp32's 24), stacked as [3n, k] for one product with fp32 sums (b read once), and the three [n, m]
// results added. So it computes what an fp32 product computes on b's bf16 values, to summation order, at a third
// of the bf16 rate instead of fp32's (~13x slower on an H100/H200). Only values below 2^-110 in magnitude lose
// bits (lo underflows). Off the GPU (tests) the stacked product runs in fp32.
torch::Tensor split_bf16_product(const torch::Tensor & x, const torch::Tensor & b);

// True for a CUDA bf16 weight w [out, in] and fp32 x with the fast paths on: rounded_gpu_linear applies.
bool rounded_gpu_applies(const torch::Tensor & x, const torch::Tensor & w);

// y [..., out] = x [..., in] · wᵀ on bf16 tensor cores, x rounded to bf16 (as autocast rounds), fp32 sums and
// fp32 results (mm.dtype): y is not rounded to bf16 and no kernel converts it back. Autograd for x only (its
// backward is the same product of the rounded dy with w).
torch::Tensor rounded_gpu_linear(const torch::Tensor & x, const torch::Tensor & w);

// Whether the GPU's faster paths are on (default): split_bf16_product for the lm_head, rounded_gpu_linear for
// the other base products, torch's fused CUDA RMSNorm (fused_ops.cpp). TINKERD_GPU_PATHS=reference turns them
// off for an A/B (an fp32 lm_head copy, bf16 results converted, RMSNorm as separate ops), read at each call; the
// lm_head copy is made at load only when the variable is set then. (fp32 GQA attention keeps SDPA's math
// kernel: the fused memory-efficient one is 2.3x faster but its backward splits keys with atomics, so training
// would not reproduce bit for bit; docs/gpu.md.)
bool gpu_fast_paths();

}  // namespace tinkerd::engine::kernels
