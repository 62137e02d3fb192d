// AVX-512 kernels of quant_kernels.h: each type's block decoded into 16-lane fp32 vectors holding exactly
// gguf::dequantize's values (4/5-bit types by a lookup in a per-(sub-)block table of the dequantised levels,
// Q8_0 and Q6_K by int -> float and a multiply), then stored (dequant_rows) or multiplied into fp32
// accumulators for every row of x (quant_forward_rows). Only these functions carry the AVX-512 target.
#include <cstring>
#include <immintrin.h>

// GCC 12's AVX-512 intrinsics self-initialise their "undefined" operands (`__Y = __Y`), a known false
// -Wmaybe-uninitialized / -Wuninitialized once inlined; nothing in this file reads an uninitialised value.
#pragma GCC diagnostic ignored "-Wmaybe-uninitialized"
#pragma GCC diagnostic ignored "-Wuninitialized"

#include "engine/kernels/quant_kernels.h"
#include "gguf/dequant.h"

#define TINKERD_AVX512_FN __attribute__((target("avx512f,avx512bw,avx512vl,avx2,fma,f16c")))
#define TINKERD_AVX512 TINKERD_AVX512_FN __attribute__((always_inline)) inline

namespace tinkerd::engine::kernels::detail {
namespace {

using gguf::GgmlType;

// f16 bits -> float as gguf::half_to_float: F16C is exact on finite values; inf / NaN take the scalar
// route (F16C would quieten a signalling NaN).
TINKERD_AVX512 float load_half(const uint8_t * p) {
    uint16_t h;
    std::memcpy(&h, p, sizeof(h));
    return (h & 0x7C00) == 0x7C00 ? gguf::half_to_float(h) : _cvtsh_ss(h);
}

TINKERD_AVX512 __m512 iota16() {
    return _mm512_setr_ps(0, 1, 2, 3, 4, 5, 6, 7, 8, 9, 10, 11, 12, 13, 14, 15);
}

TINKERD_AVX512 __m512 splat(float v) {
    return _mm512_set1_ps(v);
}

// *p in all 16 lanes by a broadcast load. Written as asm: GCC otherwise turns a broadcast of a value it has
// just stored (Q6_K's scales) into a permute with a rebuilt index vector, three ops instead of one load.
TINKERD_AVX512 __m512 broadcast_load(const float * p) {
    __m512 r;
    __asm__("vbroadcastss %1, %0" : "=v"(r) : "m"(*p));
    return r;
}

// 16 bytes zero-extended to 32-bit lanes.
TINKERD_AVX512 __m512i load_u8x16(const uint8_t * p) {
    return _mm512_cvtepu8_epi32(_mm_loadu_si128(reinterpret_cast<const __m128i *>(p)));
}

// Lane l = tab[idx_l & 15] (vpermps reads the low 4 index bits only, so nibbles need no mask).
TINKERD_AVX512 __m512 lookup16(__m512i idx, __m512 tab) {
    return _mm512_permutexvar_ps(idx, tab);
}

// 32 levels: lo[idx & 15], or hi[idx & 15] in the lanes whose bit is set in `high` (the fifth bit).
TINKERD_AVX512 __m512 lookup32(__m512i idx, __mmask16 high, __m512 lo, __m512 hi) {
    return _mm512_mask_permutexvar_ps(_mm512_permutexvar_ps(idx, lo), high, idx, hi);
}

// The levels scale * k - min for k = base lanes (mul then sub, as the scalar dequantiser).
TINKERD_AVX512 __m512 levels_sub(float scale, float min, __m512 base) {
    return _mm512_sub_ps(_mm512_mul_ps(splat(scale), base), splat(min));
}

// The levels scale * k + min.
TINKERD_AVX512 __m512 levels_add(float scale, float min, __m512 base) {
    return _mm512_add_ps(_mm512_mul_ps(splat(scale), base), splat(min));
}

// Each decoder calls emit(v, w) with the 16 values v*16 .. v*16+15 of the block, v = 0 .. kElems/16 - 1.

struct Q8_0 {  // y = q * d
    static constexpr int64_t kElems = 32, kBytes = 34;
    template <class E>
    static TINKERD_AVX512 void decode(const uint8_t * b, E & emit) {
        const __m512 d = splat(load_half(b));
        for (int v = 0; v < 2; ++v) {
            const __m128i q = _mm_loadu_si128(reinterpret_cast<const __m128i *>(b + 2 + 16 * v));
            emit(v, _mm512_mul_ps(_mm512_cvtepi32_ps(_mm512_cvtepi8_epi32(q)), d));
        }
    }
};

struct Q4_0 {  // y = d * (q - 8); low nibbles are values 0..15, high ones 16..31
    static constexpr int64_t kElems = 32, kBytes = 18;
    template <class E>
    static TINKERD_AVX512 void decode(const uint8_t * b, E & emit) {
        const __m512 tab = _mm512_mul_ps(splat(load_half(b)), _mm512_sub_ps(iota16(), splat(8.0f)));
        const __m512i q = load_u8x16(b + 2);
        emit(0, lookup16(q, tab));
        emit(1, lookup16(_mm512_srli_epi32(q, 4), tab));
    }
};

struct Q4_1 {  // y = d * q + m
    static constexpr int64_t kElems = 32, kBytes = 20;
    template <class E>
    static TINKERD_AVX512 void decode(const uint8_t * b, E & emit) {
        const __m512 tab = levels_add(load_half(b), load_half(b + 2), iota16());
        const __m512i q = load_u8x16(b + 4);
        emit(0, lookup16(q, tab));
        emit(1, lookup16(_mm512_srli_epi32(q, 4), tab));
    }
};

// Q5_0 / Q5_1: the fifth bit of value j is bit j of qh (little-endian uint32): a lane mask as it stands.
template <class E>
TINKERD_AVX512 void decode_q5(const uint8_t * qh_bytes, const uint8_t * qs, __m512 lo, __m512 hi, E & emit) {
    uint32_t qh;
    std::memcpy(&qh, qh_bytes, sizeof(qh));
    const __m512i q = load_u8x16(qs);
    emit(0, lookup32(q, static_cast<__mmask16>(qh), lo, hi));
    emit(1, lookup32(_mm512_srli_epi32(q, 4), static_cast<__mmask16>(qh >> 16), lo, hi));
}

struct Q5_0 {  // y = d * (q - 16)
    static constexpr int64_t kElems = 32, kBytes = 22;
    template <class E>
    static TINKERD_AVX512 void decode(const uint8_t * b, E & emit) {
        const __m512 d = splat(load_half(b));
        const __m512 lo = _mm512_mul_ps(d, _mm512_sub_ps(iota16(), splat(16.0f))), hi = _mm512_mul_ps(d, iota16());
        decode_q5(b + 2, b + 6, lo, hi, emit);
    }
};

struct Q5_1 {  // y = d * q + m
    static constexpr int64_t kElems = 32, kBytes = 24;
    template <class E>
    static TINKERD_AVX512 void decode(const uint8_t * b, E & emit) {
        const float d = load_half(b), m = load_half(b + 2);
        const __m512 lo = levels_add(d, m, iota16()), hi = levels_add(d, m, _mm512_add_ps(iota16(), splat(16.0f)));
        decode_q5(b + 4, b + 8, lo, hi, emit);
    }
};

// The K-quants' per-sub-block scales d * scale_j and mins dmin * min_j (6-bit fields packed in 12 bytes
// as gguf's scale_min_k4: see gguf/dequant.cpp).
TINKERD_AVX512 void k_scales(const uint8_t * b, float (&dl)[8], float (&ml)[8]) {
    const float d = load_half(b), dmin = load_half(b + 2);
    const uint8_t * s = b + 4;
    for (int j = 0; j < 4; ++j) {
        dl[j] = d * static_cast<float>(s[j] & 63);
        ml[j] = dmin * static_cast<float>(s[j + 4] & 63);
        dl[j + 4] = d * static_cast<float>((s[j + 8] & 0x0F) | ((s[j] >> 6) << 4));
        ml[j + 4] = dmin * static_cast<float>((s[j + 8] >> 4) | ((s[j + 4] >> 6) << 4));
    }
}

struct Q4_K {  // sub-block j = 2c + s: nibble s of bytes c*32 .. c*32+31; y = dl_j * q - ml_j
    static constexpr int64_t kElems = 256, kBytes = 144;
    template <class E>
    static TINKERD_AVX512 void decode(const uint8_t * b, E & emit) {
        float dl[8], ml[8];
        k_scales(b, dl, ml);
#pragma GCC unroll 4
        for (int c = 0; c < 4; ++c) {
            const __m512i q0 = load_u8x16(b + 16 + 32 * c), q1 = load_u8x16(b + 32 + 32 * c);
            const __m512 t0 = levels_sub(dl[2 * c], ml[2 * c], iota16());
            const __m512 t1 = levels_sub(dl[2 * c + 1], ml[2 * c + 1], iota16());
            emit(4 * c, lookup16(q0, t0));
            emit(4 * c + 1, lookup16(q1, t0));
            emit(4 * c + 2, lookup16(_mm512_srli_epi32(q0, 4), t1));
            emit(4 * c + 3, lookup16(_mm512_srli_epi32(q1, 4), t1));
        }
    }
};

struct Q5_K {  // as Q4_K, with the fifth bit of value l of sub-block j at bit j of qh[l]
    static constexpr int64_t kElems = 256, kBytes = 176;
    template <class E>
    static TINKERD_AVX512 void decode(const uint8_t * b, E & emit) {
        float dl[8], ml[8];
        k_scales(b, dl, ml);
        const __m256i qh = _mm256_loadu_si256(reinterpret_cast<const __m256i *>(b + 16));
        const __m512 iota_hi = _mm512_add_ps(iota16(), splat(16.0f));
#pragma GCC unroll 8
        for (int j = 0; j < 8; ++j) {
            const int c = j / 2, shift = (j % 2) * 4;
            const __m512i q0 = _mm512_srli_epi32(load_u8x16(b + 48 + 32 * c), shift);
            const __m512i q1 = _mm512_srli_epi32(load_u8x16(b + 64 + 32 * c), shift);
            const __mmask32 high = _mm256_test_epi8_mask(qh, _mm256_set1_epi8(static_cast<char>(1 << j)));
            const __m512 lo = levels_sub(dl[j], ml[j], iota16()), hi = levels_sub(dl[j], ml[j], iota_hi);
            emit(2 * j, lookup32(q0, static_cast<__mmask16>(high), lo, hi));
            emit(2 * j + 1, lookup32(q1, static_cast<__mmask16>(high >> 16), lo, hi));
        }
    }
};

// 16 int8 at p sign-extended to 32-bit lanes, as one load-and-extend (asm: GCC would otherwise fold the
// store that filled p into lane extracts of the register, an extra shuffle per 16 values).
TINKERD_AVX512 __m512i load_i8x16(const int8_t * p) {
    __m512i r;
    __asm__("vpmovsxbd %1, %0" : "=v"(r) : "m"(*reinterpret_cast<const __m128i *>(p)));
    return r;
}

// Q6_K: 16 values (q - 32 as int8, at p) times their scale d * scale_e/16.
TINKERD_AVX512 __m512 q6_group(const int8_t * p, const float * scale) {
    return _mm512_mul_ps(broadcast_load(scale), _mm512_cvtepi32_ps(load_i8x16(p)));
}

// 64 six-bit values minus 32 as int8: the nibbles of ql (already shifted down) with bits 2k, 2k+1 of qh
// (qh's 32 bytes in both halves; `shifts` per 16-bit lane: k of the lower half, k of the upper).
TINKERD_AVX512 __m512i q6_values(__m512i ql, __m512i qh, __m512i shifts) {
    const __m512i high = _mm512_and_si512(_mm512_srlv_epi16(qh, shifts), _mm512_set1_epi8(3));
    const __m512i q = _mm512_or_si512(_mm512_and_si512(ql, _mm512_set1_epi8(0x0F)), _mm512_slli_epi16(high, 4));
    return _mm512_sub_epi8(q, _mm512_set1_epi8(32));
}

// The 64 values q (int8, q - 32) through a 64-byte stack buffer, 16 at a time with their scales ds[0..3].
template <class E>
TINKERD_AVX512 void q6_emit(__m512i q, const float * ds, int v, E & emit) {
    alignas(64) int8_t buf[64];
    _mm512_store_si512(buf, q);
    emit(v, q6_group(buf, ds));
    emit(v + 1, q6_group(buf + 16, ds + 1));
    emit(v + 2, q6_group(buf + 32, ds + 2));
    emit(v + 3, q6_group(buf + 48, ds + 3));
}

struct Q6_K {  // value h*128 + k*32 + l: nibble k/2 of ql[h*64 + (k%2)*32 + l], bits 2k.. of qh[h*32 + l]
    static constexpr int64_t kElems = 256, kBytes = 210;
    template <class E>
    static TINKERD_AVX512 void decode(const uint8_t * b, E & emit) {
        alignas(64) float ds[16];
        const __m128i sc = _mm_loadu_si128(reinterpret_cast<const __m128i *>(b + 192));
        _mm512_store_ps(ds, _mm512_mul_ps(splat(load_half(b + 208)), _mm512_cvtepi32_ps(_mm512_cvtepi8_epi32(sc))));
        const __m512i shifts01 = _mm512_inserti64x4(_mm512_set1_epi16(0), _mm256_set1_epi16(2), 1);
        const __m512i shifts23 = _mm512_inserti64x4(_mm512_set1_epi16(4), _mm256_set1_epi16(6), 1);
#pragma GCC unroll 2
        for (int h = 0; h < 2; ++h) {
            const __m512i ql = _mm512_loadu_si512(b + 64 * h);
            const __m512i qh =
                _mm512_broadcast_i64x4(_mm256_loadu_si256(reinterpret_cast<const __m256i *>(b + 128 + 32 * h)));
            q6_emit(q6_values(ql, qh, shifts01), ds + 8 * h, 8 * h, emit);
            q6_emit(q6_values(_mm512_srli_epi16(ql, 4), qh, shifts23), ds + 8 * h + 4, 8 * h + 4, emit);
        }
    }
};

struct StoreEmit {
    float * out;  // the block's first value
    TINKERD_AVX512 void operator()(int v, __m512 w) const { _mm512_storeu_ps(out + 16 * v, w); }
};

// acc[t][v % 4] += w · x[t, block + 16v ..]: four independent chains per row of x.
template <int TB>
struct DotEmit {
    const float * x;  // x[0, first column of the block]
    int64_t in;
    __m512 acc[TB][4];
    TINKERD_AVX512 void operator()(int v, __m512 w) {
#pragma GCC unroll 4
        for (int t = 0; t < TB; ++t) {
            acc[t][v & 3] = _mm512_fmadd_ps(w, _mm512_loadu_ps(x + t * in + 16 * v), acc[t][v & 3]);
        }
    }
};

template <class Q>
TINKERD_AVX512 void decode_row(const uint8_t * w, int64_t n, float * out) {
    for (int64_t k = 0; k < n / Q::kElems; ++k) {
        StoreEmit e{out + k * Q::kElems};
        Q::decode(w + k * Q::kBytes, e);
    }
}

template <class Q>
TINKERD_AVX512_FN void dequant_type(const uint8_t * w, int64_t row_bytes, int64_t rows, int64_t n, float * out,
                                    int64_t ldo) {
    for (int64_t r = 0; r < rows; ++r) {
        decode_row<Q>(w + r * row_bytes, n, out + r * ldo);
    }
}

// Few rows of x: each weight row's blocks decoded in registers straight into TB rows of accumulators.
template <class Q, int TB>
TINKERD_AVX512_FN void forward_fused(const float * x, int64_t in, const uint8_t * w, int64_t row_bytes, int64_t o0,
                                     int64_t o1, float * y, int64_t ldy) {
    for (int64_t o = o0; o < o1; ++o) {
        DotEmit<TB> e{x, in, {}};
        const uint8_t * row = w + o * row_bytes;
        for (int64_t k = 0; k < in / Q::kElems; ++k) {
            e.x = x + k * Q::kElems;
            Q::decode(row + k * Q::kBytes, e);
        }
#pragma GCC unroll 4
        for (int t = 0; t < TB; ++t) {
            const __m512 s =
                _mm512_add_ps(_mm512_add_ps(e.acc[t][0], e.acc[t][1]), _mm512_add_ps(e.acc[t][2], e.acc[t][3]));
            y[t * ldy + o] = _mm512_reduce_add_ps(s);
        }
    }
}

// y[t * ldy] = x[t, :] · row for t < TB (n a multiple of 32).
template <int TB>
TINKERD_AVX512 void dot_tile(const float * x, int64_t in, const float * row, float * y, int64_t ldy) {
    __m512 acc[TB][2];
#pragma GCC unroll 8
    for (int t = 0; t < TB; ++t) {
        acc[t][0] = acc[t][1] = _mm512_setzero_ps();
    }
    for (int64_t i = 0; i < in; i += 32) {
        const __m512 w0 = _mm512_load_ps(row + i), w1 = _mm512_load_ps(row + i + 16);
#pragma GCC unroll 8
        for (int t = 0; t < TB; ++t) {
            acc[t][0] = _mm512_fmadd_ps(w0, _mm512_loadu_ps(x + t * in + i), acc[t][0]);
            acc[t][1] = _mm512_fmadd_ps(w1, _mm512_loadu_ps(x + t * in + i + 16), acc[t][1]);
        }
    }
#pragma GCC unroll 8
    for (int t = 0; t < TB; ++t) {
        y[t * ldy] = _mm512_reduce_add_ps(_mm512_add_ps(acc[t][0], acc[t][1]));
    }
}

// Many rows of x: each weight row decoded once into an L1/L2-resident scratch row, then tiles of 4 rows of x.
template <class Q>
TINKERD_AVX512_FN void forward_scratch(const float * x, int64_t T, int64_t in, const uint8_t * w, int64_t row_bytes,
                                       int64_t o0, int64_t o1, float * y, int64_t ldy) {
    float * row = quant_scratch(in);
    for (int64_t o = o0; o < o1; ++o) {
        decode_row<Q>(w + o * row_bytes, in, row);
        int64_t t = 0;
        for (; t + 4 <= T; t += 4) {
            dot_tile<4>(x + t * in, in, row, y + t * ldy + o, ldy);
        }
        for (; t < T; ++t) {
            dot_tile<1>(x + t * in, in, row, y + t * ldy + o, ldy);
        }
    }
}

template <class Q>
void forward_type(const float * x, int64_t T, int64_t in, const uint8_t * w, int64_t row_bytes, int64_t o0, int64_t o1,
                  float * y, int64_t ldy) {
    switch (T) {
        case 1:
            return forward_fused<Q, 1>(x, in, w, row_bytes, o0, o1, y, ldy);
        case 2:
            return forward_fused<Q, 2>(x, in, w, row_bytes, o0, o1, y, ldy);
        case 3:
            return forward_fused<Q, 3>(x, in, w, row_bytes, o0, o1, y, ldy);
        case 4:
            return forward_fused<Q, 4>(x, in, w, row_bytes, o0, o1, y, ldy);
        default:
            return forward_scratch<Q>(x, T, in, w, row_bytes, o0, o1, y, ldy);
    }
}

// Calls fn(Decoder{}) with the type's decoder (an empty tag object); unsupported types do nothing.
template <class Fn>
void with_decoder(GgmlType type, Fn && fn) {
    switch (type) {
        case GgmlType::Q8_0:
            return fn(Q8_0{});
        case GgmlType::Q4_0:
            return fn(Q4_0{});
        case GgmlType::Q4_1:
            return fn(Q4_1{});
        case GgmlType::Q5_0:
            return fn(Q5_0{});
        case GgmlType::Q5_1:
            return fn(Q5_1{});
        case GgmlType::Q4_K:
            return fn(Q4_K{});
        case GgmlType::Q5_K:
            return fn(Q5_K{});
        case GgmlType::Q6_K:
            return fn(Q6_K{});
        default:
            return;
    }
}

}  // namespace

void dequant_rows_avx512(GgmlType type, const uint8_t * w, int64_t row_bytes, int64_t rows, int64_t n, float * out,
                         int64_t ldo) {
    with_decoder(type, [&](auto q) { dequant_type<decltype(q)>(w, row_bytes, rows, n, out, ldo); });
}

void quant_forward_rows_avx512(GgmlType type, const float * x, int64_t T, int64_t in, const uint8_t * w,
                               int64_t row_bytes, int64_t o0, int64_t o1, float * y, int64_t ldy) {
    with_decoder(type, [&](auto q) { forward_type<decltype(q)>(x, T, in, w, row_bytes, o0, o1, y, ldy); });
}

}  // namespace tinkerd::engine::kernels::detail
