// Products with base weights kept as a GGUF's quantised blocks (--base-quant gguf): the weight is a uint8
// tensor [..., out, in / block elements, block bytes] (gguf::blocks_shape), its type told by the block size.
// Every product dequantises block by block inside the kernel (exactly the values gguf::dequantize gives) and
// multiplies in fp32, so results equal the dequantised model's up to fp32 summation order.
#pragma once

#include <torch/torch.h>

#include "gguf/ggml_types.h"

namespace tinkerd::engine::kernels {

// True for a uint8 tensor of 3 or more dims whose last dim is a kept type's block size.
bool is_quantised(const torch::Tensor & w);
gguf::GgmlType quantised_type(const torch::Tensor & w);  // is_quantised(w) must hold
int64_t quantised_in(const torch::Tensor & w);           // the logical input size: size(-2) · block elements
// The shape the weight stands for: [..., out, in].
std::vector<int64_t> logical_shape(const torch::Tensor & w);
// Bytes of one row of blocks.
inline int64_t quantised_row_bytes(const torch::Tensor & w) {
    return w.size(-2) * w.size(-1);
}

// w [..., in] (any float dtype, CPU; in a multiple of 32) as Q8_0 blocks [..., in/32, 34]: per block of 32
// values d = max|x| / 127 (stored fp16) and q = round(x / d) in [-127, 127]. Each value moves by at most d/2
// (plus the fp16 rounding of d), about 0.4% of the block's largest value.
torch::Tensor quantise_q8_0(const torch::Tensor & w);

// w [..., in] (any float dtype, CPU; in a multiple of 256) as Q4_K blocks [..., in/256, 144] by
// gguf::quantize_q4_k_block: each value within half its sub-block's step, or half of dmin at the bottom of a
// sub-block's range (gguf/quantise.h).
torch::Tensor quantise_q4_k(const torch::Tensor & w);

// The whole weight in fp32 [..., out, in] (tests, start-up checks, GPUs).
torch::Tensor dequantise(const torch::Tensor & w);
// Rows `index` [n] (int64) of a [V, in] quantised matrix in fp32: [n, in] (the embedding lookup).
torch::Tensor quantised_rows(const torch::Tensor & w, const torch::Tensor & index);

// y [T, out] = x [T, in] (fp32, contiguous) · wᵀ.
torch::Tensor quantised_forward(const torch::Tensor & x, const torch::Tensor & w);
// dx [T, in] = dy [T, out] (fp32, contiguous) · w.
torch::Tensor quantised_backward(const torch::Tensor & dy, const torch::Tensor & w);

}  // namespace tinkerd::engine::kernels
