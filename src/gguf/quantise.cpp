// Q4_K quantisation (quantise.h). Per sub-block of 32: the offset m rounds the sub-block's -min(0, min x)
// to dmin's grid, then the scale is the smallest step of d's grid whose 15 steps reach the maximum from
// that offset; each value takes the nearest of the 16 levels. d and dmin are stored as f16 first and every
// later choice uses the stored values, so the bound holds for what is decoded.
#include "gguf/quantise.h"

#include <algorithm>
#include <cmath>
#include <cstring>

#include "gguf/dequant.h"

namespace tinkerd::gguf {

uint16_t float_to_half(float f) {
    uint32_t x;
    std::memcpy(&x, &f, 4);
    const uint32_t sign = (x >> 16) & 0x8000U;
    const uint32_t abs = x & 0x7FFFFFFFU;
    if (abs >= 0x7F800000U)
        return static_cast<uint16_t>(sign | 0x7C00U | (abs > 0x7F800000U ? 0x200U : 0U));
    if (abs >= 0x477FF000U)
        return static_cast<uint16_t>(sign | 0x7C00U);     // rounds past 65504: inf
    if (abs < 0x38800000U) {                              // below the smallest normal half: a subnormal (or zero)
        const float scaled = std::fabs(f) * 16777216.0F;  // in units of 2^-24
        return static_cast<uint16_t>(sign | static_cast<uint32_t>(std::nearbyint(scaled)));
    }
    const uint32_t mantissa_rounding = 0xFFFU + ((abs >> 13) & 1U);  // ties to even on the 13 dropped bits
    return static_cast<uint16_t>(sign | ((abs - 0x38000000U + mantissa_rounding) >> 13));
}

namespace {

struct SubBlockFit {
    int scale = 0, min = 0;  // 6-bit
};

// v as the f16 a block stores, rounded up to the next half when nearest rounding went below v (v >= 0),
// so that 63 steps of it still reach what they must.
float stored_at_least(float v) {
    const uint16_t bits = float_to_half(v);
    const float nearest = half_to_float(bits);
    return nearest >= v ? nearest : half_to_float(static_cast<uint16_t>(bits + 1));
}

void pack_scales(const SubBlockFit (&fit)[8], uint8_t * s) {
    for (int j = 0; j < 4; ++j) {
        s[j] = static_cast<uint8_t>(fit[j].scale | ((fit[j + 4].scale >> 4) << 6));
        s[j + 4] = static_cast<uint8_t>(fit[j].min | ((fit[j + 4].min >> 4) << 6));
        s[j + 8] = static_cast<uint8_t>((fit[j + 4].scale & 0x0F) | ((fit[j + 4].min & 0x0F) << 4));
    }
}

}  // namespace

void quantize_q4_k_block(const float * x, uint8_t * out) {
    float low[8], high[8], max_offset = 0, max_step = 0;
    for (int j = 0; j < 8; ++j) {
        low[j] = 0, high[j] = 0;
        for (int l = 0; l < 32; ++l)
            low[j] = std::min(low[j], x[j * 32 + l]), high[j] = std::max(high[j], x[j * 32 + l]);
        max_offset = std::max(max_offset, -low[j]);
        max_step = std::max(max_step, (high[j] - low[j]) / 15.0F);
    }
    const float dmin = stored_at_least(max_offset / 63.0F);
    SubBlockFit fit[8];
    float offset[8];
    for (int j = 0; j < 8; ++j) {
        fit[j].min = dmin > 0 ? std::clamp(static_cast<int>(std::nearbyint(-low[j] / dmin)), 0, 63) : 0;
        offset[j] = dmin * static_cast<float>(fit[j].min);
        max_step = std::max(max_step, (high[j] + offset[j]) / 15.0F);
    }
    const float d = stored_at_least(max_step / 63.0F);
    uint8_t q[256];
    for (int j = 0; j < 8; ++j) {
        fit[j].scale = d > 0 ? std::clamp(static_cast<int>(std::ceil((high[j] + offset[j]) / (15.0F * d))), 0, 63) : 0;
        const float step = d * static_cast<float>(fit[j].scale);
        for (int l = 0; l < 32; ++l) {
            const float level = step > 0 ? std::nearbyint((x[j * 32 + l] + offset[j]) / step) : 0.0F;
            q[j * 32 + l] = static_cast<uint8_t>(std::clamp(level, 0.0F, 15.0F));
        }
    }
    const uint16_t d_bits = float_to_half(d), dmin_bits = float_to_half(dmin);
    std::memcpy(out, &d_bits, 2);
    std::memcpy(out + 2, &dmin_bits, 2);
    pack_scales(fit, out + 4);
    for (int c = 0; c < 4; ++c)
        for (int l = 0; l < 32; ++l)
            out[16 + c * 32 + l] = static_cast<uint8_t>(q[(2 * c) * 32 + l] | (q[(2 * c + 1) * 32 + l] << 4));
}

Result<std::vector<uint8_t>> quantize_q4_k(const float * x, int64_t n) {
    if (n < 0 || n % kQ4KBlockValues != 0)
        return invalid_argument("Q4_K needs a multiple of 256 values, got " + std::to_string(n));
    std::vector<uint8_t> out(static_cast<size_t>(n / kQ4KBlockValues * kQ4KBlockBytes));
    for (int64_t b = 0; b < n / kQ4KBlockValues; ++b)
        quantize_q4_k_block(x + b * kQ4KBlockValues, out.data() + b * kQ4KBlockBytes);
    return out;
}

}  // namespace tinkerd::gguf
