// AVX-512-BF16 micro-kernel of matmul_kernels.h: the few-row forward product in the bf16-input mode as bf16
// dot products (VDPBF16PS: two exact bf16 x bf16 products added into an fp32 lane), weights read as stored,
// 32 terms per instruction, fp32 sums. Only these functions carry the avx512bf16 target; matmul.cpp calls
// them only when the CPU reports it and the TINKERD_MATMUL_KERNELS cap allows it.
#include <algorithm>
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
// From this many rows of x on, forward_rows_bf16_dot multiplies blocks of weight rows (dot_block): measured on
// Zen 4 (docs/benchmarks.md), about even at 8 rows and ahead from 16; below 8 the row-by-row reads win.
constexpr int64_t kBlockedMinRows = 8;

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

// The sums of four accumulators, each reduced in exactly _mm512_reduce_add_ps's order (halves of 256, then of
// 128, then pairs: fp32 addition is commutative, so only that tree matters), as 4 floats: out[r] = sum(a[r]).
// Four rows at once take about 3.5 instructions a sum instead of 8, and the results equal dot_row's bit for bit.
TINKERD_BF16 __m128 reduce4(__m512 a0, __m512 a1, __m512 a2, __m512 a3) {
    const __m512 x = _mm512_add_ps(_mm512_shuffle_f32x4(a0, a1, 0x44), _mm512_shuffle_f32x4(a0, a1, 0xEE));
    const __m512 y = _mm512_add_ps(_mm512_shuffle_f32x4(a2, a3, 0x44), _mm512_shuffle_f32x4(a2, a3, 0xEE));
    // x = [a0 lo+hi | a1 lo+hi] (256 bits each); z's 128-bit lane r: row r's two 128-bit halves added
    const __m512 z = _mm512_add_ps(_mm512_shuffle_f32x4(x, y, 0x88), _mm512_shuffle_f32x4(x, y, 0xDD));
    const __m512 p = _mm512_add_ps(z, _mm512_permute_ps(z, 0x4E));  // lane r: [e0+e2, e1+e3, ...]
    const __m512 q = _mm512_add_ps(p, _mm512_permute_ps(p, 0xB1));  // lane r, element 0: (e0+e2) + (e1+e3)
    return _mm512_castps512_ps128(
        _mm512_permutexvar_ps(_mm512_setr_epi32(0, 4, 8, 12, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0), q));
}

constexpr int kBlockRows = 4;   // weight rows per block of dot_block
constexpr int64_t kBlockX = 6;  // rows of x per block: 4 x 6 accumulators + 4 weight vectors + 1 x in 32 registers

// y[t * ldy + r] = x[t, :] · w[r, :] for r < 4, t < TB: four weight rows (stride in) against TB rows of x,
// each weight vector reused TB times and each x vector 4 times (10 loads for 24 dot products at TB = 6).
template <int TB, bool Prefetch>
TINKERD_BF16 void dot_block(const uint16_t * x, const uint16_t * w, int64_t in, float * y, int64_t ldy) {
    __m512 acc[kBlockRows][TB];
#pragma GCC unroll 4
    for (int r = 0; r < kBlockRows; ++r) {
#pragma GCC unroll 8
        for (int t = 0; t < TB; ++t) {
            acc[r][t] = _mm512_setzero_ps();
        }
    }
    for (int64_t i = 0; i < in; i += kTerms) {
        const __mmask32 m = term_mask(in - i);
        __m512bh wv[kBlockRows];
#pragma GCC unroll 4
        for (int r = 0; r < kBlockRows; ++r) {
            if (Prefetch) {  // the same column of the next block's row r
                _mm_prefetch(reinterpret_cast<const char *>(w + (kBlockRows + r) * in + i), _MM_HINT_T0);
            }
            wv[r] = load_terms(w + r * in + i, m);
        }
#pragma GCC unroll 8
        for (int t = 0; t < TB; ++t) {
            const __m512bh xv = load_terms(x + t * in + i, m);
#pragma GCC unroll 4
            for (int r = 0; r < kBlockRows; ++r) {
                acc[r][t] = _mm512_dpbf16_ps(acc[r][t], wv[r], xv);
            }
        }
    }
#pragma GCC unroll 8
    for (int t = 0; t < TB; ++t) {
        _mm_storeu_ps(y + t * ldy, reduce4(acc[0][t], acc[1][t], acc[2][t], acc[3][t]));
    }
}

