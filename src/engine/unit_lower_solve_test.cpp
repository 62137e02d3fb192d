// unit_lower_solve (arch/unit_lower_solve.h, the chunked delta rule's within-chunk solve) against torch's
// linalg_solve_triangular: values and autograd gradients in fp64 and fp32, the chunk's 64 x 64 shape and odd ones,
// and that only M's strictly lower triangle is read.
#include "engine/arch/unit_lower_solve.h"

#include <cstdio>

#include <gtest/gtest.h>

namespace tinkerd::testing {
namespace {

double max_abs(const torch::Tensor & x) {
    return x.abs().max().item<double>();
}

// max |got - want| over max |want| (over 1 when want is all zero: a 1 x 1 system has no M to differentiate).
double relative_error(const torch::Tensor & got, const torch::Tensor & want) {
    const double scale = max_abs(want);
    return max_abs(got.to(torch::kFloat64) - want) / (scale > 0.0 ? scale : 1.0);
}

// torch's solve of the same system, with M's diagonal and upper triangle ignored as unit_lower_solve does.
torch::Tensor torch_solve(const torch::Tensor & M, const torch::Tensor & R) {
    return torch::linalg_solve_triangular(M, R, /*upper=*/false, /*left=*/true, /*unitriangular=*/true);
}

struct Solved {
    torch::Tensor x, dM, dR;  // X and the gradients of sum(X * W)
};

template <typename SolveFn>
Solved solve_with_gradients(SolveFn solve, const torch::Tensor & M0, const torch::Tensor & R0,
                            const torch::Tensor & W) {
    torch::Tensor M = M0.clone().requires_grad_(true), R = R0.clone().requires_grad_(true);
    const torch::Tensor X = solve(M, R);
    (X * W).sum().backward();
    return {X.detach(), M.grad(), R.grad()};
}

// Leading dims {2, 3}, n x n systems with w columns; M's entries as the rule's (|M_ij| <= ~1, here 0.3 N(0, 1)).
void expect_matches_torch(int64_t n, int64_t w, torch::ScalarType dtype, double tolerance) {
    torch::manual_seed(n * 1000 + w);
    const auto f64 = torch::TensorOptions().dtype(torch::kFloat64);
    const torch::Tensor M = 0.3 * torch::randn({2, 3, n, n}, f64), R = torch::randn({2, 3, n, w}, f64);
    const torch::Tensor W = torch::randn({2, 3, n, w}, f64);
    const Solved want = solve_with_gradients(torch_solve, M, R, W);
    const Solved got = solve_with_gradients(engine::unit_lower_solve, M.to(dtype), R.to(dtype), W.to(dtype));
    ASSERT_EQ(got.x.scalar_type(), dtype);
    const double ex = relative_error(got.x, want.x), eM = relative_error(got.dM, want.dM);
    const double eR = relative_error(got.dR, want.dR);
    std::printf("n %lld w %lld %s: X %.3g, dM %.3g, dR %.3g (relative to the largest entry)\n",
                static_cast<long long>(n), static_cast<long long>(w), c10::toString(dtype), ex, eM, eR);
    EXPECT_LT(ex, tolerance);
    EXPECT_LT(eM, tolerance);
    EXPECT_LT(eR, tolerance);
    EXPECT_EQ(max_abs(got.dM.triu()), 0.0) << "the diagonal and upper triangle get no gradient";
}

// fp64: substitution and trsm differ only in summation order (~n roundings of 1e-16 each, amplified by the
// system's growth): 1e-10. fp32 against fp64 torch: the same with 6e-8 roundings: 1e-4.
TEST(UnitLowerSolve, MatchesTorchInValuesAndGradients) {
    for (auto [n, w] : {std::pair<int64_t, int64_t>{64, 256}, {64, 37}, {5, 3}, {1, 4}}) {
        expect_matches_torch(n, w, torch::kFloat64, 1e-10);
        expect_matches_torch(n, w, torch::kFloat32, 1e-4);
    }
}

TEST(UnitLowerSolve, ReadsOnlyTheStrictlyLowerTriangle) {
    torch::manual_seed(3);
    const torch::Tensor M = 0.3 * torch::randn({4, 16, 16}, torch::kFloat64),
                        R = torch::randn({4, 16, 8}, torch::kFloat64);
    const torch::Tensor noisy = M.tril(-1) + 7.0 * torch::randn({4, 16, 16}, torch::kFloat64).triu();
    EXPECT_TRUE(torch::equal(engine::unit_lower_solve(M.tril(-1), R), engine::unit_lower_solve(noisy, R)));
    const torch::Tensor unit = M.tril(-1) + torch::eye(16, torch::kFloat64);
    EXPECT_LT(max_abs(unit.matmul(engine::unit_lower_solve(M, R)) - R), 1e-10) << "(I + M) X = R";
}

TEST(UnitLowerSolve, RefusesMismatchedShapes) {
    EXPECT_THROW(engine::unit_lower_solve(torch::zeros({2, 4, 4}), torch::zeros({2, 5, 3})), c10::Error);
    EXPECT_THROW(engine::unit_lower_solve(torch::zeros({2, 4, 4}), torch::zeros({3, 4, 3})), c10::Error);
    EXPECT_THROW(engine::unit_lower_solve(torch::zeros({4, 5}), torch::zeros({4, 3})), c10::Error);
}

}  // namespace
}  // namespace tinkerd::testing
