// AVX2 kernels of quant_kernels.h: Q8_0, Q4_0 and Q4_1 rows decoded with 8-lane vectors (the scalar
// dequantiser's float ops in its order), the other types by gguf::dequantize; the product decodes each weight
// row once into a per-thread scratch row and takes its dot with every row of x by AVX2 FMAs.
#include <cstring>
#include <immintrin.h>

#include "engine/kernels/quant_kernels.h"
#include "gguf/dequant.h"

#define TINKERD_AVX2_FN __attribute__((target("avx2,fma,f16c")))
#define TINKERD_AVX2 TINKERD_AVX2_FN __attribute__((always_inline)) inline

namespace tinkerd::engine::kernels::detail {
namespace {

using gguf::GgmlType;

// f16 bits -> float as gguf::half_to_float (F16C for finite values, the scalar route for inf / NaN).
TINKERD_AVX2 float load_half(const uint8_t * p) {
    uint16_t h;
    std::memcpy(&h, p, sizeof(h));
    return (h & 0x7C00) == 0x7C00 ? gguf::half_to_float(h) : _cvtsh_ss(h);
}

// 8 bytes zero- / sign-extended to 32-bit lanes.
TINKERD_AVX2 __m256i load_u8x8(const uint8_t * p) {
    return _mm256_cvtepu8_epi32(_mm_loadl_epi64(reinterpret_cast<const __m128i *>(p)));
}
TINKERD_AVX2 __m256i load_i8x8(const uint8_t * p) {
    return _mm256_cvtepi8_epi32(_mm_loadl_epi64(reinterpret_cast<const __m128i *>(p)));
}

// Q8_0: y = q * d.
TINKERD_AVX2 void block_q8_0(const uint8_t * b, float * y) {
    const __m256 d = _mm256_set1_ps(load_half(b));
    for (int v = 0; v < 4; ++v) {
        _mm256_storeu_ps(y + 8 * v, _mm256_mul_ps(_mm256_cvtepi32_ps(load_i8x8(b + 2 + 8 * v)), d));
    }
}

// Q4_0 (y = d * (q - 8)) and Q4_1 (y = d * q + m): low nibbles are values 0..15, high ones 16..31.
template <bool kMin>
TINKERD_AVX2 void block_q4(const uint8_t * b, float * y) {
    const __m256 d = _mm256_set1_ps(load_half(b));
    const __m256 m = _mm256_set1_ps(kMin ? load_half(b + 2) : 0.0f);
    const __m256i mask = _mm256_set1_epi32(0x0F), eight = _mm256_set1_epi32(kMin ? 0 : 8);
    const uint8_t * qs = b + (kMin ? 4 : 2);
    for (int v = 0; v < 2; ++v) {
        const __m256i q = load_u8x8(qs + 8 * v);
        const __m256i halves[2] = {_mm256_and_si256(q, mask), _mm256_srli_epi32(q, 4)};
        for (int s = 0; s < 2; ++s) {
            const __m256 level = _mm256_mul_ps(d, _mm256_cvtepi32_ps(_mm256_sub_epi32(halves[s], eight)));
            _mm256_storeu_ps(y + 16 * s + 8 * v, kMin ? _mm256_add_ps(level, m) : level);
        }
    }
}

using BlockFn = void (*)(const uint8_t *, float *);

TINKERD_AVX2_FN void rows_by_block(BlockFn fn, int64_t elems, int64_t bytes, const uint8_t * w, int64_t row_bytes,
                                   int64_t rows, int64_t n, float * out, int64_t ldo) {
    for (int64_t r = 0; r < rows; ++r) {
        for (int64_t k = 0; k < n / elems; ++k) {
            fn(w + r * row_bytes + k * bytes, out + r * ldo + k * elems);
        }
    }
}

TINKERD_AVX2_FN void block_q8_0_fn(const uint8_t * b, float * y) {
    block_q8_0(b, y);
}
TINKERD_AVX2_FN void block_q4_0_fn(const uint8_t * b, float * y) {
    block_q4<false>(b, y);
}
TINKERD_AVX2_FN void block_q4_1_fn(const uint8_t * b, float * y) {
    block_q4<true>(b, y);
}

// y[t * ldy] = x[t, :] · row for t < TB (in a multiple of 32).
template <int TB>
TINKERD_AVX2 void dot_tile(const float * x, int64_t in, const float * row, float * y, int64_t ldy) {
    __m256 acc[TB][2];
    for (int t = 0; t < TB; ++t) {
        acc[t][0] = acc[t][1] = _mm256_setzero_ps();
    }
    for (int64_t i = 0; i < in; i += 16) {
        const __m256 w0 = _mm256_load_ps(row + i), w1 = _mm256_load_ps(row + i + 8);
        for (int t = 0; t < TB; ++t) {
            acc[t][0] = _mm256_fmadd_ps(w0, _mm256_loadu_ps(x + t * in + i), acc[t][0]);
            acc[t][1] = _mm256_fmadd_ps(w1, _mm256_loadu_ps(x + t * in + i + 8), acc[t][1]);
        }
    }
    for (int t = 0; t < TB; ++t) {
        const __m256 s = _mm256_add_ps(acc[t][0], acc[t][1]);
        const __m128 h = _mm_add_ps(_mm256_castps256_ps128(s), _mm256_extractf128_ps(s, 1));
        const __m128 q = _mm_add_ps(h, _mm_movehl_ps(h, h));
        y[t * ldy] = _mm_cvtss_f32(_mm_add_ss(q, _mm_movehdup_ps(q)));
    }
}

}  // namespace

void dequant_rows_avx2(GgmlType type, const uint8_t * w, int64_t row_bytes, int64_t rows, int64_t n, float * out,
                       int64_t ldo) {
    switch (type) {
        case GgmlType::Q8_0:
            return rows_by_block(block_q8_0_fn, 32, 34, w, row_bytes, rows, n, out, ldo);
        case GgmlType::Q4_0:
            return rows_by_block(block_q4_0_fn, 32, 18, w, row_bytes, rows, n, out, ldo);
        case GgmlType::Q4_1:
            return rows_by_block(block_q4_1_fn, 32, 20, w, row_bytes, rows, n, out, ldo);
        default:
            return dequant_rows_reference(type, w, row_bytes, rows, n, out, ldo);
    }
}

TINKERD_AVX2_FN void quant_forward_rows_avx2(GgmlType type, const float * x, int64_t T, int64_t in, const uint8_t * w,
                                             int64_t row_bytes, int64_t o0, int64_t o1, float * y, int64_t ldy) {
    float * row = quant_scratch(in);
    for (int64_t o = o0; o < o1; ++o) {
        dequant_rows_avx2(type, w + o * row_bytes, row_bytes, 1, in, row, in);
        int64_t t = 0;
        for (; t + 4 <= T; t += 4) {
            dot_tile<4>(x + t * in, in, row, y + t * ldy + o, ldy);
        }
        for (; t < T; ++t) {
            dot_tile<1>(x + t * in, in, row, y + t * ldy + o, ldy);
        }
    }
}

}  // namespace tinkerd::engine::kernels::detail
