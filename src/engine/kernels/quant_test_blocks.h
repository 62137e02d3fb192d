// Test helpers of the quantised-weight kernel tests: a type's block layout and random valid blocks (every byte
// random, the f16 scale fields finite and of moderate size).
#pragma once

#include <cstdint>
#include <cstring>
#include <random>
#include <vector>

#include <gtest/gtest.h>

#include "gguf/dequant.h"
#include "gguf/ggml_types.h"

namespace tinkerd::engine::kernels::detail::testing {

using gguf::GgmlType;

inline gguf::BlockLayout layout_of(GgmlType type) {
    gguf::BlockLayout layout;
    EXPECT_TRUE(gguf::ggml_block_layout(static_cast<uint32_t>(type), layout));
    return layout;
}

// A finite f16 of moderate size: random sign and mantissa, exponent field 0..17 (subnormals up to ~4).
inline uint16_t random_half(std::mt19937 & rng) {
    const uint32_t bits = rng();
    return static_cast<uint16_t>((bits & 0x8000) | ((bits % 18) << 10) | ((bits >> 16) & 0x3FF));
}

// rows × blocks random blocks; their f16 scale fields (d, and m / dmin where the type has one) finite.
inline std::vector<uint8_t> random_weight(GgmlType type, int64_t rows, int64_t blocks, std::mt19937 & rng) {
    const auto bb = static_cast<int64_t>(layout_of(type).bytes);
    std::vector<uint8_t> w(static_cast<size_t>(rows * blocks * bb));
    for (auto & b : w) {
        b = static_cast<uint8_t>(rng());
    }
    const bool two =
        type == GgmlType::Q4_1 || type == GgmlType::Q5_1 || type == GgmlType::Q4_K || type == GgmlType::Q5_K;
    const int64_t at = type == GgmlType::Q6_K ? 208 : 0;
    for (int64_t k = 0; k < rows * blocks; ++k) {
        for (int h = 0; h < (two ? 2 : 1); ++h) {
            const uint16_t v = random_half(rng);
            std::memcpy(&w[static_cast<size_t>(k * bb + at + 2 * h)], &v, 2);
        }
    }
    return w;
}

}  // namespace tinkerd::engine::kernels::detail::testing