// dot_block for 1 <= rows <= kBlockX rows of x.
template <bool Prefetch>
TINKERD_BF16 void dot_block_of(int64_t rows, const uint16_t * x, const uint16_t * w, int64_t in, float * y,
                               int64_t ldy) {
    switch (rows) {
        case 6:
            dot_block<6, Prefetch>(x, w, in, y, ldy);
            break;
        case 5:
            dot_block<5, Prefetch>(x, w, in, y, ldy);
            break;
        case 4:
            dot_block<4, Prefetch>(x, w, in, y, ldy);
            break;
        case 3:
            dot_block<3, Prefetch>(x, w, in, y, ldy);
            break;
        case 2:
            dot_block<2, Prefetch>(x, w, in, y, ldy);
            break;
        default:
            dot_block<1, Prefetch>(x, w, in, y, ldy);
            break;
    }
}

// Four weight rows against all T rows of x, kBlockX rows of x at a time. The first block reads the weight rows
// from memory and prefetches the next four (the four interleaved streams alone run well below the row-by-row
// rate); the later blocks find them in L1.
TINKERD_BF16 void dot_rows4(const uint16_t * x, int64_t T, const uint16_t * w, int64_t in, float * y, int64_t ldy) {
    static_assert(kBlockX == 6, "dot_block_of's cases");
    dot_block_of<true>(std::min(T, kBlockX), x, w, in, y, ldy);
    for (int64_t t = kBlockX; t < T; t += kBlockX) {
        dot_block_of<false>(std::min(T - t, kBlockX), x + t * in, w, in, y + t * ldy, ldy);
    }
}

// y[t * ldy + o] for o in [o0, o1) as the row-by-row kernel below computes them, one weight row at a time.
TINKERD_BF16 void dot_rows1(const uint16_t * x, int64_t T, int64_t in, const uint16_t * row, float * y, int64_t ldy) {
    int64_t t = 0;
    for (; t + 8 <= T; t += 8) {
        dot_row<8>(x + t * in, row, in, y + t * ldy, ldy);
    }
    if (t + 4 <= T) {
        dot_row<4>(x + t * in, row, in, y + t * ldy, ldy);
        t += 4;
    }
    if (t + 2 <= T) {
        dot_row<2>(x + t * in, row, in, y + t * ldy, ldy);
        t += 2;
    }
    if (t < T) {
        dot_row<1>(x + t * in, row, in, y + t * ldy, ldy);
    }
}

}  // namespace

// Fewer than kBlockedMinRows rows of x: row by row, so the weights stream through memory in address order (the
// hardware prefetcher's best case: several rows interleaved, as the AVX-512F kernel reads them, ran at about half
// the rate here); the rows' dependency chains are independent, so out-of-order execution overlaps consecutive
// rows; x in tiles of 8, 4, 2, 1 rows, which stay in L1 while the weight row is reused from it. From
// kBlockedMinRows rows on the product is bound by the dot products, not the reads: blocks of 4 weight rows x 6
// rows of x (dot_block). Every output is the same sum in the same order on both paths, so a sequence's values do
// not depend on how many others share its batch.
__attribute__((TINKERD_BF16_TARGET)) void forward_rows_bf16_dot(const uint16_t * x, int64_t T, int64_t in,
                                                                const uint16_t * w, int64_t o0, int64_t o1, float * y,
                                                                int64_t ldy) {
    int64_t o = o0;
    if (T >= kBlockedMinRows) {
        for (; o + kBlockRows <= o1; o += kBlockRows) {
            dot_rows4(x, T, w + o * in, in, y + o, ldy);
        }
    }
    for (; o < o1; ++o) {
        dot_rows1(x, T, in, w + o * in, y + o, ldy);
    }
}

}  // namespace tinkerd::engine::kernels::detail
