// AVX-512-BF16 micro-kernel of matmul_kernels.h: the few-row forward product in the bf16-input mode as bf16
// dot products (VDPBF16PS: two exact bf16 x bf16 products added into an fp32 lane), weights read as stored,
// 32 terms per instruction, fp32 sums. Only these functions carry the avx512bf16 target; matmul.cpp calls
// them only when the CPU reports it and the TINKERD_MATMUL_KERNELS cap allows it.
#include <immintrin.h>

// GCC 12's AVX-512 intrinsics self-initialise their "undefined" operands (as in matmul_avx512.cpp).
#pragma GCC diagnostic ignored "-Wuninitialized"
#pragma GCC diagnostic ignored "-Wmaybe-uninitialized"

#include "engine/kernels/matmul_kernels.h"

#define TINKERD_BF16_TARGET target("avx512f,avx512bw,avx512vl,avx512bf16,avx2,fma")
#define TINKERD_BF16 __attribute__((TINKERD_BF16_TARGET, always_inline)) inline

namespace tinkerd::engine::kernels::detail {
namespace {

constexpr int64_t kTerms = 32;  // bf16 terms per 512-bit vector: 16 fp32 lanes of 2

TINKERD_BF16 __mmask32 term_mask(int64_t n) {  // the first min(n, 32) terms
    return n >= kTerms ? static_cast<__mmask32>(0xFFFFFFFFu) : static_cast<__mmask32>((1u << n) - 1u);
}

// 32 bf16 (masked terms 0) as the dot-product operand.
TINKERD_BF16 __m512bh load_terms(const uint16_t * p, __mmask32 m) {
    return (__m512bh)_mm512_maskz_loadu_epi16(m, p);  // NOLINT: a vector bit cast
}

// One 32-term step: acc[t] += w[i:i+32] · x[t, i:i+32] (pairwise into 16 lanes) for t < TB.
template <int TB>
TINKERD_BF16 void dot_step(__m512 (&acc)[TB], const uint16_t * x, int64_t ldx, const uint16_t * w, int64_t i,
                           __mmask32 m) {
    const __m512bh wv = load_terms(w + i, m);
#pragma GCC unroll 8
    for (int t = 0; t < TB; ++t) {
        acc[t] = _mm512_dpbf16_ps(acc[t], wv, load_terms(x + t * ldx + i, m));
    }
}

// y[t * ldy] = x[t, :] · w[:] for t < TB: one weight row, read front to back, against TB rows of x [TB, in].
template <int TB>
TINKERD_BF16 void dot_row(const uint16_t * x, const uint16_t * w, int64_t in, float * y, int64_t ldy) {
    __m512 acc[TB];
#pragma GCC unroll 8
    for (int t = 0; t < TB; ++t) {
        acc[t] = _mm512_setzero_ps();
    }
    int64_t i = 0;
    for (; i + kTerms <= in; i += kTerms) {
        dot_step<TB>(acc, x, in, w, i, term_mask(kTerms));
    }
    if (i < in) {
        dot_step<TB>(acc, x, in, w, i, term_mask(in - i));
    }
#pragma GCC unroll 8
    for (int t = 0; t < TB; ++t) {
        y[t * ldy] = _mm512_reduce_add_ps(acc[t]);
    }
}

}  // namespace

// Row by row, so the weights stream through memory in address order (the hardware prefetcher's best case:
// several rows interleaved, as the AVX-512F kernel reads them, ran at about half the rate here); the rows'
// dependency chains are independent, so out-of-order execution overlaps consecutive rows. x in tiles of 8,
// 4, 2, 1 rows, which stay in L1 while the weight row is reused from it.
__attribute__((TINKERD_BF16_TARGET)) void forward_rows_bf16_dot(const uint16_t * x, int64_t T, int64_t in,
                                                                const uint16_t * w, int64_t o0, int64_t o1, float * y,
                                                                int64_t ldy) {
    for (int64_t o = o0; o < o1; ++o) {
        const uint16_t * row = w + o * in;
        int64_t t = 0;
        for (; t + 8 <= T; t += 8) {
            dot_row<8>(x + t * in, row, in, y + t * ldy + o, ldy);
        }
        if (t + 4 <= T) {
            dot_row<4>(x + t * in, row, in, y + t * ldy + o, ldy);
            t += 4;
        }
        if (t + 2 <= T) {
            dot_row<2>(x + t * in, row, in, y + t * ldy + o, ldy);
            t += 2;
        }
        if (t < T) {
            dot_row<1>(x + t * in, row, in, y + t * ldy + o, ldy);
        }
    }
}

}  // namespace tinkerd::engine::kernels::detail
