// The grouped quantised MoE (quant_moe.h) on random valid blocks of every kept type (gate, up and down of
// different types), ragged routings (experts with 0, 1 or several tokens): equal bit for bit to the per-expert
// path (quantised_forward per expert, sigmoid-SwiGLU, weighted sum in ascending expert order), and to a
// double-precision product of the dequantised weights within fp32 summation error.
#include "engine/kernels/quant_moe.h"

#include <cmath>

#include <gtest/gtest.h>

#include "engine/kernels/quant_int8.h"
#include "engine/kernels/quant_matmul.h"
#include "gguf/ggml_types.h"

namespace tinkerd::engine::kernels {
namespace {

using gguf::GgmlType;

const GgmlType kTypes[] = {GgmlType::Q8_0, GgmlType::Q4_0, GgmlType::Q4_1, GgmlType::Q5_0,
                           GgmlType::Q5_1, GgmlType::Q4_K, GgmlType::Q5_K, GgmlType::Q6_K};

// Random blocks [E, out, in / blk, bb] with finite, moderate fp16 scale fields (d, and dmin / m if any).
torch::Tensor random_blocks(GgmlType type, int64_t E, int64_t out, int64_t in) {
    gguf::BlockLayout layout;
    gguf::ggml_block_layout(static_cast<uint32_t>(type), layout);
    const int64_t bb = layout.bytes;
    torch::Tensor w = torch::randint(0, 256, {E, out, in / layout.elements, bb}, torch::kUInt8);
    const bool two =
        type == GgmlType::Q4_1 || type == GgmlType::Q5_1 || type == GgmlType::Q4_K || type == GgmlType::Q5_K;
    const int64_t at = type == GgmlType::Q6_K ? 208 : 0;
    const auto n = w.numel() / bb;
    for (int h = 0; h < (two ? 2 : 1); ++h) {
        torch::Tensor s = (torch::rand({n}) * 0.02 + 0.001).to(torch::kHalf).view(torch::kUInt8).view({n, 2});
        w.view({n, bb}).narrow(1, at + 2 * h, 2).copy_(s);
    }
    return w;
}

// The per-expert path as moe_block.cpp runs it without the grouped kernel.
torch::Tensor per_expert(const torch::Tensor & x, const torch::Tensor & g, const torch::Tensor & u,
                         const torch::Tensor & d, const torch::Tensor & experts, const torch::Tensor & weights) {
    torch::Tensor y = torch::zeros_like(x);
    for (int64_t e = 0; e < g.size(0); ++e) {
        const torch::Tensor hit = (experts == e).nonzero();  // [n, 2]: (token, slot), tokens ascending
        if (hit.size(0) == 0) {
            continue;
        }
        const torch::Tensor tokens = hit.select(1, 0), h = x.index_select(0, tokens);
        const torch::Tensor gate = quantised_forward(h, g[e]), up = quantised_forward(h, u[e]);
        const torch::Tensor act = gate * torch::sigmoid(gate) * up;
        const torch::Tensor w = weights.index({tokens, hit.select(1, 1)});
        y.index_add_(0, tokens, quantised_forward(act, d[e]) * w.unsqueeze(1));
    }
    return y;
}

// The same in float64 on the dequantised weights, and Σ|terms| of each output for the error bound.
torch::Tensor exact(const torch::Tensor & x, const torch::Tensor & g, const torch::Tensor & u, const torch::Tensor & d,
                    const torch::Tensor & experts, const torch::Tensor & weights) {
    const torch::Tensor gd = dequantise(g).to(torch::kDouble), ud = dequantise(u).to(torch::kDouble);
    const torch::Tensor dd = dequantise(d).to(torch::kDouble), xd = x.to(torch::kDouble);
    torch::Tensor y = torch::zeros_like(xd);
    for (int64_t t = 0; t < x.size(0); ++t) {
        for (int64_t s = 0; s < experts.size(1); ++s) {
            const int64_t e = experts[t][s].item<int64_t>();
            const torch::Tensor gate = gd[e].matmul(xd[t]), up = ud[e].matmul(xd[t]);
            y[t] += dd[e].matmul(gate * torch::sigmoid(gate) * up) * weights[t][s].item<double>();
        }
    }
    return y;
}

TEST(QuantMoe, GroupedEqualsPerExpertAndDequantised) {
    torch::manual_seed(3);
    const int64_t E = 6, C = 512, F = 256;
    const int n = sizeof(kTypes) / sizeof(kTypes[0]);
    for (int i = 0; i < n; ++i) {
        const torch::Tensor g = random_blocks(kTypes[i], E, F, C), u = random_blocks(kTypes[(i + 1) % n], E, F, C);
        const torch::Tensor d = random_blocks(kTypes[(i + 3) % n], E, C, F);
        for (const auto & [T, k] : {std::pair{1, 2}, std::pair{3, 3}, std::pair{7, 2}, std::pair{15, 4}}) {
            const torch::Tensor x = torch::randn({T, C});
            const torch::Tensor experts = torch::rand({T, E})
                                              .argsort(/*dim=*/int64_t{1}, /*descending=*/false)
                                              .narrow(1, 0, k)
                                              .contiguous();  // distinct
            const torch::Tensor weights = torch::rand({T, k});
            const torch::Tensor got = quantised_moe_forward(x, g, u, d, experts, weights);
            const std::string what = std::string(gguf::ggml_type_name(static_cast<uint32_t>(kTypes[i]))) +
                                     " T=" + std::to_string(T) + " k=" + std::to_string(k);
            ASSERT_TRUE(torch::equal(got, per_expert(x, g, u, d, experts, weights))) << what;
            const torch::Tensor want = exact(x, g, u, d, experts, weights);
            const double err = (got.to(torch::kDouble) - want).abs().max().item<double>();
            EXPECT_LE(err, 1e-4 * (1.0 + want.abs().max().item<double>())) << what;
        }
    }
}

// --sample-activations int8: the grouped path quantises each token once per weight type and gathers the
// quantised rows; a row's int8 blocks depend on that row only, so it equals the per-expert products (each
// quantising its own gathered rows) bit for bit, with routings where one token feeds several experts.
TEST(QuantMoe, Int8ActivationsGroupedEqualPerExpert) {
    torch::manual_seed(5);
    const int64_t E = 6, C = 512, F = 256;
    const GgmlType int8_types[] = {GgmlType::Q4_K, GgmlType::Q6_K, GgmlType::Q8_0, GgmlType::Q4_1};
    const int n = sizeof(int8_types) / sizeof(int8_types[0]);
    const Int8ActivationsScope int8(true);
    for (int i = 0; i < 2 * n; ++i) {
        // gate and up of one type (their quantised rows shared), then of two types (each quantises and gathers
        // its own); down of another
        const GgmlType up_type = i < n ? int8_types[i % n] : int8_types[(i + 2) % n];
        const torch::Tensor g = random_blocks(int8_types[i % n], E, F, C), u = random_blocks(up_type, E, F, C);
        const torch::Tensor d = random_blocks(int8_types[(i + 1) % n], E, C, F);
        for (const auto & [T, k] : {std::pair{1, 4}, std::pair{5, 3}}) {
            const torch::Tensor x = torch::randn({T, C});
            const torch::Tensor experts =
                torch::rand({T, E}).argsort(/*dim=*/int64_t{1}, /*descending=*/false).narrow(1, 0, k).contiguous();
            const torch::Tensor weights = torch::rand({T, k});
            const torch::Tensor got = quantised_moe_forward(x, g, u, d, experts, weights);
            const std::string what = std::string(gguf::ggml_type_name(static_cast<uint32_t>(int8_types[i % n]))) + "/" +
                                     gguf::ggml_type_name(static_cast<uint32_t>(up_type)) + " T=" + std::to_string(T) +
                                     " k=" + std::to_string(k);
            ASSERT_TRUE(torch::equal(got, per_expert(x, g, u, d, experts, weights))) << what;
            // and the int8 path was taken: it differs from the exact products
            const Int8ActivationsScope exact_scope(false);
            EXPECT_FALSE(torch::equal(got, quantised_moe_forward(x, g, u, d, experts, weights))) << what;
        }
    }
}

}  // namespace
}  // namespace tinkerd::engine::kernels
