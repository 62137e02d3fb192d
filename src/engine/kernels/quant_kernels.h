// CPU kernels for products with GGUF-quantised weights kept as the file's raw blocks (Q8_0, Q4_0, Q4_1,
// Q5_0, Q5_1, Q4_K, Q5_K, Q6_K): row dequantisation (bit-identical to gguf::dequantize) and the fused
// few-row product. Torch-free; quant_kernels.cpp holds the scalar code and the dispatch, quant_avx512.cpp
// and quant_avx2.cpp the per-ISA kernels (function-level target attributes, chosen at run time).
#pragma once

#include <cstdint>

#include "gguf/ggml_types.h"

namespace tinkerd::engine::kernels::detail {

enum class QuantIsa { scalar, avx2, avx512 };

// The best QuantIsa this CPU runs (avx512: avx512f/bw/vl + f16c; avx2: avx2 + fma + f16c).
QuantIsa quant_cpu_isa();

// The ISA the products use now: quant_cpu_isa() capped by the matmul kernels' setting (kernels::kernel_isa,
// TINKERD_MATMUL_KERNELS); defined in quant_matmul.cpp.
QuantIsa quant_isa();

bool quant_type_supported(gguf::GgmlType type);

// The type whose block is bb bytes among the supported ones (block sizes are all distinct), or false.
bool quant_type_from_block_bytes(int64_t bb, gguf::GgmlType & type);

// out[r * ldo + j] = value j (j < n) of row r (r < rows), the row starting at w + r * row_bytes; n is a
// multiple of the type's block elements; w may point at any block boundary inside a row. Bit-identical to
// gguf::dequantize for every isa. An isa above quant_cpu_isa() runs as quant_cpu_isa().
void dequant_rows(gguf::GgmlType type, const uint8_t * w, int64_t row_bytes, int64_t rows, int64_t n, float * out,
                  int64_t ldo, QuantIsa isa);

// y[t * ldy + o] = Σ_i x[t * in + i] · deq(w)[o][i] for t < T, o in [o0, o1). x [T, in] fp32 row-major, w at
// row 0. Each weight block is read and dequantised once per call, and used for all T rows of x.
void quant_forward_rows(gguf::GgmlType type, const float * x, int64_t T, int64_t in, const uint8_t * w,
                        int64_t row_bytes, int64_t o0, int64_t o1, float * y, int64_t ldy, QuantIsa isa);

// Per-ISA entry points behind the two functions above (type supported, arguments as there).
void dequant_rows_avx512(gguf::GgmlType type, const uint8_t * w, int64_t row_bytes, int64_t rows, int64_t n,
                         float * out, int64_t ldo);
void quant_forward_rows_avx512(gguf::GgmlType type, const float * x, int64_t T, int64_t in, const uint8_t * w,
                               int64_t row_bytes, int64_t o0, int64_t o1, float * y, int64_t ldy);
void dequant_rows_avx2(gguf::GgmlType type, const uint8_t * w, int64_t row_bytes, int64_t rows, int64_t n, float * out,
                       int64_t ldo);
void quant_forward_rows_avx2(gguf::GgmlType type, const float * x, int64_t T, int64_t in, const uint8_t * w,
                             int64_t row_bytes, int64_t o0, int64_t o1, float * y, int64_t ldy);

// Row dequantisation by gguf::dequantize: the scalar path, and the fallback of the ISA files.
void dequant_rows_reference(gguf::GgmlType type, const uint8_t * w, int64_t row_bytes, int64_t rows, int64_t n,
                            float * out, int64_t ldo);

// This thread's fp32 scratch of at least n floats (64-byte aligned), reused across calls.
float * quant_scratch(int64_t n);

}  // namespace tinkerd::engine::kernels::detail
