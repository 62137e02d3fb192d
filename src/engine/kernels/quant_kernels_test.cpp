// Quantised-weight kernels (quant_kernels.h) on random valid blocks of every supported type, for every ISA
// this CPU runs: dequant_rows bit-identical to gguf::dequantize (whole rows and column ranges), and
// quant_forward_rows against a double-precision dot of the dequantised weights within fp32 summation error.
#include "engine/kernels/quant_kernels.h"

#include <cmath>
#include <cstring>
#include <random>
#include <string>
#include <vector>

#include <gtest/gtest.h>

#include "engine/kernels/quant_test_blocks.h"
#include "gguf/dequant.h"

namespace tinkerd::engine::kernels::detail {
namespace {

using gguf::GgmlType;
using testing::layout_of;
using testing::random_weight;

const GgmlType kTypes[] = {GgmlType::Q8_0, GgmlType::Q4_0, GgmlType::Q4_1, GgmlType::Q5_0,
                           GgmlType::Q5_1, GgmlType::Q4_K, GgmlType::Q5_K, GgmlType::Q6_K};

std::vector<QuantIsa> isas() {
    std::vector<QuantIsa> out = {QuantIsa::scalar};
    if (quant_cpu_isa() != QuantIsa::scalar) {
        out.push_back(QuantIsa::avx2);
    }
    if (quant_cpu_isa() == QuantIsa::avx512) {
        out.push_back(QuantIsa::avx512);
    }
    return out;
}

std::string isa_name(QuantIsa isa) {
    return isa == QuantIsa::avx512 ? "avx512" : isa == QuantIsa::avx2 ? "avx2" : "scalar";
}

// Row r's values [col, col + n) by gguf::dequantize.
std::vector<float> reference_row(GgmlType type, const uint8_t * row, int64_t blocks, int64_t col, int64_t n) {
    const gguf::BlockLayout layout = layout_of(type);
    std::vector<float> full(static_cast<size_t>(blocks * layout.elements));
    EXPECT_TRUE(gguf::dequantize(type, row, blocks * layout.bytes, blocks * layout.elements, full.data()).ok());
    return {full.begin() + col, full.begin() + col + n};
}

TEST(QuantKernels, TypesAndBlockBytes) {
    for (const GgmlType type : kTypes) {
        EXPECT_TRUE(quant_type_supported(type));
        GgmlType found = GgmlType::F32;
        ASSERT_TRUE(quant_type_from_block_bytes(static_cast<int64_t>(layout_of(type).bytes), found));
        EXPECT_EQ(found, type);
    }
    EXPECT_FALSE(quant_type_supported(GgmlType::F32));
    EXPECT_FALSE(quant_type_supported(GgmlType::Q2_K));
    GgmlType unused;
    EXPECT_FALSE(quant_type_from_block_bytes(84, unused));  // Q2_K's block
    EXPECT_FALSE(quant_type_from_block_bytes(0, unused));
}

// dequant_rows over whole rows and over the column range of blocks [1, blocks - 1), into a padded output.
TEST(QuantKernels, DequantRowsBitIdentical) {
    std::mt19937 rng(7);
    for (const GgmlType type : kTypes) {
        const gguf::BlockLayout layout = layout_of(type);
        const int64_t rows = 5, blocks = layout.elements == 32 ? 9 : 4, elems = layout.elements;
        const int64_t row_bytes = blocks * static_cast<int64_t>(layout.bytes);
        const std::vector<uint8_t> w = random_weight(type, rows, blocks, rng);
        for (const QuantIsa isa : isas()) {
            for (const int64_t first : {int64_t{0}, int64_t{1}}) {
                const int64_t n = (blocks - 2 * first) * elems, ldo = n + 5;
                std::vector<float> out(static_cast<size_t>(rows * ldo), -1.0f);
                dequant_rows(type, w.data() + first * layout.bytes, row_bytes, rows, n, out.data(), ldo, isa);
                for (int64_t r = 0; r < rows; ++r) {
                    const auto want = reference_row(type, w.data() + r * row_bytes, blocks, first * elems, n);
                    ASSERT_EQ(std::memcmp(want.data(), out.data() + r * ldo, static_cast<size_t>(n) * 4), 0)
                        << gguf::ggml_type_name(static_cast<uint32_t>(type)) << " " << isa_name(isa) << " row " << r
                        << " first block " << first;
                    EXPECT_EQ(out[static_cast<size_t>(r * ldo + n)], -1.0f);  // the padding is not written
                }
            }
        }
    }
}

// fp32 sums of `in` products in any order (each product rounded, or fused into its add) are within
// γ_in · Σ|x_i w_i| of the exact sum, γ_in = in·u / (1 - in·u) with u = eps32 / 2 (Higham, ch. 3/4);
// for in·u < 1/2, γ_in <= in·eps32, and we allow twice that. The double reference is exact to ~1e-16.
TEST(QuantKernels, ForwardRowsWithinSummationError) {
    std::mt19937 rng(11);
    std::uniform_real_distribution<float> uniform(-1.0f, 1.0f);
    const double eps32 = std::ldexp(1.0, -23);
    for (const GgmlType type : kTypes) {
        const gguf::BlockLayout layout = layout_of(type);
        const int64_t out = 7, blocks = layout.elements == 32 ? 12 : 3, in = blocks * layout.elements;
        const int64_t row_bytes = blocks * static_cast<int64_t>(layout.bytes), o0 = 1, o1 = 6;
        const std::vector<uint8_t> w = random_weight(type, out, blocks, rng);
        std::vector<float> deq(static_cast<size_t>(out * in));
        ASSERT_TRUE(gguf::dequantize(type, w.data(), w.size(), out * in, deq.data()).ok());
        for (const int64_t T : {1, 2, 3, 4, 8, 17}) {
            std::vector<float> x(static_cast<size_t>(T * in));
            for (auto & v : x) {
                v = uniform(rng);
            }
            for (const QuantIsa isa : isas()) {
                const int64_t ldy = out + 3;
                std::vector<float> y(static_cast<size_t>(T * ldy), NAN);
                quant_forward_rows(type, x.data(), T, in, w.data(), row_bytes, o0, o1, y.data(), ldy, isa);
                for (int64_t t = 0; t < T; ++t) {
                    for (int64_t o = 0; o < out; ++o) {
                        const float got = y[static_cast<size_t>(t * ldy + o)];
                        if (o < o0 || o >= o1) {
                            EXPECT_TRUE(std::isnan(got)) << "row " << o << " outside [o0, o1) was written";
                            continue;
                        }
                        double exact = 0, magnitude = 0;
                        for (int64_t i = 0; i < in; ++i) {
                            const double p = double{x[t * in + i]} * double{deq[o * in + i]};
                            exact += p;
                            magnitude += std::fabs(p);
                        }
                        ASSERT_LE(std::fabs(got - exact), 2.0 * static_cast<double>(in) * eps32 * magnitude)
                            << gguf::ggml_type_name(static_cast<uint32_t>(type)) << " " << isa_name(isa) << " T=" << T
                            << " t=" << t << " o=" << o;
                    }
                }
            }
        }
    }
}

}  // namespace
}  // namespace tinkerd::engine::kernels::detail
