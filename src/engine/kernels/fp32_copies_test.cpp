// fp32 weight copies: off by default; with a budget, many-row exact products take the copy (made once, dropped
// with its weight) and still match a float64 reference; few-row products and weights beyond the budget do not.
#include "engine/kernels/fp32_copies.h"

#include <gtest/gtest.h>

#include "engine/kernels/matmul.h"

namespace tinkerd::engine::kernels {
namespace {

struct Fp32CopiesTest : ::testing::Test {
    void SetUp() override {
        set_fp32_copy_budget(0);
        set_matmul_inputs(MatmulInputs::fp32);
        if (kernel_isa() == KernelIsa::generic) {
            GTEST_SKIP() << "TINKERD_MATMUL_KERNELS=generic: products take torch's ops, which copies do not replace";
        }
    }
    void TearDown() override { set_fp32_copy_budget(0); }
};

torch::Tensor bf16_weight(int64_t out, int64_t in, int64_t seed) {
    torch::manual_seed(seed);
    return (torch::randn({out, in}) * 0.1).to(torch::kBFloat16);  // [out, in]
}

// |y - y64| <= in · eps32 · (|x| · |w|ᵀ): each fp32 sum of `in` products, any order (the standard bound).
void expect_near_reference(const torch::Tensor & y, const torch::Tensor & a, const torch::Tensor & b) {
    const torch::Tensor exact = torch::mm(a.to(torch::kDouble), b.to(torch::kDouble));
    const torch::Tensor scale = torch::mm(a.abs().to(torch::kDouble), b.abs().to(torch::kDouble));
    const double eps = std::numeric_limits<float>::epsilon() * static_cast<double>(a.size(1));
    EXPECT_TRUE(((y.to(torch::kDouble) - exact).abs() <= scale * eps + 1e-30).all().item<bool>());
}

TEST_F(Fp32CopiesTest, OffByDefault) {
    const torch::Tensor w = bf16_weight(96, 64, 1);
    EXPECT_EQ(fp32_copy_budget(), 0);
    EXPECT_FALSE(fp32_copy_of(w).defined());
    (void)matmul_weight(torch::randn({blas_min_rows(), 64}), w);
    EXPECT_EQ(fp32_copy_bytes(), 0);
}

TEST_F(Fp32CopiesTest, ManyRowProductsUseOneCopyAndMatchTheReference) {
    set_fp32_copy_budget(int64_t{1} << 30);
    const torch::Tensor w = bf16_weight(96, 64, 2);
    const torch::Tensor x = torch::randn({blas_min_rows() + 3, 64}), dy = torch::randn({blas_min_rows() + 3, 96});
    const torch::Tensor y = matmul_weight(x, w);  // [T, 96]
    EXPECT_EQ(fp32_copy_bytes(), 96 * 64 * 4);
    const torch::Tensor dx = matmul_weight_backward(dy, w);  // [T, 64]: the same copy
    EXPECT_EQ(fp32_copy_bytes(), 96 * 64 * 4);
    EXPECT_TRUE(torch::equal(fp32_copy_of(w), w.to(torch::kFloat)));
    const torch::Tensor wf = w.to(torch::kFloat);
    expect_near_reference(y, x, wf.t());
    expect_near_reference(dx, dy, wf);
}

TEST_F(Fp32CopiesTest, FewRowProductsKeepReadingBf16) {
    set_fp32_copy_budget(int64_t{1} << 30);
    const torch::Tensor w = bf16_weight(96, 64, 3);
    (void)matmul_weight(torch::randn({blas_min_rows() - 1, 64}), w);
    (void)matmul_weight_backward(torch::randn({1, 96}), w);
    EXPECT_EQ(fp32_copy_bytes(), 0);
}

TEST_F(Fp32CopiesTest, ACopyGoesWithItsWeight) {
    set_fp32_copy_budget(int64_t{1} << 30);
    {
        const torch::Tensor w = bf16_weight(96, 64, 4);
        ASSERT_TRUE(fp32_copy_of(w).defined());
        EXPECT_EQ(fp32_copy_bytes(), 96 * 64 * 4);
    }
    EXPECT_EQ(fp32_copy_bytes(), 0);  // the weight's storage was freed
}

TEST_F(Fp32CopiesTest, TheBudgetBoundsTheCopiesAndLoweringItDropsThem) {
    set_fp32_copy_budget(96 * 64 * 4);  // room for one
    const torch::Tensor first = bf16_weight(96, 64, 5), second = bf16_weight(96, 64, 6);
    EXPECT_TRUE(fp32_copy_of(first).defined());
    EXPECT_FALSE(fp32_copy_of(second).defined());
    const torch::Tensor x = torch::randn({blas_min_rows(), 64});
    expect_near_reference(matmul_weight(x, second), x, second.to(torch::kFloat).t());  // the blocked path
    EXPECT_EQ(fp32_copy_bytes(), 96 * 64 * 4);
    set_fp32_copy_budget(0);
    EXPECT_EQ(fp32_copy_bytes(), 0);
    EXPECT_FALSE(fp32_copy_of(first).defined());
}

TEST_F(Fp32CopiesTest, RoundedInputsNeverTakeTheCopies) {
    set_fp32_copy_budget(int64_t{1} << 30);
    set_matmul_inputs(MatmulInputs::bf16);
    const torch::Tensor w = bf16_weight(96, 64, 7);
    (void)matmul_weight(torch::randn({blas_min_rows(), 64}), w);
    set_matmul_inputs(MatmulInputs::fp32);
    EXPECT_EQ(fp32_copy_bytes(), 0);
}

}  // namespace
}  // namespace tinkerd::engine::kernels
