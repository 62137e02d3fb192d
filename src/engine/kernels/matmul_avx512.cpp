// AVX-512 micro-kernels of matmul_kernels.h: register-blocked bf16-weight (and fp32-weight) products for small T
// (decode), fp32 accumulation, bf16 -> fp32 by a 16-bit shift. Only these functions carry the AVX-512 target, so the
// rest of the build stays generic; matmul.cpp calls them only when the CPU reports avx512f/bw/vl.
#include <immintrin.h>

// GCC 12's AVX-512 intrinsics self-initialise their "undefined" operands (`__Y = __Y`), a known false
// -Wmaybe-uninitialized once inlined; nothing in this file reads an uninitialised value.
#pragma GCC diagnostic ignored "-Wmaybe-uninitialized"

#include "engine/kernels/matmul_kernels.h"

#define TINKERD_AVX512 __attribute__((target("avx512f,avx512bw,avx512vl,avx2,fma"), always_inline)) inline

namespace tinkerd::engine::kernels::detail {
namespace {

constexpr int64_t kLanes = 16;
constexpr int64_t kBackwardRowBlock = 64;  // weight rows per backward pass over a column range (L1-resident)

TINKERD_AVX512 __mmask16 lane_mask(int64_t n) {  // the first min(n, 16) lanes
    return n >= kLanes ? static_cast<__mmask16>(0xFFFF) : static_cast<__mmask16>((1u << n) - 1u);
}

// 16 bf16 (masked lanes 0) -> 16 fp32: zero-extend to 32 bits, shift into the high half.
TINKERD_AVX512 __m512 load_bf16(const uint16_t * p, __mmask16 m) {
    const __m256i bits = _mm256_maskz_loadu_epi16(m, p);
    return _mm512_castsi512_ps(_mm512_slli_epi32(_mm512_cvtepu16_epi32(bits), 16));
}

TINKERD_AVX512 __m512 load_weights(const uint16_t * p, __mmask16 m) {  // bf16 weights, widened
    return load_bf16(p, m);
}

TINKERD_AVX512 __m512 load_weights(const float * p, __mmask16 m) {  // fp32 weights
    return _mm512_maskz_loadu_ps(m, p);
}

// One 16-column step of a forward tile: acc[r][t] += w[r, i:i+16] * x[t, i:i+16]; W: uint16_t (bf16) or float.
template <int R, int TB, class W>
TINKERD_AVX512 void forward_step(__m512 (&acc)[R][TB], const float * x, const W * w, int64_t in, int64_t i,
                                 __mmask16 m) {
    __m512 wv[R];
#pragma GCC unroll 8
    for (int r = 0; r < R; ++r) {
        wv[r] = load_weights(w + r * in + i, m);
    }
#pragma GCC unroll 8
    for (int t = 0; t < TB; ++t) {
        const __m512 xv = _mm512_maskz_loadu_ps(m, x + t * in + i);
#pragma GCC unroll 8
        for (int r = 0; r < R; ++r) {
            acc[r][t] = _mm512_fmadd_ps(wv[r], xv, acc[r][t]);
        }
    }
}

// y[t, r] (t < TB, r < R) = x[t, :] · w[r, :]; x [TB, in], w [R, in], y row stride ldy.
template <int R, int TB, class W>
TINKERD_AVX512 void forward_tile(const float * x, const W * w, int64_t in, float * y, int64_t ldy) {
    __m512 acc[R][TB];
#pragma GCC unroll 8
    for (int r = 0; r < R; ++r) {
#pragma GCC unroll 8
        for (int t = 0; t < TB; ++t) {
            acc[r][t] = _mm512_setzero_ps();
        }
    }
    int64_t i = 0;
    for (; i + kLanes <= in; i += kLanes) {
        forward_step<R, TB, W>(acc, x, w, in, i, lane_mask(kLanes));
    }
    if (i < in) {
        forward_step<R, TB, W>(acc, x, w, in, i, lane_mask(in - i));
    }
#pragma GCC unroll 8
    for (int r = 0; r < R; ++r) {
#pragma GCC unroll 8
        for (int t = 0; t < TB; ++t) {
            y[t * ldy + r] = _mm512_reduce_add_ps(acc[r][t]);
        }
    }
}

// R weight rows against every row of x [T, in], tiles of 4, 2, 1 rows of x.
template <int R, class W>
__attribute__((target("avx512f,avx512bw,avx512vl,avx2,fma"))) void forward_block(const float * x, int64_t T, int64_t in,
                                                                                 const W * w, float * y, int64_t ldy) {
    int64_t t = 0;
    for (; t + 4 <= T; t += 4) {
        forward_tile<R, 4, W>(x + t * in, w, in, y + t * ldy, ldy);
    }
    if (t + 2 <= T) {
        forward_tile<R, 2, W>(x + t * in, w, in, y + t * ldy, ldy);
        t += 2;
    }
    if (t < T) {
        forward_tile<R, 1, W>(x + t * in, w, in, y + t * ldy, ldy);
    }
}

// Rows [o0, o1) of w against every row of x: 8 weight rows at a time for one row of x (batch-1 decode: no
// spill with one x tile), else 4, then single rows.
template <class W>
__attribute__((target("avx512f,avx512bw,avx512vl,avx2,fma"))) void forward_rows(const float * x, int64_t T, int64_t in,
                                                                                const W * w, int64_t o0, int64_t o1,
                                                                                float * y, int64_t ldy) {
    int64_t o = o0;
    if (T == 1) {
        for (; o + 8 <= o1; o += 8) {
            forward_block<8, W>(x, T, in, w + o * in, y + o, ldy);
        }
    }
    for (; o + 4 <= o1; o += 4) {
        forward_block<4, W>(x, T, in, w + o * in, y + o, ldy);
    }
    for (; o < o1; ++o) {
        forward_block<1, W>(x, T, in, w + o * in, y + o, ldy);
    }
}

// dx[t, c:c+32] += Σ_{o in [0, rows)} dy[t, o] · w[o, c:c+32] for t < TB; pointers at (t0, c) / row 0.
template <int TB>
TINKERD_AVX512 void backward_tile(const float * dy, int64_t out, const uint16_t * w, int64_t in, int64_t rows,
                                  float * dx, __mmask16 m0, __mmask16 m1) {
    __m512 acc[TB][2];
#pragma GCC unroll 8
    for (int t = 0; t < TB; ++t) {
        acc[t][0] = _mm512_maskz_loadu_ps(m0, dx + t * in);
        acc[t][1] = _mm512_maskz_loadu_ps(m1, dx + t * in + kLanes);
    }
    for (int64_t o = 0; o < rows; ++o) {
        const __m512 w0 = load_bf16(w + o * in, m0), w1 = load_bf16(w + o * in + kLanes, m1);
#pragma GCC unroll 8
        for (int t = 0; t < TB; ++t) {
            const __m512 b = _mm512_set1_ps(dy[t * out + o]);
            acc[t][0] = _mm512_fmadd_ps(b, w0, acc[t][0]);
            acc[t][1] = _mm512_fmadd_ps(b, w1, acc[t][1]);
        }
    }
#pragma GCC unroll 8
    for (int t = 0; t < TB; ++t) {
        _mm512_mask_storeu_ps(dx + t * in, m0, acc[t][0]);
        _mm512_mask_storeu_ps(dx + t * in + kLanes, m1, acc[t][1]);
    }
}

// One block of weight rows against 32 columns for every row of dy, tiles of 8, 4, 2, 1 rows.
__attribute__((target("avx512f,avx512bw,avx512vl,avx2,fma"))) void backward_columns(const float * dy, int64_t T,
                                                                                    int64_t out, const uint16_t * w,
                                                                                    int64_t in, int64_t rows,
                                                                                    float * dx, int64_t width) {
    const __mmask16 m0 = lane_mask(width), m1 = width > kLanes ? lane_mask(width - kLanes) : 0;
    int64_t t = 0;
    for (; t + 8 <= T; t += 8) {
        backward_tile<8>(dy + t * out, out, w, in, rows, dx + t * in, m0, m1);
    }
    if (t + 4 <= T) {
        backward_tile<4>(dy + t * out, out, w, in, rows, dx + t * in, m0, m1);
        t += 4;
    }
    if (t + 2 <= T) {
        backward_tile<2>(dy + t * out, out, w, in, rows, dx + t * in, m0, m1);
        t += 2;
    }
    if (t < T) {
        backward_tile<1>(dy + t * out, out, w, in, rows, dx + t * in, m0, m1);
    }
}

}  // namespace

__attribute__((target("avx512f,avx512bw,avx512vl,avx2,fma"))) void forward_rows_avx512(const float * x, int64_t T,
                                                                                       int64_t in, const uint16_t * w,
                                                                                       int64_t o0, int64_t o1,
                                                                                       float * y, int64_t ldy) {
    forward_rows<uint16_t>(x, T, in, w, o0, o1, y, ldy);
}

__attribute__((target("avx512f,avx512bw,avx512vl,avx2,fma"))) void forward_rows_f32_avx512(const float * x, int64_t T,
                                                                                           int64_t in, const float * w,
                                                                                           int64_t o0, int64_t o1,
                                                                                           float * y, int64_t ldy) {
    forward_rows<float>(x, T, in, w, o0, o1, y, ldy);
}

__attribute__((target("avx512f,avx512bw,avx512vl,avx2,fma"))) void backward_cols_avx512(const float * dy, int64_t T,
                                                                                        int64_t out, const uint16_t * w,
                                                                                        int64_t in, int64_t c0,
                                                                                        int64_t c1, float * dx) {
    for (int64_t t = 0; t < T; ++t) {
        for (int64_t c = c0; c < c1; ++c) {
            dx[t * in + c] = 0.0f;
        }
    }
    for (int64_t o = 0; o < out; o += kBackwardRowBlock) {
        const int64_t rows = o + kBackwardRowBlock <= out ? kBackwardRowBlock : out - o;
        for (int64_t c = c0; c < c1; c += 2 * kLanes) {
            const int64_t width = c1 - c < 2 * kLanes ? c1 - c : 2 * kLanes;
            backward_columns(dy + o, T, out, w + o * in + c, in, rows, dx + c, width);
        }
    }
}

__attribute__((target("avx512f,avx512bw,avx512vl,avx2,fma"))) void bf16_to_f32_avx512(const uint16_t * src, float * dst,
                                                                                      int64_t n) {
    for (int64_t i = 0; i < n; i += kLanes) {
        const __mmask16 m = lane_mask(n - i);
        _mm512_mask_storeu_ps(dst + i, m, load_bf16(src + i, m));
    }
}

}  // namespace tinkerd::engine::kernels::detail
