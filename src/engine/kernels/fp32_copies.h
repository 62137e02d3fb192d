// fp32 copies of bf16 base weights for the many-row products (training, prefill). Where the CPU's fp32 BLAS on
// a whole fp32 weight beats the blocked path (1 MiB blocks widened per call, one single-threaded BLAS call each),
// kernel_choice turns them on with a byte budget; decode (few rows) keeps reading the bf16 weights. The same
// fp32 math on the same values: only the summation order differs.
#pragma once

#include <cstdint>

#include <torch/torch.h>

namespace tinkerd::engine::kernels {

// Copies are made while their total stays within `bytes` (0, the default: none) and the machine keeps, after each
// copy, twice the budget plus 1 GiB available. Lowering the budget drops every copy made so far.
void set_fp32_copy_budget(int64_t bytes);
int64_t fp32_copy_budget();
int64_t fp32_copy_bytes();  // held now

// The fp32 copy of w (bf16 [out, in], contiguous, CPU), made on first use; undefined when copies are off or w's
// does not fit. Keyed by w's storage, offset and shape; a copy goes when its weight's storage is freed.
torch::Tensor fp32_copy_of(const torch::Tensor & w);

}  // namespace tinkerd::engine::kernels
