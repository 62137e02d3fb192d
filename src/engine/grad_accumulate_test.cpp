// The CPU gradient accumulation against torch ops: sums bit for bit as add_, Σ g² as the float64 sum of the
// result (the same at one and two threads), a gradient consumed by optim_step overwritten and read as zero,
// a non-finite gradient refused with nothing changed, and the recorded Σ g² dropped after any other write.
#include "engine/grad_accumulate.h"

#include <cmath>
#include <limits>

#include <ATen/Parallel.h>
#include <gtest/gtest.h>
#include <torch/torch.h>

#include "engine/optimizer.h"

namespace tinkerd::engine {
namespace {

// rank 16 on every target of 2 layers: ~170k parameters, several accumulation blocks
Adapter test_adapter(torch::ScalarType dtype) {
    model::ModelConfig c;
    c.vocab_size = 1000;
    c.hidden_size = 256;
    c.intermediate_size = 512;
    c.n_layers = 2;
    c.n_heads = 4;
    c.n_kv_heads = 2;
    c.head_dim = 64;
    LoraSpec spec;
    spec.rank = 16;
    spec.alpha = 32.0;
    return make_adapter(1, spec, c, dtype, torch::kCPU, 7);
}

std::vector<torch::Tensor> random_gradients(const Adapter & a, double scale) {
    std::vector<torch::Tensor> out;
    for (const torch::Tensor & g : a.grads) {
        out.push_back(torch::randn(g.sizes(), g.options()) * scale);
    }
    return out;
}

torch::Tensor cat_flat(const std::vector<torch::Tensor> & ts) {
    std::vector<torch::Tensor> flat;
    for (const torch::Tensor & t : ts) {
        flat.push_back(t.reshape({-1}));
    }
    return torch::cat(flat);
}

double squares_of(const torch::Tensor & t) {
    return t.to(torch::kFloat64).square().sum().item<double>();
}

TEST(GradientAccumulation, AddsAsTorchAndRecordsTheSquares) {
    for (auto dtype : {torch::kFloat32, torch::kFloat64}) {
        torch::NoGradGuard no_grad;
        torch::manual_seed(1);
        Adapter a = test_adapter(dtype);
        ASSERT_GT(a.flat_grads.numel(), 2 << 16);
        const auto g1 = random_gradients(a, 1.0), g2 = random_gradients(a, 3.0);
        auto g3 = random_gradients(a, 2.0);
        ASSERT_TRUE(accumulate_gradients(a, g1, 0));
        ASSERT_TRUE(accumulate_gradients(a, g2, 0));
        const torch::Tensor kept = g3[1].clone();
        g3[1] = torch::Tensor();  // no new gradient: the accumulated one stays and counts in Σ g²
        ASSERT_TRUE(accumulate_gradients(a, g3, 0));
        g3[1] = torch::zeros_like(kept);
        const torch::Tensor expected = cat_flat(g1) + cat_flat(g2) + cat_flat(g3);  // the flat buffer's layout
        EXPECT_TRUE(torch::equal(a.flat_grads, expected));
        const auto recorded = recorded_gradient_squares(a);
        ASSERT_TRUE(recorded.has_value());
        EXPECT_NEAR(*recorded, squares_of(expected), 1e-12 * squares_of(expected));
        auto norm = gradient_norm(a, 0.0);
        ASSERT_TRUE(norm.ok());
        EXPECT_EQ(norm->norm, std::sqrt(*recorded));
    }
}

TEST(GradientAccumulation, TheSquaresDoNotDependOnTheThreadCount) {
    torch::NoGradGuard no_grad;
    torch::manual_seed(2);
    const int threads = at::get_num_threads();
    std::vector<double> sums;
    for (int n : {1, 2, 3}) {
        at::set_num_threads(n);
        torch::manual_seed(2);
        Adapter a = test_adapter(torch::kFloat32);
        ASSERT_TRUE(accumulate_gradients(a, random_gradients(a, 1.0), 0));
        sums.push_back(recorded_gradient_squares(a).value());
    }
    at::set_num_threads(threads);
    EXPECT_EQ(sums[0], sums[1]);
    EXPECT_EQ(sums[0], sums[2]);
}

// optim_step leaves the gradient consumed: not rewritten, yet the next accumulation writes over it (a parameter
// without a new gradient reads zero) and every other reader sees zeros after settle_gradient.
TEST(GradientAccumulation, AConsumedGradientIsOverwritten) {
    torch::NoGradGuard no_grad;
    torch::manual_seed(3);
    Adapter a = test_adapter(torch::kFloat32);
    torch::Tensor scratch;
    ASSERT_TRUE(accumulate_gradients(a, random_gradients(a, 1.0), 0));
    ASSERT_TRUE(adamw_step(a, {}, scratch).ok());
    ASSERT_TRUE(gradient_is_consumed(a));
    EXPECT_GT(a.flat_grads.abs().sum().item<double>(), 0.0);  // the consumed values are still in memory
    auto g = random_gradients(a, 2.0);
    g[3] = torch::Tensor();  // no gradient for one parameter this time
    ASSERT_TRUE(accumulate_gradients(a, g, 0));
    EXPECT_FALSE(gradient_is_consumed(a));
    for (size_t j = 0; j < g.size(); ++j) {
        EXPECT_TRUE(torch::equal(a.grads[j], g[j].defined() ? g[j] : torch::zeros_like(a.grads[j]))) << a.names[j];
    }
    EXPECT_NEAR(recorded_gradient_squares(a).value(), squares_of(a.flat_grads), 1e-12 * squares_of(a.flat_grads));

    ASSERT_TRUE(adamw_step(a, {}, scratch).ok());
    settle_gradient(a);  // what the test hooks, Dimuon and the data-parallel all-reduce do before reading
    EXPECT_FALSE(gradient_is_consumed(a));
    EXPECT_EQ(a.flat_grads.abs().sum().item<double>(), 0.0);
}

TEST(GradientAccumulation, ANonFiniteGradientChangesNothing) {
    for (float bad : {std::numeric_limits<float>::quiet_NaN(), std::numeric_limits<float>::infinity()}) {
        torch::NoGradGuard no_grad;
        torch::manual_seed(4);
        Adapter a = test_adapter(torch::kFloat32);
        torch::Tensor scratch;
        ASSERT_TRUE(accumulate_gradients(a, random_gradients(a, 1.0), 0));
        ASSERT_TRUE(adamw_step(a, {}, scratch).ok());
        const torch::Tensor before = a.flat_grads.clone();
        auto g = random_gradients(a, 1.0);
        g.back().view({-1})[5] = bad;  // in the last parameter: every block before it was checked first
        EXPECT_FALSE(accumulate_gradients(a, g, 0));
        EXPECT_TRUE(torch::equal(a.flat_grads, before));
        EXPECT_TRUE(gradient_is_consumed(a));  // still reads as zero
    }
}

TEST(GradientAccumulation, AnotherWriteDropsTheRecordedSquares) {
    torch::NoGradGuard no_grad;
    torch::manual_seed(5);
    Adapter a = test_adapter(torch::kFloat32);
    ASSERT_TRUE(accumulate_gradients(a, random_gradients(a, 1.0), 0));
    ASSERT_TRUE(recorded_gradient_squares(a).has_value());
    a.grads[2].mul_(2);  // through a view, as an all-reduce or a test hook would
    EXPECT_FALSE(recorded_gradient_squares(a).has_value());
    EXPECT_NEAR(gradient_norm(a, 0.0)->norm, std::sqrt(squares_of(a.flat_grads)),
                1e-5 * std::sqrt(squares_of(a.flat_grads)));

    ASSERT_TRUE(accumulate_gradients(a, random_gradients(a, 1.0), 0));
    note_raw_gradient_write(a);  // a write through a raw pointer
    EXPECT_FALSE(recorded_gradient_squares(a).has_value());

    torch::Tensor scratch;  // a torch write after a step ends the consumed state: the written values count
    ASSERT_TRUE(adamw_step(a, {}, scratch).ok());
    const torch::Tensor written = torch::randn(a.flat_grads.sizes(), a.flat_grads.options());
    a.flat_grads.copy_(written);
    EXPECT_FALSE(gradient_is_consumed(a));
    settle_gradient(a);
    EXPECT_TRUE(torch::equal(a.flat_grads, written));
}

TEST(GradientAccumulation, NonContiguousGradientsGoThroughTorch) {
    torch::NoGradGuard no_grad;
    torch::manual_seed(6);
    Adapter a = test_adapter(torch::kFloat32);
    auto g = random_gradients(a, 1.0);
    g[0] = g[0].t().contiguous().t();  // the same values, transposed strides
    ASSERT_FALSE(g[0].is_contiguous());
    ASSERT_TRUE(accumulate_gradients(a, g, 0));
    EXPECT_TRUE(torch::equal(a.flat_grads, cat_flat(g)));
    EXPECT_FALSE(recorded_gradient_squares(a).has_value());
}

}  // namespace
}  // namespace tinkerd::engine
