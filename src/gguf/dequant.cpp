// Block decoders for the supported ggml types (see dequant.h). Each decodes one block of
// `elements` values; dequantize() checks sizes and walks the blocks.
#include "gguf/dequant.h"

#include <cstring>

namespace tinkerd::gguf {
namespace {

uint16_t load_u16(const uint8_t * p) {
    return static_cast<uint16_t>(p[0] | (p[1] << 8));
}

float load_half(const uint8_t * p) {
    return half_to_float(load_u16(p));
}

// Q8_0, 34 bytes: d (f16), 32 int8 quants. y = q * d.
void block_q8_0(const uint8_t * b, float * y) {
    const float d = load_half(b);
    for (int j = 0; j < 32; ++j) {
        y[j] = static_cast<float>(static_cast<int8_t>(b[2 + j])) * d;
    }
}

// Q4_0, 18 bytes: d (f16), 16 bytes of nibbles; low nibbles are elements 0..15, high ones 16..31.
// y = d * (q - 8).
void block_q4_0(const uint8_t * b, float * y) {
    const float d = load_half(b);
    const uint8_t * qs = b + 2;
    for (int j = 0; j < 16; ++j) {
        y[j] = d * static_cast<float>((qs[j] & 0x0F) - 8);
        y[j + 16] = d * static_cast<float>((qs[j] >> 4) - 8);
    }
}

// Q4_1, 20 bytes: d (f16), m (f16), 16 bytes of nibbles as in Q4_0. y = d * q + m.
void block_q4_1(const uint8_t * b, float * y) {
    const float d = load_half(b);
    const float m = load_half(b + 2);
    const uint8_t * qs = b + 4;
    for (int j = 0; j < 16; ++j) {
        y[j] = d * static_cast<float>(qs[j] & 0x0F) + m;
        y[j + 16] = d * static_cast<float>(qs[j] >> 4) + m;
    }
}

// Q5_0 (22 bytes: d, 4 bytes qh, 16 bytes nibbles) and Q5_1 (24 bytes: d, m, qh, nibbles): element j
// takes its low 4 bits as in Q4_0 and its fifth bit from bit j of qh (a little-endian uint32).
// Q5_0: y = d * (q - 16); Q5_1: y = d * q + m.
int q5_value(const uint8_t * qh, const uint8_t * qs, int j) {
    const int lo = j < 16 ? (qs[j] & 0x0F) : (qs[j - 16] >> 4);
    return lo | (((qh[j / 8] >> (j % 8)) & 1) << 4);
}

void block_q5_0(const uint8_t * b, float * y) {
    const float d = load_half(b);
    for (int j = 0; j < 32; ++j) {
        y[j] = d * static_cast<float>(q5_value(b + 2, b + 6, j) - 16);
    }
}

void block_q5_1(const uint8_t * b, float * y) {
    const float d = load_half(b);
    const float m = load_half(b + 2);
    for (int j = 0; j < 32; ++j) {
        y[j] = d * static_cast<float>(q5_value(b + 4, b + 8, j)) + m;
    }
}

// The 6-bit scale and min of sub-block j (0..7) packed in the K-quants' 12 scale bytes: bytes 0..3
// hold scales 0..3 (low 6 bits), bytes 4..7 mins 0..3; sub-blocks 4..7 take their low 4 bits from
// bytes 8..11 and their high 2 bits from the top bits of bytes 0..7.
void scale_min_k4(const uint8_t * s, int j, float & scale, float & min) {
    if (j < 4) {
        scale = static_cast<float>(s[j] & 63);
        min = static_cast<float>(s[j + 4] & 63);
    } else {
        scale = static_cast<float>((s[j + 4] & 0x0F) | ((s[j - 4] >> 6) << 4));
        min = static_cast<float>((s[j + 4] >> 4) | ((s[j] >> 6) << 4));
    }
}

// Q4_K (144 bytes per 256) and Q5_K (176): d, dmin (f16), 12 scale bytes, then for Q5_K 32 bytes qh,
// then 128 bytes of nibbles. Sub-block j = 2c + s (32 values) reads the low (s = 0) or high (s = 1)
// nibbles of bytes c*32 .. c*32+31; for Q5_K bit j of qh[l] is the fifth bit of its value l.
// y = (d * scale_j) * q - (dmin * min_j).
void block_k_quant(const uint8_t * b, const uint8_t * qh, const uint8_t * qs, float * y) {
    const float d = load_half(b), dmin = load_half(b + 2);
    for (int j = 0; j < 8; ++j) {
        float sc, m;
        scale_min_k4(b + 4, j, sc, m);
        const float dl = d * sc, ml = dmin * m;
        const uint8_t * q = qs + (j / 2) * 32;
        const int shift = (j % 2) * 4;
        for (int l = 0; l < 32; ++l) {
            const int high = qh ? ((qh[l] >> j) & 1) << 4 : 0;
            y[j * 32 + l] = dl * static_cast<float>(((q[l] >> shift) & 0x0F) | high) - ml;
        }
    }
}

void block_q4_k(const uint8_t * b, float * y) {
    block_k_quant(b, nullptr, b + 16, y);
}

void block_q5_k(const uint8_t * b, float * y) {
    block_k_quant(b, b + 16, b + 48, y);
}

// Q6_K, 210 bytes per 256: 128 bytes ql (low 4 bits), 64 bytes qh (high 2 bits), 16 int8 scales (one
// per 16 values), d (f16). Value e = h*128 + k*32 + l (h half, k quarter) takes nibble k/2 of
// ql[h*64 + (k%2)*32 + l] and bits 2k..2k+1 of qh[h*32 + l]. y = (d * scale_{e/16}) * (q - 32).
void block_q6_k(const uint8_t * b, float * y) {
    const uint8_t * ql = b;
    const uint8_t * qh = b + 128;
    const auto * scales = reinterpret_cast<const int8_t *>(b + 192);
    const float d = load_half(b + 208);
    for (int h = 0; h < 2; ++h) {
        for (int k = 0; k < 4; ++k) {
            for (int l = 0; l < 32; ++l) {
                const int e = h * 128 + k * 32 + l;
                const int lo = (ql[h * 64 + (k % 2) * 32 + l] >> ((k / 2) * 4)) & 0x0F;
                const int hi = (qh[h * 32 + l] >> (2 * k)) & 0x03;
                y[e] = (d * static_cast<float>(scales[e / 16])) * static_cast<float>((lo | (hi << 4)) - 32);
            }
        }
    }
}

using BlockFn = void (*)(const uint8_t *, float *);

BlockFn block_decoder(GgmlType type) {
    switch (type) {
        case GgmlType::Q8_0:
            return block_q8_0;
        case GgmlType::Q4_0:
            return block_q4_0;
        case GgmlType::Q4_1:
            return block_q4_1;
        case GgmlType::Q5_0:
            return block_q5_0;
        case GgmlType::Q5_1:
            return block_q5_1;
        case GgmlType::Q4_K:
            return block_q4_k;
        case GgmlType::Q5_K:
            return block_q5_k;
        case GgmlType::Q6_K:
            return block_q6_k;
        default:
            return nullptr;
    }
}

}  // namespace

float half_to_float(uint16_t h) {
    const uint32_t sign = static_cast<uint32_t>(h & 0x8000) << 16;
    const uint32_t exp = (h >> 10) & 0x1F;
    uint32_t mant = h & 0x3FF;
    uint32_t bits;
    if (exp == 0x1F) {
        bits = sign | 0x7F800000u | (mant << 13);  // inf / nan
    } else if (exp != 0) {
        bits = sign | ((exp + 112) << 23) | (mant << 13);
    } else if (mant == 0) {
        bits = sign;
    } else {  // subnormal half: normalise
        int e = -1;
        do {
            ++e;
            mant <<= 1;
        } while ((mant & 0x400) == 0);
        bits = sign | (static_cast<uint32_t>(112 - e) << 23) | ((mant & 0x3FF) << 13);
    }
    float f;
    std::memcpy(&f, &bits, sizeof(f));
    return f;
}

float bf16_to_float(uint16_t b) {
    const uint32_t bits = static_cast<uint32_t>(b) << 16;
    float f;
    std::memcpy(&f, &bits, sizeof(f));
    return f;
}

const std::vector<GgmlType> & block_quantised_types() {
    static const std::vector<GgmlType> types = {GgmlType::Q8_0, GgmlType::Q4_0, GgmlType::Q4_1, GgmlType::Q5_0,
                                                GgmlType::Q5_1, GgmlType::Q4_K, GgmlType::Q5_K, GgmlType::Q6_K};
    return types;
}

bool can_dequantize(GgmlType type) {
    return type == GgmlType::F32 || type == GgmlType::F16 || type == GgmlType::BF16 || block_decoder(type);
}

Result<void> dequantize(GgmlType type, const uint8_t * data, size_t n_bytes, int64_t n_elements, float * out) {
    const auto raw = static_cast<uint32_t>(type);
    BlockLayout layout;
    if (!can_dequantize(type) || !ggml_block_layout(raw, layout)) {
        return unsupported(
            "tensor type " + ggml_type_name(raw) +
            " is not supported (supported: F32, F16, BF16, Q8_0, Q4_0, Q4_1, Q5_0, Q5_1, Q4_K, Q5_K, Q6_K)");
    }
    if (n_elements < 0 || n_elements % layout.elements != 0) {
        return invalid_argument(std::to_string(n_elements) + " elements are not whole " + ggml_type_name(raw) +
                                " blocks");
    }
    const int64_t n_blocks = n_elements / layout.elements;
    if (n_bytes / layout.bytes < static_cast<size_t>(n_blocks)) {
        return invalid_argument(ggml_type_name(raw) + " data of " + std::to_string(n_bytes) +
                                " bytes is too short for " + std::to_string(n_elements) + " elements");
    }
    if (type == GgmlType::F32) {
        std::memcpy(out, data, static_cast<size_t>(n_elements) * sizeof(float));
    } else if (type == GgmlType::F16 || type == GgmlType::BF16) {
        const bool half = type == GgmlType::F16;
        for (int64_t i = 0; i < n_elements; ++i) {
            const uint16_t v = load_u16(data + 2 * i);
            out[i] = half ? half_to_float(v) : bf16_to_float(v);
        }
    } else {
        const BlockFn fn = block_decoder(type);
        for (int64_t i = 0; i < n_blocks; ++i) {
            fn(data + i * layout.bytes, out + i * layout.elements);
        }
    }
    return {};
}

}  // namespace tinkerd::gguf
