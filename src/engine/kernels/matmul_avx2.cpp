// AVX2+FMA micro-kernels of matmul_kernels.h for CPUs without AVX-512: the same register blocking as
// matmul_avx512.cpp on 8-lane vectors (partial vectors through zero-padded copies and masked fp32 loads).
// Only these functions carry the AVX2 target; matmul.cpp calls them when the CPU reports avx2 and fma.
#include <cstring>
#include <immintrin.h>

#include "engine/kernels/matmul_kernels.h"

#define TINKERD_AVX2 __attribute__((target("avx2,fma"), always_inline)) inline

namespace tinkerd::engine::kernels::detail {
namespace {

constexpr int64_t kLanes = 8;
constexpr int64_t kBackwardRowBlock = 64;

TINKERD_AVX2 __m256i lane_mask(int64_t n) {  // lanes [0, min(n, 8)) all ones
    const __m256i index = _mm256_setr_epi32(0, 1, 2, 3, 4, 5, 6, 7);
    return _mm256_cmpgt_epi32(_mm256_set1_epi32(static_cast<int>(n < kLanes ? n : kLanes)), index);
}

TINKERD_AVX2 __m256 widen(__m128i bits) {  // 8 bf16 -> 8 fp32
    return _mm256_castsi256_ps(_mm256_slli_epi32(_mm256_cvtepu16_epi32(bits), 16));
}

TINKERD_AVX2 __m256 load_bf16(const uint16_t * p) {
    return widen(_mm_loadu_si128(reinterpret_cast<const __m128i *>(p)));
}

TINKERD_AVX2 __m256 load_bf16_partial(const uint16_t * p, int64_t n) {  // the first n < 8 values, then zeros
    uint16_t padded[kLanes] = {};
    std::memcpy(padded, p, static_cast<size_t>(n) * sizeof(uint16_t));
    return load_bf16(padded);
}

TINKERD_AVX2 __m256 load_weights(const uint16_t * p) {  // 8 bf16 weights, widened
    return load_bf16(p);
}

TINKERD_AVX2 __m256 load_weights(const float * p) {  // 8 fp32 weights
    return _mm256_loadu_ps(p);
}

inline float weight_value(uint16_t bits) {  // one bf16 weight as fp32 (exact)
    const uint32_t wide = static_cast<uint32_t>(bits) << 16;
    float value;
    std::memcpy(&value, &wide, sizeof(value));
    return value;
}

inline float weight_value(float value) {
    return value;
}

TINKERD_AVX2 float reduce(__m256 v) {
    const __m128 s = _mm_add_ps(_mm256_castps256_ps128(v), _mm256_extractf128_ps(v, 1));
    const __m128 h = _mm_add_ps(s, _mm_movehl_ps(s, s));
    return _mm_cvtss_f32(_mm_add_ss(h, _mm_movehdup_ps(h)));
}

// y[t, r] (t < TB, r < R) = x[t, :] · w[r, :]; the last in % 8 columns in scalar. W: uint16_t (bf16) or float.
template <int R, int TB, class W>
TINKERD_AVX2 void forward_tile(const float * x, const W * w, int64_t in, float * y, int64_t ldy) {
    __m256 acc[R][TB];
#pragma GCC unroll 8
    for (int r = 0; r < R; ++r) {
#pragma GCC unroll 8
        for (int t = 0; t < TB; ++t) {
            acc[r][t] = _mm256_setzero_ps();
        }
    }
    int64_t i = 0;
    for (; i + kLanes <= in; i += kLanes) {
        __m256 wv[R];
#pragma GCC unroll 8
        for (int r = 0; r < R; ++r) {
            wv[r] = load_weights(w + r * in + i);
        }
#pragma GCC unroll 8
        for (int t = 0; t < TB; ++t) {
            const __m256 xv = _mm256_loadu_ps(x + t * in + i);
#pragma GCC unroll 8
            for (int r = 0; r < R; ++r) {
                acc[r][t] = _mm256_fmadd_ps(wv[r], xv, acc[r][t]);
            }
        }
    }
    for (int r = 0; r < R; ++r) {
        for (int t = 0; t < TB; ++t) {
            float sum = reduce(acc[r][t]);
            for (int64_t j = i; j < in; ++j) {
                sum += x[t * in + j] * weight_value(w[r * in + j]);
            }
            y[t * ldy + r] = sum;
        }
    }
}

template <int R, class W>
__attribute__((target("avx2,fma"))) void forward_block(const float * x, int64_t T, int64_t in, const W * w, float * y,
                                                       int64_t ldy) {
    int64_t t = 0;
    for (; t + 2 <= T; t += 2) {
        forward_tile<R, 2, W>(x + t * in, w, in, y + t * ldy, ldy);
    }
    if (t < T) {
        forward_tile<R, 1, W>(x + t * in, w, in, y + t * ldy, ldy);
    }
}

template <class W>
__attribute__((target("avx2,fma"))) void forward_rows(const float * x, int64_t T, int64_t in, const W * w, int64_t o0,
                                                      int64_t o1, float * y, int64_t ldy) {
    int64_t o = o0;
    for (; o + 4 <= o1; o += 4) {
        forward_block<4, W>(x, T, in, w + o * in, y + o, ldy);
    }
    for (; o < o1; ++o) {
        forward_block<1, W>(x, T, in, w + o * in, y + o, ldy);
    }
}

// dx[t, c:c+width] += Σ_o dy[t, o] · w[o, c:c+width] (width <= 16) for t < TB.
template <int TB>
TINKERD_AVX2 void backward_tile(const float * dy, int64_t out, const uint16_t * w, int64_t in, int64_t rows, float * dx,
                                int64_t width) {
    const __m256i m0 = lane_mask(width), m1 = lane_mask(width - kLanes);
    __m256 acc[TB][2];
#pragma GCC unroll 8
    for (int t = 0; t < TB; ++t) {
        acc[t][0] = _mm256_maskload_ps(dx + t * in, m0);
        acc[t][1] = _mm256_maskload_ps(dx + t * in + kLanes, m1);
    }
    for (int64_t o = 0; o < rows; ++o) {
        const uint16_t * row = w + o * in;
        const __m256 w0 = width >= kLanes ? load_bf16(row) : load_bf16_partial(row, width);
        const __m256 w1 = width >= 2 * kLanes ? load_bf16(row + kLanes)
                          : width > kLanes    ? load_bf16_partial(row + kLanes, width - kLanes)
                                              : _mm256_setzero_ps();
#pragma GCC unroll 8
        for (int t = 0; t < TB; ++t) {
            const __m256 b = _mm256_broadcast_ss(dy + t * out + o);
            acc[t][0] = _mm256_fmadd_ps(b, w0, acc[t][0]);
            acc[t][1] = _mm256_fmadd_ps(b, w1, acc[t][1]);
        }
    }
#pragma GCC unroll 8
    for (int t = 0; t < TB; ++t) {
        _mm256_maskstore_ps(dx + t * in, m0, acc[t][0]);
        _mm256_maskstore_ps(dx + t * in + kLanes, m1, acc[t][1]);
    }
}

__attribute__((target("avx2,fma"))) void backward_columns(const float * dy, int64_t T, int64_t out, const uint16_t * w,
                                                          int64_t in, int64_t rows, float * dx, int64_t width) {
    int64_t t = 0;
    for (; t + 4 <= T; t += 4) {
        backward_tile<4>(dy + t * out, out, w, in, rows, dx + t * in, width);
    }
    if (t + 2 <= T) {
        backward_tile<2>(dy + t * out, out, w, in, rows, dx + t * in, width);
        t += 2;
    }
    if (t < T) {
        backward_tile<1>(dy + t * out, out, w, in, rows, dx + t * in, width);
    }
}

}  // namespace

__attribute__((target("avx2,fma"))) void forward_rows_avx2(const float * x, int64_t T, int64_t in, const uint16_t * w,
                                                           int64_t o0, int64_t o1, float * y, int64_t ldy) {
    forward_rows<uint16_t>(x, T, in, w, o0, o1, y, ldy);
}

__attribute__((target("avx2,fma"))) void forward_rows_f32_avx2(const float * x, int64_t T, int64_t in, const float * w,
                                                               int64_t o0, int64_t o1, float * y, int64_t ldy) {
    forward_rows<float>(x, T, in, w, o0, o1, y, ldy);
}

__attribute__((target("avx2,fma"))) void backward_cols_avx2(const float * dy, int64_t T, int64_t out,
                                                            const uint16_t * w, int64_t in, int64_t c0, int64_t c1,
                                                            float * dx) {
    for (int64_t t = 0; t < T; ++t) {
        std::memset(dx + t * in + c0, 0, static_cast<size_t>(c1 - c0) * sizeof(float));
    }
    for (int64_t o = 0; o < out; o += kBackwardRowBlock) {
        const int64_t rows = o + kBackwardRowBlock <= out ? kBackwardRowBlock : out - o;
        for (int64_t c = c0; c < c1; c += 2 * kLanes) {
            const int64_t width = c1 - c < 2 * kLanes ? c1 - c : 2 * kLanes;
            backward_columns(dy + o, T, out, w + o * in + c, in, rows, dx + c, width);
        }
    }
}

__attribute__((target("avx2,fma"))) void bf16_to_f32_avx2(const uint16_t * src, float * dst, int64_t n) {
    int64_t i = 0;
    for (; i + kLanes <= n; i += kLanes) {
        _mm256_storeu_ps(dst + i, load_bf16(src + i));
    }
    for (; i < n; ++i) {
        const uint32_t bits = static_cast<uint32_t>(src[i]) << 16;
        std::memcpy(dst + i, &bits, sizeof(float));
    }
}

}  // namespace tinkerd::engine::kernels::detail
