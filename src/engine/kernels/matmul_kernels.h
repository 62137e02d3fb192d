// The CPU micro-kernels behind matmul.h, torch-free, on raw pointers: bf16 weights (uint16_t bit patterns),
// fp32 activations and accumulators. Each ISA's kernels live in their own file and are compiled with
// function-level target attributes (matmul_avx512.cpp, matmul_avx2.cpp); matmul.cpp dispatches at run time.
#pragma once

#include <cstdint>

namespace tinkerd::engine::kernels::detail {

// Forward rows [o0, o1): y[t * ldy + o] = Σ_i x[t * in + i] · w[o * in + i] for t < T.
// x [T, in] fp32, w [out, in] bf16, y [T, ldy] fp32. Each weight row is read once per call.
void forward_rows_avx512(const float * x, int64_t T, int64_t in, const uint16_t * w, int64_t o0, int64_t o1, float * y,
                         int64_t ldy);
void forward_rows_avx2(const float * x, int64_t T, int64_t in, const uint16_t * w, int64_t o0, int64_t o1, float * y,
                       int64_t ldy);

// The same over fp32 weights w [out, in] (the F32 matrices of a GGUF: MoE routers, DeltaNet alpha / beta).
void forward_rows_f32_avx512(const float * x, int64_t T, int64_t in, const float * w, int64_t o0, int64_t o1, float * y,
                             int64_t ldy);
void forward_rows_f32_avx2(const float * x, int64_t T, int64_t in, const float * w, int64_t o0, int64_t o1, float * y,
                           int64_t ldy);

// The bf16-input forward as bf16 dot products (AVX-512-BF16, matmul_avx512_bf16.cpp): rows [o0, o1) of
// y[t * ldy + o] = Σ_i x[t * in + i] · w[o * in + i] for t < T, x [T, in] bf16 (the inputs already rounded),
// w [out, in] bf16, pairs of exact products added in fp32 lanes, fp32 sums. Each weight row is read once.
void forward_rows_bf16_dot(const uint16_t * x, int64_t T, int64_t in, const uint16_t * w, int64_t o0, int64_t o1,
                           float * y, int64_t ldy);

// Backward columns [c0, c1): dx[t * in + c] = Σ_o dy[t * out + o] · w[o * in + c] for t < T.
// dy [T, out] fp32, w [out, in] bf16, dx [T, in] fp32 (its columns [c0, c1) are overwritten).
void backward_cols_avx512(const float * dy, int64_t T, int64_t out, const uint16_t * w, int64_t in, int64_t c0,
                          int64_t c1, float * dx);
void backward_cols_avx2(const float * dy, int64_t T, int64_t out, const uint16_t * w, int64_t in, int64_t c0,
                        int64_t c1, float * dx);

// dst[i] = fp32(src[i]) for i < n (a 16-bit left shift: exact).
void bf16_to_f32_avx512(const uint16_t * src, float * dst, int64_t n);
void bf16_to_f32_avx2(const uint16_t * src, float * dst, int64_t n);

}  // namespace tinkerd::engine::kernels::detail
