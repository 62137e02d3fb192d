// Dequantisers on hand-made blocks whose values are worked out by hand from the block layouts
// (bit-exactness against the gguf package on random blocks is in tests/gguf/gguf_reference.py).
#include "gguf/dequant.h"

#include <cmath>
#include <vector>

#include <gtest/gtest.h>

namespace tinkerd::gguf {
namespace {

constexpr uint16_t HALF_ONE = 0x3C00, HALF_HALF = 0x3800, HALF_TWO = 0x4000;

void put_half(std::vector<uint8_t> & b, size_t at, uint16_t h) {
    b[at] = h & 0xFF;
    b[at + 1] = h >> 8;
}

std::vector<float> run(GgmlType type, const std::vector<uint8_t> & block, int64_t n) {
    std::vector<float> out(static_cast<size_t>(n));
    auto status = dequantize(type, block.data(), block.size(), n, out.data());
    EXPECT_TRUE(status.ok()) << status.error().message;
    return out;
}

TEST(Dequant, HalfAndBf16) {
    EXPECT_EQ(half_to_float(HALF_ONE), 1.0f);
    EXPECT_EQ(half_to_float(0xC000), -2.0f);
    EXPECT_EQ(half_to_float(0x0001), std::ldexp(1.0f, -24));  // smallest subnormal
    EXPECT_EQ(half_to_float(0x03FF), std::ldexp(1023.0f, -24));
    EXPECT_TRUE(std::isinf(half_to_float(0x7C00)));
    EXPECT_TRUE(std::isnan(half_to_float(0x7E00)));
    EXPECT_EQ(half_to_float(0x7BFF), 65504.0f);
    EXPECT_EQ(bf16_to_float(0x3F80), 1.0f);
    EXPECT_EQ(bf16_to_float(0xC040), -3.0f);
}

TEST(Dequant, Q8_0) {
    std::vector<uint8_t> b(34);
    put_half(b, 0, HALF_HALF);
    for (int j = 0; j < 32; ++j)
        b[2 + j] = static_cast<uint8_t>(static_cast<int8_t>(j * 8 - 128));
    const auto y = run(GgmlType::Q8_0, b, 32);
    EXPECT_EQ(y[0], -64.0f);
    EXPECT_EQ(y[31], (31 * 8 - 128) * 0.5f);
}

TEST(Dequant, Q4_0AndQ4_1) {
    std::vector<uint8_t> b(18);
    put_half(b, 0, HALF_TWO);
    b[2] = 0x3F;  // element 0: 0xF - 8 = 7; element 16: 3 - 8 = -5
    auto y = run(GgmlType::Q4_0, b, 32);
    EXPECT_EQ(y[0], 14.0f);
    EXPECT_EQ(y[16], -10.0f);
    EXPECT_EQ(y[1], -16.0f);  // nibble 0

    std::vector<uint8_t> c(20);
    put_half(c, 0, HALF_HALF);  // d
    put_half(c, 2, HALF_ONE);   // m
    c[4 + 15] = 0xA4;           // element 15: 4, element 31: 10
    y = run(GgmlType::Q4_1, c, 32);
    EXPECT_EQ(y[15], 3.0f);
    EXPECT_EQ(y[31], 6.0f);
    EXPECT_EQ(y[0], 1.0f);
}

TEST(Dequant, Q5_0AndQ5_1) {
    std::vector<uint8_t> b(22);
    put_half(b, 0, HALF_TWO);
    b[2] = 0x01;       // qh bit 0: element 0 gets its fifth bit
    b[5] = 0x80;       // qh bit 31: element 31 too
    b[6] = 0x3F;       // element 0: 0xF | 16 = 31 -> 15; element 16: 3 -> -13
    b[6 + 15] = 0xA0;  // element 31: 10 | 16 = 26 -> 10
    auto y = run(GgmlType::Q5_0, b, 32);
    EXPECT_EQ(y[0], 30.0f);
    EXPECT_EQ(y[16], -26.0f);
    EXPECT_EQ(y[31], 20.0f);
    EXPECT_EQ(y[1], -32.0f);

    std::vector<uint8_t> c(24);
    put_half(c, 0, HALF_HALF);  // d
    put_half(c, 2, HALF_ONE);   // m
    c[4 + 2] = 0x04;            // qh bit 18: element 18
    c[8 + 2] = 0x70;            // element 18: 7 | 16 = 23; element 2: 0
    y = run(GgmlType::Q5_1, c, 32);
    EXPECT_EQ(y[18], 0.5f * 23 + 1.0f);
    EXPECT_EQ(y[2], 1.0f);
}

// K-quant scale bytes giving sub-block j scale j + 1 and min j (high bits exercised for j >= 4).
void put_k_scales(std::vector<uint8_t> & b, size_t at) {
    for (int j = 0; j < 8; ++j) {
        const int sc = j + 1 + (j >= 4 ? 32 : 0), m = j + (j >= 4 ? 16 : 0);
        if (j < 4) {
            b[at + j] = static_cast<uint8_t>(sc);
            b[at + j + 4] = static_cast<uint8_t>(m);
        } else {
            b[at + j + 4] = static_cast<uint8_t>((sc & 0x0F) | ((m & 0x0F) << 4));
            b[at + j - 4] |= static_cast<uint8_t>((sc >> 4) << 6);
            b[at + j] |= static_cast<uint8_t>((m >> 4) << 6);
        }
    }
}

float k_scale(int j) {
    return static_cast<float>(j + 1 + (j >= 4 ? 32 : 0));
}
float k_min(int j) {
    return static_cast<float>(j + (j >= 4 ? 16 : 0));
}

TEST(Dequant, Q4_K) {
    std::vector<uint8_t> b(144);
    put_half(b, 0, HALF_ONE);   // d
    put_half(b, 2, HALF_HALF);  // dmin
    put_k_scales(b, 4);
    b[16 + 0] = 0x53;            // sub-block 0 value 0: 3; sub-block 1 value 0: 5
    b[16 + 3 * 32 + 31] = 0xF0;  // sub-block 6 value 31: 0; sub-block 7 value 31: 15
    const auto y = run(GgmlType::Q4_K, b, 256);
    EXPECT_EQ(y[0], k_scale(0) * 3 - 0.5f * k_min(0));
    EXPECT_EQ(y[32], k_scale(1) * 5 - 0.5f * k_min(1));
    EXPECT_EQ(y[6 * 32 + 31], -0.5f * k_min(6));
    EXPECT_EQ(y[7 * 32 + 31], k_scale(7) * 15 - 0.5f * k_min(7));
}

TEST(Dequant, Q5_K) {
    std::vector<uint8_t> b(176);
    put_half(b, 0, HALF_ONE);
    put_half(b, 2, HALF_ONE);
    put_k_scales(b, 4);
    b[16 + 2] = 0x81;           // qh of value 2: fifth bit set for sub-blocks 0 and 7
    b[48 + 3 * 32 + 2] = 0x21;  // value 2 of sub-block 6: 1, of sub-block 7: 2
    const auto y = run(GgmlType::Q5_K, b, 256);
    EXPECT_EQ(y[2], k_scale(0) * 16 - k_min(0));
    EXPECT_EQ(y[6 * 32 + 2], k_scale(6) * 1 - k_min(6));
    EXPECT_EQ(y[7 * 32 + 2], k_scale(7) * 18 - k_min(7));
}

TEST(Dequant, Q6_K) {
    std::vector<uint8_t> b(210);
    for (int i = 0; i < 16; ++i)
        b[192 + i] = static_cast<uint8_t>(static_cast<int8_t>(i - 8));
    put_half(b, 208, HALF_HALF);
    // value e = 128 + 96 + 5 (h 1, k 3): high nibble of ql[64 + 32 + 5], bits 6..7 of qh[32 + 5].
    b[64 + 32 + 5] = 0x70;
    b[128 + 32 + 5] = 0x80;  // hi = 2 -> q = 7 | 32 = 39 -> 39 - 32 = 7
    const auto y = run(GgmlType::Q6_K, b, 256);
    const int e = 128 + 96 + 5;
    EXPECT_EQ(y[e], (0.5f * static_cast<float>(e / 16 - 8)) * 7.0f);
    EXPECT_EQ(y[0], (0.5f * -8.0f) * -32.0f);
}

TEST(Dequant, ErrorsNameTheProblem) {
    std::vector<uint8_t> b(84);
    std::vector<float> out(256);
    auto status = dequantize(GgmlType::Q2_K, b.data(), b.size(), 256, out.data());
    ASSERT_FALSE(status.ok());
    EXPECT_NE(status.error().message.find("tensor type Q2_K is not supported"), std::string::npos);
    status = dequantize(GgmlType::Q8_0, b.data(), 33, 32, out.data());
    EXPECT_NE(status.error().message.find("too short"), std::string::npos);
    status = dequantize(GgmlType::Q8_0, b.data(), 68, 40, out.data());
    EXPECT_NE(status.error().message.find("not whole Q8_0 blocks"), std::string::npos);
}

}  // namespace
}  // namespace tinkerd::gguf
