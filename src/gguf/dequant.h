// Dequantisation of ggml tensor data to float32: F32, F16, BF16, Q8_0, Q4_0, Q4_1, Q5_0, Q5_1 and the
// K-quants Q4_K, Q5_K, Q6_K. Results are bit-identical to the gguf Python package's numpy dequantisers
// (the same float32 operations in the same order; this target is built with -ffp-contract=off).
#pragma once

#include <cstddef>
#include <cstdint>
#include <vector>

#include "common/status.h"
#include "gguf/ggml_types.h"

namespace tinkerd::gguf {

// True for the types dequantize() handles.
bool can_dequantize(GgmlType type);

// The block-quantised types among them (Q8_0, Q4_0, Q4_1, Q5_0, Q5_1, Q4_K, Q5_K, Q6_K): the one list of the
// types a GGUF base keeps in memory (--base-quant gguf) and the engine's quantised kernels multiply.
const std::vector<GgmlType> & block_quantised_types();

// Decodes n_elements values of `type` from data (n_bytes long) into out[n_elements].
// Errors: an unsupported type (named), n_elements not a whole number of blocks, n_bytes too small.
Result<void> dequantize(GgmlType type, const uint8_t * data, size_t n_bytes, int64_t n_elements, float * out);

// IEEE half and bfloat16 bit patterns to float (exact).
float half_to_float(uint16_t h);
float bf16_to_float(uint16_t b);

}  // namespace tinkerd::gguf
