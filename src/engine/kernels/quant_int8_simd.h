// The int8-activation kernels (quant_int8.h) in 256-bit integer SIMD, included twice by quant_int8_x86.cpp
// (no include guard), each time under its `#pragma GCC target`, with TINKERD_INT8_VNNI 0 or 1 and
// TINKERD_INT8_ENTRY the entry point's name (int8_forward_rows_avx2 / _vnni): per weight
// block, the codes as unsigned bytes (Q8_0: |w|, the sign moved onto x), then per row of x 32-bit lane sums of
// code · q_x (· the sub-block scale for the K-quants) by vpmaddubsw + vpmaddwd or vpdpbusd / vpdpwssd, then
// fp32 lanes += lanes · (d_w · d_x). Lane l of a 32-value chunk holds its values 4l .. 4l+3 on both paths.
namespace tinkerd::engine::kernels::detail {
namespace {
namespace TINKERD_INT8_NS {

// One block of one row of x.
struct XBlock {
    const int8_t * q;
    const int16_t * bsums;
    float d, s;
};

// f16 -> float as gguf::half_to_float (F16C is exact on finite values; inf / NaN take the scalar route).
inline float load_half(const uint8_t * p) {
    uint16_t h;
    std::memcpy(&h, p, sizeof(h));
    return (h & 0x7C00) == 0x7C00 ? gguf::half_to_float(h) : _cvtsh_ss(h);
}

inline __m256i load32(const void * p) {
    return _mm256_loadu_si256(static_cast<const __m256i *>(p));
}

inline __m256i low_nibbles(__m256i v) {
    return _mm256_and_si256(v, _mm256_set1_epi8(0x0F));
}

// acc + Σ of 4 adjacent u · s per 32-bit lane (u unsigned, s signed bytes; no pair exceeds int16 here).
inline __m256i dot_u8s8(__m256i acc, __m256i u, __m256i s) {
#if TINKERD_INT8_VNNI
    return _mm256_dpbusd_epi32(acc, u, s);
#else
    return _mm256_add_epi32(acc, _mm256_madd_epi16(_mm256_maddubs_epi16(u, s), _mm256_set1_epi16(1)));
#endif
}

// As dot_u8s8 with each pair sum times the int16 lane of sc16.
inline __m256i dot_u8s8_scaled(__m256i acc, __m256i u, __m256i s, __m256i sc16) {
    const __m256i pairs = _mm256_maddubs_epi16(u, s);
#if TINKERD_INT8_VNNI
    return _mm256_dpwssd_epi32(acc, pairs, sc16);
#else
    return _mm256_add_epi32(acc, _mm256_madd_epi16(pairs, sc16));
#endif
}

// int16 lanes 0-7 = lo, 8-15 = hi (Q6_K: the vpshufb indices of its scale pair).
inline __m256i scale_pair(int lo, int hi) {
    return _mm256_set_m128i(_mm_set1_epi16(static_cast<int16_t>(hi)), _mm_set1_epi16(static_cast<int16_t>(lo)));
}

struct Q8_0 {  // w = d · q (int8): |q| · sign(q_x, q)
    static constexpr int64_t kElems = 32, kBytes = 34;
    static constexpr bool kExtra = false;
    struct U {
        __m256i w, u;
        float d;
    };
    static U decode(const uint8_t * b) {
        const __m256i w = load32(b + 2);
        return {w, _mm256_sign_epi8(w, w), load_half(b)};
    }
    static __m256i lanes(const U & u, const XBlock & x) {
        return dot_u8s8(_mm256_setzero_si256(), u.u, _mm256_sign_epi8(load32(x.q), u.w));
    }
    static __m128 extra(const U &, const XBlock &) { return _mm_setzero_ps(); }
};

struct Q4_1 {  // w = d · q + m: the min term m · d_x · Σ q_x
    static constexpr int64_t kElems = 32, kBytes = 20;
    static constexpr bool kExtra = true;
    struct U {
        __m256i u;
        float d, m;
    };
    static U decode(const uint8_t * b) {
        const __m128i q = _mm_loadu_si128(reinterpret_cast<const __m128i *>(b + 4));
        uint32_t dm;  // d and m converted together (each as gguf::half_to_float: inf / NaN the scalar route)
        std::memcpy(&dm, b, sizeof(dm));
        const __m256i u = low_nibbles(_mm256_set_m128i(_mm_srli_epi16(q, 4), q));
        if ((dm & 0x7C00) == 0x7C00 || (dm & 0x7C000000) == 0x7C000000) {
            return {u, load_half(b), load_half(b + 2)};
        }
        const __m128 f = _mm_cvtph_ps(_mm_cvtsi32_si128(static_cast<int>(dm)));
        return {u, _mm_cvtss_f32(f), _mm_cvtss_f32(_mm_movehdup_ps(f))};
    }
    static __m256i lanes(const U & u, const XBlock & x) { return dot_u8s8(_mm256_setzero_si256(), u.u, load32(x.q)); }
    static __m128 extra(const U & u, const XBlock & x) { return _mm_set_ss(u.m * x.s); }
};

// Q4_K's 12 scale bytes as 16 bytes: the 8 scales, then the 8 mins (llama.cpp's unpacking; = int8::k_scale_min).
inline __m128i k4_scales_mins(const uint8_t * s) {
    uint32_t u[4];
    std::memcpy(u, s, 12);
    constexpr uint32_t k6 = 0x3f3f3f3f, k4 = 0x0f0f0f0f, k2 = 0x03030303;
    u[3] = ((u[2] >> 4) & k4) | (((u[1] >> 6) & k2) << 4);
    const uint32_t mins_lo = u[1] & k6;
    u[1] = (u[2] & k4) | (((u[0] >> 6) & k2) << 4);
    u[2] = mins_lo;
    u[0] &= k6;
    return _mm_loadu_si128(reinterpret_cast<const __m128i *>(u));
}

struct Q4_K {  // chunk c: low nibbles of qs[32c..] = sub-block 2c, high ones = 2c + 1; w = d·sc·q - dmin·m
    static constexpr int64_t kElems = 256, kBytes = 144;
    static constexpr bool kExtra = true;
    struct U {
        __m256i u[8], sc16[8];
        __m128i mins;  // the 8 mins as int16
        float d, dmin;
    };
    static U decode(const uint8_t * b) {
        U r;
        const __m256i sm = _mm256_cvtepu8_epi16(k4_scales_mins(b + 4));  // int16: scales, then mins
        const __m256i sc = _mm256_permute2x128_si256(sm, sm, 0x00);      // the scales in both halves
        r.mins = _mm256_extracti128_si256(sm, 1);
        r.d = load_half(b);
        r.dmin = load_half(b + 2);
        for (int c = 0; c < 4; ++c) {
            const __m256i q = load32(b + 16 + 32 * c);
            r.u[2 * c] = low_nibbles(q);
            r.u[2 * c + 1] = low_nibbles(_mm256_srli_epi16(q, 4));
        }
        for (int j = 0; j < 8; ++j) {  // int16 lane j of sc in all 16 lanes
            r.sc16[j] = _mm256_shuffle_epi8(sc, _mm256_set1_epi16(static_cast<int16_t>((2 * j) | ((2 * j + 1) << 8))));
        }
        return r;
    }
    static __m256i lanes(const U & u, const XBlock & x) {
        __m256i acc[2] = {_mm256_setzero_si256(), _mm256_setzero_si256()};  // two chains: integer sums, any order
        for (int j = 0; j < 8; ++j) {
            acc[j % 2] = dot_u8s8_scaled(acc[j % 2], u.u[j], load32(x.q + 32 * j), u.sc16[j]);
        }
        return _mm256_add_epi32(acc[0], acc[1]);
    }
    // int8::k4_min_terms: S_j by adding bsum pairs, then m · S in pairs of sub-blocks.
    static __m128 extra(const U & u, const XBlock & x) {
        const __m256i bs = load32(x.bsums);
        const __m128i sums = _mm_hadd_epi16(_mm256_castsi256_si128(bs), _mm256_extracti128_si256(bs, 1));  // S_0..7
        const __m128 m = _mm_cvtepi32_ps(_mm_madd_epi16(u.mins, sums));
        return _mm_mul_ps(m, _mm_set1_ps(-(u.dmin * x.d)));
    }
};

struct Q6_K {  // chunk c = 4h + k: values 32c ..; w = d · sc_g · (q - 32), the -32 folded in by the sums
    static constexpr int64_t kElems = 256, kBytes = 210;
    static constexpr bool kExtra = false;
    struct U {
        __m256i u[8], sc16[8], scales;  // scales: the 16 scales as int16
        float d;
    };
    static U decode(const uint8_t * b) {
        U r;
        r.scales = _mm256_cvtepi8_epi16(_mm_loadu_si128(reinterpret_cast<const __m128i *>(b + 192)));
        r.d = load_half(b + 208);
        const __m256i half_scales[2] = {_mm256_permute2x128_si256(r.scales, r.scales, 0x00),   // 0-7 twice
                                        _mm256_permute2x128_si256(r.scales, r.scales, 0x11)};  // 8-15 twice
        for (int c = 0; c < 8; ++c) {
            const int h = c / 4, k = c % 4;
            const __m256i ql = load32(b + 64 * h + 32 * (k % 2));
            const __m256i lo = low_nibbles(k / 2 ? _mm256_srli_epi16(ql, 4) : ql);
            const __m256i qh = _mm256_srli_epi16(load32(b + 128 + 32 * h), 2 * k);
            const __m256i hi = _mm256_slli_epi16(_mm256_and_si256(qh, _mm256_set1_epi8(3)), 4);
            r.u[c] = _mm256_or_si256(lo, hi);
            r.sc16[c] = _mm256_shuffle_epi8(half_scales[h],
                                            scale_pair(k * 4 | (k * 4 + 1) << 8, (k * 4 + 2) | (k * 4 + 3) << 8));
        }
        return r;
    }
    static __m256i lanes(const U & u, const XBlock & x) {
        __m256i acc[2] = {_mm256_setzero_si256(), _mm256_setzero_si256()};
        for (int c = 0; c < 8; ++c) {
            acc[c % 2] = dot_u8s8_scaled(acc[c % 2], u.u[c], load32(x.q + 32 * c), u.sc16[c]);
        }
        const __m256i offset = _mm256_madd_epi16(load32(x.bsums), u.scales);  // lane l: groups 2l, 2l + 1
        return _mm256_sub_epi32(_mm256_add_epi32(acc[0], acc[1]), _mm256_slli_epi32(offset, 5));
    }
    static __m128 extra(const U &, const XBlock &) { return _mm_setzero_ps(); }
};

// The 4 lanes' fp32 sum in int8::reduce4's order.
inline float reduce4(__m128 b) {
    const __m128 c = _mm_add_ps(b, _mm_movehl_ps(b, b));  // a0+a2, a1+a3
    return _mm_cvtss_f32(_mm_add_ss(c, _mm_shuffle_ps(c, c, 1)));
}

// The lanes' fp32 sum in int8::reduce8's order.
inline float reduce(__m256 v) {
    const __m128 b = _mm_add_ps(_mm256_castps256_ps128(v), _mm256_extractf128_ps(v, 1));  // b0..b3
    const __m128 c = _mm_add_ps(b, _mm_movehl_ps(b, b));                                  // b0+b2, b1+b3
    return _mm_cvtss_f32(_mm_add_ss(c, _mm_shuffle_ps(c, c, 1)));
}

// Rows t0 .. t0+TB of x against weight rows [o0, o1): each weight block decoded once for the TB rows. The rows'
// pointers are taken once, so the block loop only adds the type's constant strides.
template <class K, int TB>
void rows_tile(const Int8View & x, int64_t t0, const uint8_t * w, int64_t row_bytes, int64_t o0, int64_t o1, float * y,
               int64_t ldy) {
    constexpr int64_t kSums = K::kElems / 16;
    const int8_t * q[TB];
    const int16_t * bsums[TB];
    const float *d[TB], *s[TB];
    for (int t = 0; t < TB; ++t) {
        const int64_t b0 = (t0 + t) * x.blocks;
        q[t] = x.q + (t0 + t) * x.in;
        bsums[t] = x.bsums + b0 * kSums;
        d[t] = x.d + b0;
        s[t] = x.s + b0;
    }
    const int64_t blocks = x.blocks;
    for (int64_t o = o0; o < o1; ++o) {
        __m256 acc[TB];
        __m128 extra[TB];
        for (int t = 0; t < TB; ++t) {
            acc[t] = _mm256_setzero_ps();
            extra[t] = _mm_setzero_ps();
        }
        const uint8_t * row = w + o * row_bytes;
        for (int64_t k = 0; k < blocks; ++k) {
            const typename K::U u = K::decode(row + k * K::kBytes);
            for (int t = 0; t < TB; ++t) {
                const XBlock xb{q[t] + k * K::kElems, bsums[t] + k * kSums, d[t][k], s[t][k]};
                const __m256 l = _mm256_cvtepi32_ps(K::lanes(u, xb));
                acc[t] = _mm256_add_ps(acc[t], _mm256_mul_ps(l, _mm256_set1_ps(u.d * xb.d)));
                if (K::kExtra) {
                    extra[t] = _mm_add_ps(extra[t], K::extra(u, xb));
                }
            }
        }
        for (int t = 0; t < TB; ++t) {
            y[(t0 + t) * ldy + o] = reduce(acc[t]) + reduce4(extra[t]);
        }
    }
}

template <class K>
void rows_all(const Int8View & x, const uint8_t * w, int64_t row_bytes, int64_t o0, int64_t o1, float * y,
              int64_t ldy) {
    using Tile = void (*)(const Int8View &, int64_t, const uint8_t *, int64_t, int64_t, int64_t, float *, int64_t);
    static constexpr Tile kTiles[] = {rows_tile<K, 1>, rows_tile<K, 2>, rows_tile<K, 3>, rows_tile<K, 4>};
    for (int64_t t = 0; t < x.n; t += 4) {
        kTiles[std::min<int64_t>(4, x.n - t) - 1](x, t, w, row_bytes, o0, o1, y, ldy);
    }
}

void forward_rows_simd(gguf::GgmlType type, const Int8View & x, const uint8_t * w, int64_t row_bytes, int64_t o0,
                       int64_t o1, float * y, int64_t ldy) {
    switch (type) {
        case gguf::GgmlType::Q8_0:
            return rows_all<Q8_0>(x, w, row_bytes, o0, o1, y, ldy);
        case gguf::GgmlType::Q4_1:
            return rows_all<Q4_1>(x, w, row_bytes, o0, o1, y, ldy);
        case gguf::GgmlType::Q4_K:
            return rows_all<Q4_K>(x, w, row_bytes, o0, o1, y, ldy);
        case gguf::GgmlType::Q6_K:
            return rows_all<Q6_K>(x, w, row_bytes, o0, o1, y, ldy);
        default:
            return;
    }
}

}  // namespace TINKERD_INT8_NS
}  // namespace

void TINKERD_INT8_ENTRY(gguf::GgmlType type, const Int8View & x, const uint8_t * w, int64_t row_bytes, int64_t o0,
                        int64_t o1, float * y, int64_t ldy) {
    TINKERD_INT8_NS::forward_rows_simd(type, x, w, row_bytes, o0, o1, y, ldy);
}

}  // namespace tinkerd::engine::kernels::detail
