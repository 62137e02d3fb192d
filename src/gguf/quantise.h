// Quantisation of float32 rows into GGUF blocks, for bases quantised at load (--base-quant q4_k): Q4_K by a
// plain per-sub-block min/max fit (not llama.cpp's iterative search, so its error is somewhat larger for
// the same bits). Torch-free; the result decodes with dequantize() (dequant.h).
#pragma once

#include <cstdint>
#include <vector>

#include "common/status.h"

namespace tinkerd::gguf {

inline constexpr int64_t kQ4KBlockValues = 256;
inline constexpr int64_t kQ4KBlockBytes = 144;

// One Q4_K block (144 bytes: d, dmin as f16, 12 bytes of 6-bit scales and mins, 128 bytes of nibbles) of
// x[256]. Each value is within half its sub-block's step, or half of dmin at the bottom of a sub-block's
// range, of what the block decodes to (quantise_test checks the bound).
void quantize_q4_k_block(const float * x, uint8_t * out);

// n values (a multiple of 256) -> n / 256 blocks.
Result<std::vector<uint8_t>> quantize_q4_k(const float * x, int64_t n);

// Round-to-nearest-even float -> IEEE half bits (overflow -> inf).
uint16_t float_to_half(float f);

}  // namespace tinkerd::gguf
