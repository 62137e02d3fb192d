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

// Which CPU kernels matmul_weight / matmul_weight_backward use for fp32 activations on contiguous bf16
// weights (everything else takes the generic ops). The default is the best the CPU supports, or what the
// environment variable TINKERD_MATMUL_KERNELS names (generic, avx2, avx512; 0 = generic).
enum class KernelIsa { generic, avx2, avx512 };
KernelIsa cpu_kernel_isa();              // the best this CPU supports
KernelIsa kernel_isa();                  // the one in use
void set_kernel_isa(KernelIsa isa);      // clamped to cpu_kernel_isa(); for tests and benchmarks
void set_kernels_enabled(bool enabled);  // false = set_kernel_isa(generic); true = the CPU's best

// From this many rows of x (or dy) on, the products convert blocks of the weight to fp32 and call BLAS;
// below it the register-blocked kernels read each weight row once. Settable for tests and benchmarks.
int64_t blas_min_rows();
void set_blas_min_rows(int64_t rows);

// The generic ops the kernels replace (the reference in tests, and the path on GPUs and other CPUs).
torch::Tensor matmul_weight_generic(const torch::Tensor & x, const torch::Tensor & w);
torch::Tensor matmul_weight_backward_generic(const torch::Tensor & dy, const torch::Tensor & w);

}  // namespace tinkerd::engine::kernels
