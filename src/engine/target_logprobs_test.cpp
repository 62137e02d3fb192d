// chunked_target_logprobs against the plain path (full logits → log_softmax → gather, with autograd):
// forward values and the gradients of h, LoRA A and B, for odd T and V, 1-D and 2-D targets, segments
// with different adapters, a shared adapter and none, chunk sizes that do not divide T, fp32/bf16/fp64 W; the
// softmax kept from the forward against the one recomputed in the backward (bit-identical), and retain_graph.
#include "engine/target_logprobs.h"

#include <gtest/gtest.h>
#include <torch/torch.h>

#include "engine/kernels/matmul_settings_guard.h"

namespace tinkerd::engine {
namespace {

constexpr int64_t T = 23, V = 37, C = 8;

struct LoraParams {
    torch::Tensor a;  // [R, C]
    torch::Tensor b;  // [V, R]
    double scale;
};

struct Segment {
    int64_t begin, end;
    int adapter;  // index into the adapters, -1 = none
};

// Rows 0-4 adapter 0, 5-8 none, 9-16 adapter 1, 17-22 adapter 0 again (its B gathers both segments).
const std::vector<Segment> SEGMENTS = {{0, 5, 0}, {5, 9, -1}, {9, 17, 1}, {17, 23, 0}};

struct Case {
    torch::ScalarType act;
    torch::ScalarType weight;
    int64_t k_max;
    int64_t chunk;
};

class TargetLogprobsTest : public ::testing::TestWithParam<Case> {};

// The inputs every path starts from, fresh leaves each time (seeded).
struct Inputs {
    torch::Tensor h, w, index, grad_out;
    std::vector<LoraParams> adapters;
};

Inputs make_inputs(const Case & c, int64_t vocab = V) {
    torch::manual_seed(7);
    auto opt = torch::TensorOptions().dtype(c.act);
    Inputs in;
    in.h = torch::randn({T, C}, opt).requires_grad_(true);
    in.w = torch::randn({vocab, C}, opt).to(c.weight);
    in.index = torch::randint(0, vocab, {T, c.k_max}, torch::kInt64);
    in.grad_out = torch::randn({T, c.k_max}, opt);
    for (int64_t rank : {3, 2}) {
        in.adapters.push_back({torch::randn({rank, C}, opt).requires_grad_(true),
                               torch::randn({vocab, rank}, opt).requires_grad_(true), 2.0 / rank});
    }
    return in;
}

torch::Tensor lora_u(const Inputs & in, const Segment & s) {
    const LoraParams & p = in.adapters[s.adapter];
    return torch::matmul(in.h.narrow(0, s.begin, s.end - s.begin), p.a.t()) * p.scale;  // [n, R]
}

torch::Tensor plain_path(const Inputs & in) {
    torch::Tensor logits = torch::matmul(in.h, in.w.to(in.h.scalar_type()).t());  // [T, V]
    std::vector<torch::Tensor> rows;
    for (const Segment & s : SEGMENTS) {
        torch::Tensor part = logits.narrow(0, s.begin, s.end - s.begin);
        rows.push_back(s.adapter < 0 ? part : part + torch::matmul(lora_u(in, s), in.adapters[s.adapter].b.t()));
    }
    return torch::log_softmax(torch::cat(rows, 0), 1).gather(1, in.index);  // [T, Kmax]
}

torch::Tensor chunked_path(const Inputs & in, int64_t chunk, HeadSoftmax softmax = HeadSoftmax::automatic) {
    std::vector<HeadLoraSegment> loras;
    for (const Segment & s : SEGMENTS) {
        if (s.adapter >= 0) {
            loras.push_back({s.begin, s.end, lora_u(in, s), in.adapters[s.adapter].b});
        }
    }
    return chunked_target_logprobs(in.h, in.w, loras, in.index, chunk, softmax);
}

// Every gradient the loss sum(picked · grad_out) gives: h, then A and B of each adapter.
std::vector<torch::Tensor> gradients(const Inputs & in, const torch::Tensor & picked) {
    std::vector<torch::Tensor> leaves = {in.h};
    for (const LoraParams & p : in.adapters) {
        leaves.push_back(p.a);
        leaves.push_back(p.b);
    }
    return torch::autograd::grad({(picked * in.grad_out).sum()}, leaves);
}

double max_rel_diff(const torch::Tensor & got, const torch::Tensor & want) {
    const double scale = std::max(1.0, want.abs().max().item<double>());
    return (got.to(torch::kFloat64) - want.to(torch::kFloat64)).abs().max().item<double>() / scale;
}

TEST_P(TargetLogprobsTest, MatchesPlainPathForwardAndBackward) {
    const Case c = GetParam();
    const double tol = c.act == torch::kFloat64 ? 1e-12 : 2e-5;
    Inputs plain = make_inputs(c), chunked = make_inputs(c);
    torch::Tensor want = plain_path(plain), got = chunked_path(chunked, c.chunk);
    ASSERT_EQ(got.sizes(), want.sizes());
    EXPECT_LT(max_rel_diff(got, want), tol);
    auto want_grads = gradients(plain, want), got_grads = gradients(chunked, got);
    for (size_t i = 0; i < want_grads.size(); ++i) {
        EXPECT_LT(max_rel_diff(got_grads[i], want_grads[i]), tol) << "gradient " << i;
    }
}

// Keeping the softmax changes where it is formed, not how: the same ops on the same values, so every output and
// gradient is bit-identical to the recomputing backward's; and both match the plain path.
TEST_P(TargetLogprobsTest, KeptSoftmaxEqualsRecomputedBitForBit) {
    const Case c = GetParam();
    Inputs kept = make_inputs(c), recomputed = make_inputs(c), plain = make_inputs(c);
    torch::Tensor got_kept = chunked_path(kept, c.chunk, HeadSoftmax::keep);
    torch::Tensor got_recomputed = chunked_path(recomputed, c.chunk, HeadSoftmax::recompute);
    EXPECT_TRUE(torch::equal(got_kept, got_recomputed));
    auto kept_grads = gradients(kept, got_kept), recomputed_grads = gradients(recomputed, got_recomputed);
    auto plain_grads = gradients(plain, plain_path(plain));
    for (size_t i = 0; i < kept_grads.size(); ++i) {
        EXPECT_TRUE(torch::equal(kept_grads[i], recomputed_grads[i])) << "gradient " << i;
        EXPECT_LT(max_rel_diff(kept_grads[i], plain_grads[i]), c.act == torch::kFloat64 ? 1e-12 : 2e-5) << i;
    }
}

// The kept softmax is used up by the first backward; a second one (retain_graph) recomputes it and gives the same.
TEST(TargetLogprobs, SecondBackwardWithRetainedGraphRecomputes) {
    Inputs in = make_inputs({torch::kFloat32, torch::kBFloat16, 2, 6});
    torch::Tensor picked = chunked_path(in, 6, HeadSoftmax::keep);
    torch::Tensor loss = (picked * in.grad_out).sum();
    auto first = torch::autograd::grad({loss}, {in.h}, {}, /*retain_graph=*/true);
    auto second = torch::autograd::grad({loss}, {in.h});
    EXPECT_TRUE(torch::equal(first[0], second[0]));
}

// With bf16 inputs and brgemm (the auto choice on CPUs with bf16 dot products) the dh product takes the bf16 copy
// of dlogits written in the same pass: kept and recomputed still agree bit for bit, and the gradients stay within
// bf16 rounding of the plain fp32 path (a wrong copy would be far off).
TEST(TargetLogprobs, Bf16InputsTakeTheRoundedDlogitsAndAgree) {
    using namespace kernels;
    const kernels::SettingsGuard guard;
    set_matmul_inputs(MatmulInputs::bf16);
    set_brgemm_enabled(true);
    set_blas_min_rows(1);                                    // the many-row paths (brgemm) for these few rows
    const Case c{torch::kFloat32, torch::kBFloat16, 2, 23};  // one chunk of 23 rows: the many-row products
    constexpr int64_t even_vocab = 38;                       // brgemm's reduction (V here) must be even
    Inputs kept = make_inputs(c, even_vocab), recomputed = make_inputs(c, even_vocab),
           plain = make_inputs(c, even_vocab);
    torch::Tensor got_kept = chunked_path(kept, c.chunk, HeadSoftmax::keep);
    torch::Tensor got_recomputed = chunked_path(recomputed, c.chunk, HeadSoftmax::recompute);
    auto kept_grads = gradients(kept, got_kept), recomputed_grads = gradients(recomputed, got_recomputed);
    auto plain_grads = gradients(plain, plain_path(plain));
    const bool took_rounded = backward_takes_rounded(torch::zeros({T, even_vocab}), kept.w);
    EXPECT_TRUE(torch::equal(got_kept, got_recomputed));
    for (size_t i = 0; i < kept_grads.size(); ++i) {
        EXPECT_TRUE(torch::equal(kept_grads[i], recomputed_grads[i])) << "gradient " << i;
        EXPECT_LT(max_rel_diff(kept_grads[i], plain_grads[i]), 0.05) << "gradient " << i;
    }
    if (!took_rounded) {
        GTEST_SKIP() << "no bf16 brgemm here (or fewer rows than blas_min_rows): the rounded dlogits were NOT tested";
    }
}

TEST_P(TargetLogprobsTest, NoGradForwardMatches) {
    const Case c = GetParam();
    Inputs in = make_inputs(c);
    torch::Tensor want = plain_path(in).detach();
    torch::NoGradGuard no_grad;
    torch::Tensor got = chunked_path(in, c.chunk);
    EXPECT_FALSE(got.requires_grad());
    EXPECT_LT(max_rel_diff(got, want), c.act == torch::kFloat64 ? 1e-12 : 2e-5);
}

TEST(TargetLogprobs, WithoutLoraOnlyHasGradient) {
    Inputs in = make_inputs({torch::kFloat64, torch::kFloat64, 2, 5});
    torch::Tensor logits = torch::matmul(in.h, in.w.t());
    torch::Tensor want = torch::log_softmax(logits, 1).gather(1, in.index);
    torch::Tensor got = chunked_target_logprobs(in.h, in.w, {}, in.index, 5);
    EXPECT_LT(max_rel_diff(got, want), 1e-12);
    auto gw = torch::autograd::grad({(want * in.grad_out).sum()}, {in.h});
    auto gg = torch::autograd::grad({(got * in.grad_out).sum()}, {in.h});
    EXPECT_LT(max_rel_diff(gg[0], gw[0]), 1e-12);
}

INSTANTIATE_TEST_SUITE_P(
    Cases, TargetLogprobsTest,
    ::testing::Values(Case{torch::kFloat32, torch::kFloat32, 1, 4}, Case{torch::kFloat32, torch::kFloat32, 3, 7},
                      Case{torch::kFloat32, torch::kBFloat16, 1, 6}, Case{torch::kFloat32, torch::kBFloat16, 3, 64},
                      Case{torch::kFloat64, torch::kFloat64, 1, 1}, Case{torch::kFloat64, torch::kFloat64, 3, 10},
                      Case{torch::kFloat64, torch::kFloat64, 2, 23}));

}  // namespace
}  // namespace tinkerd::engine
