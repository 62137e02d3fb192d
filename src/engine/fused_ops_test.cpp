// The fused RMSNorm, RoPE and SwiGLU against the plain torch compositions they replace: forward and
// backward (autograd gradients of a random projection of the output), fp32 and fp64, odd sizes, and
// strided inputs; fp32 results are also held against the fp64 composition.
#include "engine/fused_ops.h"

#include <gtest/gtest.h>

namespace tinkerd::testing {
namespace {

using engine::fused_rms_norm;
using engine::fused_rope;
using engine::fused_swiglu;

// Max |a - b| / max(|b|, 1e-3·max|b|) over all elements.
double max_rel_error(const torch::Tensor & a, const torch::Tensor & b) {
    const torch::Tensor diff = (a.to(torch::kFloat64) - b.to(torch::kFloat64)).abs();
    const torch::Tensor bound = b.to(torch::kFloat64).abs().clamp_min(1e-3 * b.abs().max().item<double>());
    return (diff / bound).max().item<double>();
}

// Output and input gradients of f(inputs) under the weighting g: d(Σ f·g)/d inputs.
std::vector<torch::Tensor> run(const std::function<torch::Tensor(std::vector<torch::Tensor> &)> & f,
                               std::vector<torch::Tensor> inputs, const torch::Tensor & g) {
    for (auto & x : inputs) {
        x = x.detach().clone().requires_grad_(true);
    }
    torch::Tensor y = f(inputs);
    auto grads = torch::autograd::grad({(y * g.to(y.scalar_type())).sum()}, inputs);
    grads.insert(grads.begin(), y.detach());
    return grads;
}

// Compares the fused op with the reference composition in dtype, and the fp32 fused op with fp64.
void expect_matches(const std::function<torch::Tensor(std::vector<torch::Tensor> &)> & fused,
                    const std::function<torch::Tensor(std::vector<torch::Tensor> &)> & reference,
                    const std::vector<torch::Tensor> & inputs_f64, const torch::Tensor & g) {
    auto exact = run(reference, inputs_f64, g);
    auto fused64 = run(fused, inputs_f64, g);
    std::vector<torch::Tensor> inputs_f32;
    for (const auto & x : inputs_f64) {
        inputs_f32.push_back(x.to(torch::kFloat32));
    }
    auto fused32 = run(fused, inputs_f32, g);
    auto ref32 = run(reference, inputs_f32, g);
    for (size_t i = 0; i < exact.size(); ++i) {
        SCOPED_TRACE("output " + std::to_string(i) + " (0 = forward, then input gradients)");
        EXPECT_LT(max_rel_error(fused64[i], exact[i]), 1e-12);
        EXPECT_LT(max_rel_error(fused32[i], exact[i]), 2e-5);
        // no worse than the composition itself in fp32 (plus rounding)
        EXPECT_LT(max_rel_error(fused32[i], exact[i]), 2 * max_rel_error(ref32[i], exact[i]) + 2e-6);
    }
}

TEST(FusedOps, RmsNormMatchesTheComposition) {
    torch::manual_seed(1);
    for (int64_t c : {7, 64, 577}) {  // C of 1 or 2: the gradient cancels to ~0, relative errors mean nothing
        for (int64_t n : {1, 5, 33}) {
            SCOPED_TRACE("n " + std::to_string(n) + " c " + std::to_string(c));
            const torch::Tensor w = torch::randn({c}, torch::kFloat64);
            auto fused = [&](std::vector<torch::Tensor> & in) {
                return fused_rms_norm(in[0], w.to(in[0].dtype()), 1e-5);
            };
            auto ref = [&](std::vector<torch::Tensor> & in) {
                return engine::rms_norm_reference(in[0], w.to(in[0].dtype()), 1e-5);
            };
            expect_matches(fused, ref, {torch::randn({n, c}, torch::kFloat64) * 3},
                           torch::randn({n, c}, torch::kFloat64));
        }
    }
}

TEST(FusedOps, RmsNormOverHeadsOfAStridedView) {
    torch::manual_seed(2);
    const torch::Tensor w = torch::randn({16}, torch::kFloat64);
    const torch::Tensor base = torch::randn({5, 3, 40}, torch::kFloat64);  // [T, H, 40], a view of 16 of 40
    auto fused = [&](std::vector<torch::Tensor> & in) {
        return fused_rms_norm(in[0].narrow(2, 8, 16), w.to(in[0].dtype()), 1e-6);
    };
    auto ref = [&](std::vector<torch::Tensor> & in) {
        return engine::rms_norm_reference(in[0].narrow(2, 8, 16), w.to(in[0].dtype()), 1e-6);
    };
    expect_matches(fused, ref, {base}, torch::randn({5, 3, 16}, torch::kFloat64));
}

TEST(FusedOps, RopeMatchesTheComposition) {
    torch::manual_seed(3);
    for (int64_t d : {2, 16, 64}) {
        for (int64_t heads : {1, 3}) {
            const int64_t t = 7;
            SCOPED_TRACE("d " + std::to_string(d) + " heads " + std::to_string(heads));
            torch::Tensor freqs = torch::rand({t, d / 2}, torch::kFloat64) * 10;
            torch::Tensor emb = torch::cat({freqs, freqs}, -1).unsqueeze(1);  // [T, 1, D]
            auto fused = [&](std::vector<torch::Tensor> & in) {
                return fused_rope(in[0], emb.cos().to(in[0].dtype()), emb.sin().to(in[0].dtype()));
            };
            auto ref = [&](std::vector<torch::Tensor> & in) {
                return engine::rope_reference(in[0], emb.cos().to(in[0].dtype()), emb.sin().to(in[0].dtype()));
            };
            expect_matches(fused, ref, {torch::randn({t, heads, d}, torch::kFloat64)},
                           torch::randn({t, heads, d}, torch::kFloat64));
        }
    }
}

TEST(FusedOps, SwigluMatchesTheCompositionOnStridedHalves) {
    torch::manual_seed(4);
    for (int64_t f : {1, 9, 1537}) {
        SCOPED_TRACE("f " + std::to_string(f));
        const int64_t t = 5;
        auto fused = [&](std::vector<torch::Tensor> & in) {
            auto parts = in[0].split(f, 1);  // row stride 2F, as the fused gate/up projection's halves
            return fused_swiglu(parts[0], parts[1]);
        };
        auto ref = [&](std::vector<torch::Tensor> & in) {
            auto parts = in[0].split(f, 1);
            return engine::swiglu_reference(parts[0], parts[1]);
        };
        expect_matches(fused, ref, {torch::randn({t, 2 * f}, torch::kFloat64) * 4},
                       torch::randn({t, f}, torch::kFloat64));
    }
}

TEST(FusedOps, OtherDtypesFallBackToTheComposition) {
    const torch::Tensor x = torch::randn({3, 8}).to(torch::kBFloat16);
    const torch::Tensor w = torch::ones({8}).to(torch::kBFloat16);
    EXPECT_TRUE(torch::equal(fused_rms_norm(x, w, 1e-5), engine::rms_norm_reference(x, w, 1e-5)));
    EXPECT_TRUE(torch::equal(fused_swiglu(x, x), engine::swiglu_reference(x, x)));
}

}  // namespace
}  // namespace tinkerd::testing
