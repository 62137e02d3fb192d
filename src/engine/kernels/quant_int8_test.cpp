// The int8-activation products (quant_int8.h) on random valid blocks of Q8_0, Q4_1, Q4_K and Q6_K: every SIMD
// path this CPU runs (AVX2 vpmaddubsw, AVX-512-VNNI) bit-identical to the scalar reference of the same integer
// algorithm; the result within the derived bound of the exact product, a bound tight enough to catch a wrong
// activation scale; and the products / grouped MoE switching to int8 only inside Int8ActivationsScope.
#include "engine/kernels/quant_int8.h"

#include <cmath>
#include <cstring>
#include <random>
#include <string>
#include <vector>

#include <gtest/gtest.h>
#include <torch/torch.h>

#include "engine/kernels/matmul.h"
#include "engine/kernels/quant_matmul.h"
#include "engine/kernels/quant_moe.h"
#include "engine/kernels/quant_test_blocks.h"

namespace tinkerd::engine::kernels::detail {
namespace {

using gguf::GgmlType;
using testing::layout_of;
using testing::random_weight;

const GgmlType kInt8Types[] = {GgmlType::Q8_0, GgmlType::Q4_1, GgmlType::Q4_K, GgmlType::Q6_K};

std::vector<Int8Isa> int8_isas() {
    std::vector<Int8Isa> out = {Int8Isa::scalar};
    for (const QuantIsa cap : {QuantIsa::avx2, QuantIsa::avx512}) {
        const Int8Isa isa = int8_isa_for(cap);
        if (isa != out.back()) {
            out.push_back(isa);
        }
    }
    return out;
}

std::string name(GgmlType type) {
    return gguf::ggml_type_name(static_cast<uint32_t>(type));
}

// A weight of `out` rows, its dequantised values and x [T, in].
struct Case {
    GgmlType type;
    int64_t out = 7, blocks = 0, in = 0, row_bytes = 0, T = 0;
    std::vector<uint8_t> w;
    std::vector<float> deq, x;
};

// x uniform in (-1, 1), or (wide = false) of magnitude in [0.5, 1] with random signs (each block's values
// near its largest: the worst-case bound is then within a small factor of the typical error).
Case make_case(GgmlType type, int64_t T, bool wide, std::mt19937 & rng) {
    Case c;
    c.type = type;
    c.T = T;
    const gguf::BlockLayout layout = layout_of(type);
    c.blocks = layout.elements == 32 ? 12 : 3;
    c.in = c.blocks * layout.elements;
    c.row_bytes = c.blocks * static_cast<int64_t>(layout.bytes);
    c.w = random_weight(type, c.out, c.blocks, rng);
    c.deq.resize(static_cast<size_t>(c.out * c.in));
    EXPECT_TRUE(gguf::dequantize(type, c.w.data(), c.w.size(), c.out * c.in, c.deq.data()).ok());
    std::uniform_real_distribution<float> uniform(-1.0f, 1.0f), half(0.5f, 1.0f);
    c.x.resize(static_cast<size_t>(T * c.in));
    for (auto & v : c.x) {
        v = wide ? uniform(rng) : (rng() % 2 ? 1.0f : -1.0f) * half(rng);
    }
    return c;
}

std::vector<float> run_int8(const Case & c, const Int8Rows & xq, Int8Isa isa, int64_t o0, int64_t o1) {
    std::vector<float> y(static_cast<size_t>(c.T * c.out), NAN);
    int8_forward_rows(c.type, int8_view(xq, 0, c.T), c.w.data(), c.row_bytes, o0, o1, y.data(), c.out, isa);
    return y;
}

// The derived bound on |y_int8 - y_exact| for output (t, o): Σ_blocks (d_x/2)(1 + 1e-4) Σ_i |w_i| (rounding
// to the step, the 1e-4 for x·(127/max) vs x/d_x in fp32) plus fp32 rounding of both paths' sums and scale
// products, 2 (in + blocks + 8) eps32 Σ_i |w_i| (|x_i| + d_x).
double bound(const Case & c, const Int8Rows & xq, int64_t t, int64_t o) {
    const double eps32 = std::ldexp(1.0, -23);
    double step = 0, magnitude = 0;
    for (int64_t i = 0; i < c.in; ++i) {
        const double dx = xq.d[static_cast<size_t>(t * xq.blocks + i / xq.block)];
        const double aw = std::fabs(c.deq[static_cast<size_t>(o * c.in + i)]);
        step += aw * dx / 2 * (1 + 1e-4);
        magnitude += aw * (std::fabs(c.x[static_cast<size_t>(t * c.in + i)]) + dx);
    }
    return step + 2.0 * static_cast<double>(c.in + c.blocks + 8) * eps32 * magnitude;
}

TEST(QuantInt8, SimdBitIdenticalToScalarReference) {
    std::mt19937 rng(3);
    ASSERT_GE(int8_isas().size(), 1u);
    for (const GgmlType type : kInt8Types) {
        for (const int64_t T : {1, 2, 3, 4, 5, 9}) {
            const Case c = make_case(type, T, true, rng);
            Int8Rows xq;
            quantise_rows_int8(type, c.x.data(), T, c.in, xq);
            const std::vector<float> want = run_int8(c, xq, Int8Isa::scalar, 1, c.out - 1);
            for (const Int8Isa isa : int8_isas()) {
                const std::vector<float> got = run_int8(c, xq, isa, 1, c.out - 1);
                for (int64_t t = 0; t < T; ++t) {
                    EXPECT_TRUE(std::isnan(got[static_cast<size_t>(t * c.out)])) << "row 0 outside [o0, o1)";
                    EXPECT_FALSE(std::isnan(got[static_cast<size_t>(t * c.out + 1)]));
                }
                for (size_t i = 0; i < want.size(); ++i) {
                    if (std::memcmp(&want[i], &got[i], sizeof(float)) != 0) {
                        FAIL() << name(type) << " " << int8_isa_name(isa) << " T=" << T << " at " << i << ": "
                               << want[i] << " vs " << got[i];
                    }
                }
            }
        }
    }
}

TEST(QuantInt8, ActivationsQuantisedToTheStep) {
    std::mt19937 rng(5);
    for (const GgmlType type : kInt8Types) {
        const Case c = make_case(type, 2, true, rng);
        Int8Rows xq;
        quantise_rows_int8(type, c.x.data(), c.T, c.in, xq);
        for (int64_t i = 0; i < c.T * c.in; ++i) {
            const float d = xq.d[static_cast<size_t>(i / xq.block)];
            const float err = std::fabs(c.x[static_cast<size_t>(i)] - d * xq.q[static_cast<size_t>(i)]);
            ASSERT_LE(err, d / 2 * (1 + 1e-4)) << name(type) << " value " << i;
        }
    }
    std::vector<float> bad(32, 1.0f);
    bad[3] = INFINITY;
    Int8Rows xq;
    quantise_rows_int8(GgmlType::Q8_0, bad.data(), 1, 32, xq);
    EXPECT_TRUE(std::isnan(xq.d[0]));  // a non-finite activation gives NaN products, as the exact path does
}

// Every output of every type and T within bound() of the exact kernel; then with d_x (and d_x Σq) 25% too
// large, most outputs must leave the bound: it is tight enough to catch a wrong activation scale.
TEST(QuantInt8, WithinDerivedBoundAndCatchesAWrongScale) {
    std::mt19937 rng(9);
    for (const GgmlType type : kInt8Types) {
        for (const bool wide : {true, false}) {
            const Case c = make_case(type, 3, wide, rng);
            std::vector<float> exact(static_cast<size_t>(c.T * c.out));
            quant_forward_rows(type, c.x.data(), c.T, c.in, c.w.data(), c.row_bytes, 0, c.out, exact.data(), c.out,
                               quant_cpu_isa());
            Int8Rows xq;
            quantise_rows_int8(type, c.x.data(), c.T, c.in, xq);
            const Int8Isa isa = int8_isas().back();
            const std::vector<float> y = run_int8(c, xq, isa, 0, c.out);
            Int8Rows wrong = xq;
            for (size_t b = 0; b < wrong.d.size(); ++b) {
                wrong.d[b] *= 1.25f;
                wrong.s[b] *= 1.25f;
            }
            const std::vector<float> y_wrong = run_int8(c, wrong, isa, 0, c.out);
            int caught = 0;
            for (int64_t i = 0; i < c.T * c.out; ++i) {
                const double limit = bound(c, xq, i / c.out, i % c.out), e = exact[static_cast<size_t>(i)];
                ASSERT_LE(std::fabs(y[static_cast<size_t>(i)] - e), limit) << name(type) << " output " << i;
                caught += std::fabs(y_wrong[static_cast<size_t>(i)] - e) > limit;
            }
            if (!wide) {
                EXPECT_GE(caught, c.T * c.out * 6 / 10) << name(type) << ": the bound misses a 25% scale error";
            }
        }
    }
}

// The kernel cap (TINKERD_MATMUL_KERNELS, the cpu-paths tier) caps the int8 path: no VNNI below avx512.
TEST(QuantInt8, KernelCapRulesOutVnni) {
    const KernelIsa before = kernel_isa();
    set_kernel_isa(KernelIsa::avx2);
    EXPECT_NE(std::string(int8_kernel_path()), "avx512-vnni");
    EXPECT_NE(int8_isa_for(quant_isa()), Int8Isa::vnni);
    set_kernel_isa(KernelIsa::generic);
    EXPECT_EQ(std::string(int8_kernel_path()), "scalar");
    set_kernel_isa(before);
    EXPECT_EQ(int8_isa_for(QuantIsa::scalar), Int8Isa::scalar);
}

// quantised_forward and the grouped MoE take the int8 path inside the scope only, and the grouped MoE in int8
// equals the per-expert int8 products bit for bit (each row of x quantised alike).
TEST(QuantInt8, ScopeSwitchesProductsAndGroupedMoe) {
    torch::manual_seed(1);
    std::mt19937 rng(13);
    const int64_t E = 3, C = 256, F = 64, T = 3;
    auto blocks = [&](GgmlType type, int64_t out, int64_t in) {
        const gguf::BlockLayout layout = layout_of(type);
        const std::vector<uint8_t> w = random_weight(type, E * out, in / layout.elements, rng);
        return torch::from_blob(
                   const_cast<uint8_t *>(w.data()),
                   {E, out, in / static_cast<int64_t>(layout.elements), static_cast<int64_t>(layout.bytes)},
                   torch::kUInt8)
            .clone();
    };
    const torch::Tensor g = blocks(GgmlType::Q4_K, F, C), u = blocks(GgmlType::Q8_0, F, C);
    const torch::Tensor down = blocks(GgmlType::Q4_1, C, F);
    const torch::Tensor x = torch::randn({T, C}) * 0.1;
    const torch::Tensor experts = torch::tensor({0, 2, 2, 1, 0, 2}, torch::kLong).view({T, 2});
    const torch::Tensor weights = torch::rand({T, 2});
    const torch::Tensor exact = quantised_forward(x, g[0]);
    const torch::Tensor moe_exact = quantised_moe_forward(x, g, u, down, experts, weights);
    torch::Tensor int8, moe_int8, per_expert;
    {
        Int8ActivationsScope scope(true);
        int8 = quantised_forward(x, g[0]);
        moe_int8 = quantised_moe_forward(x, g, u, down, experts, weights);
        per_expert = torch::zeros_like(x);
        for (int64_t t = 0; t < T; ++t) {
            for (int64_t k = 0; k < 2; ++k) {
                const int64_t e = experts[t][k].item<int64_t>();
                const torch::Tensor h = x.narrow(0, t, 1), gate = quantised_forward(h, g[e]);
                const torch::Tensor act = gate * torch::sigmoid(gate) * quantised_forward(h, u[e]);
                per_expert[t] += quantised_forward(act, down[e])[0] * weights[t][k];
            }
        }
    }
    EXPECT_TRUE(torch::equal(quantised_forward(x, g[0]), exact)) << "the scope did not restore the exact path";
    EXPECT_FALSE(torch::equal(int8, exact)) << "the scope did not switch to int8";
    EXPECT_TRUE(torch::allclose(int8, exact, 0.05, 0.05 * exact.abs().max().item<double>()));
    EXPECT_FALSE(torch::equal(moe_int8, moe_exact));
    EXPECT_TRUE(torch::allclose(moe_int8, per_expert, 1e-5, 1e-6)) << (moe_int8 - per_expert).abs().max();
}

}  // namespace
}  // namespace tinkerd::engine::kernels::detail
