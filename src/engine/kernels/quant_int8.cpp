// The int8-activation products (quant_int8.h): the activation quantiser, the scalar reference kernels (the
// same integer lane sums and fp32 operations as quant_int8_simd.h, in plain C++), the ISA choice and the
// per-thread mode. Built with -ffp-contract=off like the SIMD files, so both round alike.
#include "engine/kernels/quant_int8.h"

#include <algorithm>
#include <cmath>
#include <cstring>
#include <limits>
#include <stdexcept>
#include <string>

#include "engine/kernels/quant_int8_blocks.h"
#include "gguf/dequant.h"

namespace tinkerd::engine::kernels::detail {
namespace {

thread_local bool g_int8_on = false;

int64_t block_of(gguf::GgmlType type) {
    return type == gguf::GgmlType::Q4_K || type == gguf::GgmlType::Q6_K ? 256 : 32;
}

// round(v) to the nearest integer, ties to even, for |v| <= 2^22: adding 1.5 · 2^23 rounds in the FPU (IEEE
// semantics: without -ffast-math the compiler may not fold the two steps).
float round_even(float v) {
    constexpr float kMagic = 12582912.0f;
    return (v + kMagic) - kMagic;
}

// One block of n values: d, q, Σ q per 16 (bsums) and in all (sum); a non-finite value makes d NaN, q 0.
void quantise_block(const float * x, int64_t n, float & d, int8_t * q, int16_t * bsums, int & sum) {
    float amax = 0, probe = 0;
    for (int64_t i = 0; i < n; ++i) {
        amax = std::max(amax, std::fabs(x[i]));
        probe += x[i] * 0.0f;  // NaN once any value is inf or NaN
    }
    const bool finite = probe == 0.0f;
    d = finite ? amax / 127.0f : std::numeric_limits<float>::quiet_NaN();
    const float inv = finite && amax > 0 ? 127.0f / amax : 0.0f;
    sum = 0;
    for (int64_t i = 0; i < n; i += 16) {
        int s16 = 0;
        for (int64_t j = i; j < i + 16; ++j) {
            q[j] = static_cast<int8_t>(finite ? std::clamp(round_even(x[j] * inv), -127.0f, 127.0f) : 0.0f);
            s16 += q[j];
        }
        bsums[i / 16] = static_cast<int16_t>(s16);
        sum += s16;
    }
}

float half_at(const uint8_t * p) {
    uint16_t h;
    std::memcpy(&h, p, sizeof(h));
    return gguf::half_to_float(h);
}

// The integer lane sums of one weight block with one block of x (lanes[l] over values 4l..4l+3 of every
// 32-value chunk), the fp32 factor d_w · d_x, and the fp32 addend of the block (0 where the type has none).
struct BlockTerms {
    int32_t lanes[8] = {0, 0, 0, 0, 0, 0, 0, 0};
    float scale = 0;
    float extra[4] = {0, 0, 0, 0};  // added to 4 fp32 lanes of their own (Q4_1: lane 0; Q4_K: the mins)
    bool has_extra = false;
};

void chunk(int32_t (&lanes)[8], const int * u, const int8_t * qx, int scale_lo, int scale_hi) {
    for (int i = 0; i < 32; ++i) {
        lanes[i / 4] += (i < 16 ? scale_lo : scale_hi) * u[i] * qx[i];
    }
}

BlockTerms terms_q8_0(const uint8_t * b, const int8_t * qx, float dx) {
    BlockTerms r;
    int u[32];
    for (int i = 0; i < 32; ++i) {
        u[i] = static_cast<int8_t>(b[2 + i]);
    }
    chunk(r.lanes, u, qx, 1, 1);
    r.scale = half_at(b) * dx;
    return r;
}

BlockTerms terms_q4_1(const uint8_t * b, const int8_t * qx, float dx, float sx) {
    BlockTerms r;
    int u[32];
    for (int i = 0; i < 16; ++i) {
        u[i] = b[4 + i] & 15;
        u[i + 16] = b[4 + i] >> 4;
    }
    chunk(r.lanes, u, qx, 1, 1);
    r.scale = half_at(b) * dx;
    r.extra[0] = half_at(b + 2) * sx;
    r.has_extra = true;
    return r;
}

BlockTerms terms_q4_k(const uint8_t * b, const int8_t * qx, const int16_t * bsums, float dx) {
    BlockTerms r;
    int sc[8], m[8], u[32];
    int8::k_scale_min(b + 4, sc, m);
    for (int j = 0; j < 8; ++j) {
        for (int i = 0; i < 32; ++i) {
            u[i] = (b[16 + 32 * (j / 2) + i] >> (4 * (j % 2))) & 15;
        }
        chunk(r.lanes, u, qx + 32 * j, sc[j], sc[j]);
    }
    r.scale = half_at(b) * dx;
    int8::k4_min_terms(m, bsums, half_at(b + 2), dx, r.extra);
    r.has_extra = true;
    return r;
}

BlockTerms terms_q6_k(const uint8_t * b, const int8_t * qx, const int16_t * bsums, float dx) {
    BlockTerms r;
    const auto * sc = reinterpret_cast<const int8_t *>(b + 192);
    int u[32];
    for (int c = 0; c < 8; ++c) {
        const int h = c / 4, k = c % 4;
        for (int l = 0; l < 32; ++l) {
            const int lo = (b[64 * h + 32 * (k % 2) + l] >> (4 * (k / 2))) & 15;
            u[l] = lo | (((b[128 + 32 * h + l] >> (2 * k)) & 3) << 4);
        }
        chunk(r.lanes, u, qx + 32 * c, sc[2 * c], sc[2 * c + 1]);
    }
    for (int l = 0; l < 8; ++l) {
        r.lanes[l] -= 32 * (bsums[2 * l] * sc[2 * l] + bsums[2 * l + 1] * sc[2 * l + 1]);
    }
    r.scale = half_at(b + 208) * dx;
    return r;
}

BlockTerms block_terms(gguf::GgmlType type, const uint8_t * b, const Int8View & x, int64_t t, int64_t k) {
    const int64_t i = t * x.blocks + k;
    const int8_t * qx = x.q + t * x.in + k * x.block;
    switch (type) {
        case gguf::GgmlType::Q8_0:
            return terms_q8_0(b, qx, x.d[i]);
        case gguf::GgmlType::Q4_1:
            return terms_q4_1(b, qx, x.d[i], x.s[i]);
        case gguf::GgmlType::Q4_K:
            return terms_q4_k(b, qx, x.bsums + i * 16, x.d[i]);
        default:
            return terms_q6_k(b, qx, x.bsums + i * 16, x.d[i]);
    }
}

int64_t block_bytes(gguf::GgmlType type) {
    gguf::BlockLayout layout;
    gguf::ggml_block_layout(static_cast<uint32_t>(type), layout);
    return layout.bytes;
}

void forward_rows_scalar(gguf::GgmlType type, const Int8View & x, const uint8_t * w, int64_t row_bytes, int64_t o0,
                         int64_t o1, float * y, int64_t ldy) {
    const int64_t bb = block_bytes(type);
    for (int64_t o = o0; o < o1; ++o) {
        for (int64_t t = 0; t < x.n; ++t) {
            float acc[8] = {0, 0, 0, 0, 0, 0, 0, 0}, extra[4] = {0, 0, 0, 0};
            for (int64_t k = 0; k < x.blocks; ++k) {
                const BlockTerms bt = block_terms(type, w + o * row_bytes + k * bb, x, t, k);
                for (int l = 0; l < 8; ++l) {
                    acc[l] = acc[l] + static_cast<float>(bt.lanes[l]) * bt.scale;
                }
                for (int l = 0; bt.has_extra && l < 4; ++l) {
                    extra[l] = extra[l] + bt.extra[l];
                }
            }
            y[t * ldy + o] = int8::reduce8(acc) + int8::reduce4(extra);
        }
    }
}

}  // namespace

bool int8_type_supported(gguf::GgmlType type) {
    return type == gguf::GgmlType::Q8_0 || type == gguf::GgmlType::Q4_1 || type == gguf::GgmlType::Q4_K ||
           type == gguf::GgmlType::Q6_K;
}

Int8Isa int8_isa_for(QuantIsa cap) {
    const QuantIsa best = quant_cpu_isa();
    const QuantIsa isa = static_cast<int>(cap) < static_cast<int>(best) ? cap : best;
    static const bool vnni = [] {
        __builtin_cpu_init();
        return __builtin_cpu_supports("avx512vnni") && __builtin_cpu_supports("avx512vl");
    }();
    if (isa == QuantIsa::avx512) {
        return vnni ? Int8Isa::vnni : Int8Isa::avx2;
    }
    return isa == QuantIsa::avx2 ? Int8Isa::avx2 : Int8Isa::scalar;
}

const char * int8_isa_name(Int8Isa isa) {
    return isa == Int8Isa::vnni ? "avx512-vnni" : isa == Int8Isa::avx2 ? "avx2" : "scalar";
}

void quantise_rows_int8(gguf::GgmlType type, const float * x, int64_t T, int64_t in, Int8Rows & out) {
    const int64_t block = block_of(type), blocks = in / block, per = block / 16;
    out.T = T;
    out.in = in;
    out.block = block;
    out.blocks = blocks;
    out.d.resize(static_cast<size_t>(T * blocks));
    out.s.resize(static_cast<size_t>(T * blocks));
    out.bsums.resize(static_cast<size_t>(T * blocks * per));
    out.q.resize(static_cast<size_t>(T * in));
    for (int64_t b = 0; b < T * blocks; ++b) {
        int sum = 0;
        quantise_block(x + b * block, block, out.d[b], out.q.data() + b * block, out.bsums.data() + b * per, sum);
        out.s[b] = out.d[b] * static_cast<float>(sum);
    }
}

void gather_rows_int8(const Int8Rows & src, const std::vector<int64_t> & rows, Int8Rows & out) {
    const int64_t P = static_cast<int64_t>(rows.size()), nb = src.blocks, per = src.block / 16;
    out.T = P;
    out.in = src.in;
    out.block = src.block;
    out.blocks = nb;
    out.d.resize(static_cast<size_t>(P * nb));
    out.s.resize(static_cast<size_t>(P * nb));
    out.bsums.resize(static_cast<size_t>(P * nb * per));
    out.q.resize(static_cast<size_t>(P * src.in));
    for (int64_t r = 0; r < P; ++r) {
        const int64_t t = rows[static_cast<size_t>(r)];
        if (t < 0 || t >= src.T) {
            throw std::out_of_range("gathered row " + std::to_string(t) + " outside " + std::to_string(src.T));
        }
        std::copy_n(src.d.begin() + t * nb, nb, out.d.begin() + r * nb);
        std::copy_n(src.s.begin() + t * nb, nb, out.s.begin() + r * nb);
        std::copy_n(src.bsums.begin() + t * nb * per, nb * per, out.bsums.begin() + r * nb * per);
        std::copy_n(src.q.begin() + t * src.in, src.in, out.q.begin() + r * src.in);
    }
}

Int8View int8_view(const Int8Rows & xq, int64_t r0, int64_t n) {
    const int64_t b0 = r0 * xq.blocks;
    return {
        xq.d.data() + b0, xq.s.data() + b0, xq.bsums.data() + b0 * (xq.block / 16), xq.q.data() + r0 * xq.in, n, xq.in,
        xq.block,         xq.blocks};
}

void int8_forward_rows(gguf::GgmlType type, const Int8View & x, const uint8_t * w, int64_t row_bytes, int64_t o0,
                       int64_t o1, float * y, int64_t ldy, Int8Isa isa) {
    if (x.n <= 0 || o1 <= o0) {
        return;
    }
    switch (isa) {
        case Int8Isa::vnni:
            return int8_forward_rows_vnni(type, x, w, row_bytes, o0, o1, y, ldy);
        case Int8Isa::avx2:
            return int8_forward_rows_avx2(type, x, w, row_bytes, o0, o1, y, ldy);
        case Int8Isa::scalar:
            break;
    }
    forward_rows_scalar(type, x, w, row_bytes, o0, o1, y, ldy);
}

bool int8_activations_on() {
    return g_int8_on;
}

}  // namespace tinkerd::engine::kernels::detail

namespace tinkerd::engine::kernels {

Int8ActivationsScope::Int8ActivationsScope(bool on) : previous_(detail::g_int8_on) {
    detail::g_int8_on = on;
}

Int8ActivationsScope::~Int8ActivationsScope() {
    detail::g_int8_on = previous_;
}

const char * int8_kernel_path() {
    return detail::int8_isa_name(detail::int8_isa_for(detail::quant_isa()));
}

}  // namespace tinkerd::engine::kernels
