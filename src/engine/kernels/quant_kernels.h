// TEMPORARY stub of the quantised kernels' API (replaced by the real one from the quant-kernels branch).
#pragma once

#include <cstdint>

#include "gguf/ggml_types.h"

namespace tinkerd::engine::kernels::detail {

enum class QuantIsa { scalar, avx2, avx512 };
bool quant_type_supported(gguf::GgmlType type);
bool quant_type_from_block_bytes(int64_t bb, gguf::GgmlType & type);
void dequant_rows(gguf::GgmlType type, const uint8_t * w, int64_t row_bytes, int64_t rows, int64_t n, float * out,
                  int64_t ldo, QuantIsa isa);
void quant_forward_rows(gguf::GgmlType type, const float * x, int64_t T, int64_t in, const uint8_t * w,
                        int64_t row_bytes, int64_t o0, int64_t o1, float * y, int64_t ldy, QuantIsa isa);

}  // namespace tinkerd::engine::kernels::detail
