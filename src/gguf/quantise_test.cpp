// Q4_K quantisation against the repo's own dequantiser (bit-exact with the gguf package): every value of
// random rows of several shapes and scales (all-positive, all-negative, constant, zero, outliers) decodes
// within half its sub-block's step plus half of dmin; float_to_half against exact cases.
#include "gguf/quantise.h"

#include <cmath>
#include <cstring>
#include <random>

#include <gtest/gtest.h>

#include "gguf/dequant.h"

namespace tinkerd::gguf {
namespace {

float scale_of(const uint8_t * s, int j) {
    return static_cast<float>(j < 4 ? s[j] & 63 : (s[j + 4] & 0x0F) | ((s[j - 4] >> 6) << 4));
}

void expect_within_bound(const std::vector<float> & x) {
    auto blocks = quantize_q4_k(x.data(), static_cast<int64_t>(x.size()));
    ASSERT_TRUE(blocks.ok());
    std::vector<float> y(x.size());
    ASSERT_TRUE(
        dequantize(GgmlType::Q4_K, blocks->data(), blocks->size(), static_cast<int64_t>(x.size()), y.data()).ok());
    for (size_t b = 0; b < x.size() / 256; ++b) {
        const uint8_t * block = blocks->data() + b * 144;
        uint16_t d_bits, dmin_bits;
        std::memcpy(&d_bits, block, 2);
        std::memcpy(&dmin_bits, block + 2, 2);
        const float d = half_to_float(d_bits), dmin = half_to_float(dmin_bits);
        for (int i = 0; i < 256; ++i) {
            const size_t at = b * 256 + i;
            const float step = d * scale_of(block + 4, i / 32);
            const float bound = 0.5F * step + 0.5F * dmin + 1e-6F * std::fabs(x[at]) + 1e-30F;
            ASSERT_LE(std::fabs(y[at] - x[at]), bound) << "value " << at << " = " << x[at] << " decoded " << y[at];
        }
    }
}

TEST(QuantiseQ4K, RandomRowsDecodeWithinTheBound) {
    std::mt19937 rng(5);
    for (float scale : {1e-3F, 0.02F, 1.0F, 300.0F}) {
        std::normal_distribution<float> normal(0.0F, scale);
        std::vector<float> x(256 * 12);
        for (float & v : x)
            v = normal(rng);
        x[17] = 40 * scale;  // an outlier widens one sub-block's step only
        expect_within_bound(x);
    }
}

TEST(QuantiseQ4K, OneSidedConstantAndZeroBlocks) {
    std::mt19937 rng(9);
    std::uniform_real_distribution<float> uniform(0.5F, 2.0F);
    std::vector<float> positive(512), negative(512), constant(256, 0.75F), zero(256, 0.0F);
    for (float & v : positive)
        v = uniform(rng);
    for (float & v : negative)
        v = -uniform(rng);
    expect_within_bound(positive);
    expect_within_bound(negative);
    expect_within_bound(constant);
    expect_within_bound(zero);
    EXPECT_FALSE(quantize_q4_k(zero.data(), 100).ok());
}

TEST(QuantiseQ4K, FloatToHalfRoundsToNearestEven) {
    EXPECT_EQ(float_to_half(1.0F), 0x3C00);
    EXPECT_EQ(float_to_half(-2.0F), 0xC000);
    EXPECT_EQ(float_to_half(65504.0F), 0x7BFF);
    EXPECT_EQ(float_to_half(1e6F), 0x7C00);
    EXPECT_EQ(float_to_half(1.0F + 1.0F / 2048), 0x3C00);      // a tie rounds to the even mantissa
    EXPECT_EQ(float_to_half(1.0F + 3.0F / 2048), 0x3C02);      // a tie rounds up to even
    EXPECT_EQ(float_to_half(5.960464477539063e-08F), 0x0001);  // the smallest subnormal
    for (uint16_t bits : {uint16_t{0x0001}, uint16_t{0x03FF}, uint16_t{0x0400}, uint16_t{0x3555}, uint16_t{0x7BFF}})
        EXPECT_EQ(float_to_half(half_to_float(bits)), bits);
}

}  // namespace
}  // namespace tinkerd::gguf
