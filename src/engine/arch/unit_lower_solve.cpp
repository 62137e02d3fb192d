// unit_lower_solve (see unit_lower_solve.h). For X = L^-1 R with L = I + tril(M, -1), a gradient G of X gives
// dR = L^-T G and dM = -tril(dR X^T, -1): one transposed solve and one batched matmul.
#include "engine/arch/unit_lower_solve.h"

#include "engine/host_access.h"
#include "engine/kernels/triangular_solve.h"

namespace tinkerd::engine {
namespace {

using torch::autograd::AutogradContext;
using torch::autograd::tensor_list;

// The kernels take CPU fp32 / fp64 tensors; M and R must agree in dtype.
bool kernel_applies(const torch::Tensor & M, const torch::Tensor & R) {
    const auto dtype = R.scalar_type();
    return M.device().is_cpu() && R.device().is_cpu() && M.scalar_type() == dtype &&
           (dtype == torch::kFloat || dtype == torch::kDouble);
}

// R's values solved in place of a contiguous copy: L^-1 R, or L^-T R when transposed. L contiguous.
torch::Tensor solved_copy(const torch::Tensor & L, const torch::Tensor & R, bool transposed) {
    torch::Tensor X = R.contiguous().clone();  // [..., n, w]
    const int64_t n = R.size(-2), w = R.size(-1), batch = n * w == 0 ? 0 : X.numel() / (n * w);
    const char * who = "unit_lower_solve";
    AT_DISPATCH_FLOATING_TYPES(X.scalar_type(), "unit_lower_solve", [&] {
        const scalar_t * l = host_data<const scalar_t>(L, who);
        scalar_t * x = host_data<scalar_t>(X, who);
        if (transposed) {
            kernels::unit_lower_solve_transposed(l, x, batch, n, w);
        } else {
            kernels::unit_lower_solve(l, x, batch, n, w);
        }
    });
    return X;
}

struct UnitLowerSolveFunction : public torch::autograd::Function<UnitLowerSolveFunction> {
    static torch::Tensor forward(AutogradContext * ctx, const torch::Tensor & M, const torch::Tensor & R) {
        const torch::Tensor L = M.contiguous();  // [..., n, n]
        torch::Tensor X = solved_copy(L, R, /*transposed=*/false);
        ctx->save_for_backward({L, X});
        return X;
    }
    static tensor_list backward(AutogradContext * ctx, tensor_list grads) {
        const auto saved = ctx->get_saved_variables();
        const torch::Tensor dR = solved_copy(saved[0], grads[0], /*transposed=*/true);  // [..., n, w]
        const torch::Tensor dM = -dR.matmul(saved[1].transpose(-1, -2)).tril(-1);       // [..., n, n]
        return {dM, dR};
    }
};

}  // namespace

torch::Tensor unit_lower_solve(const torch::Tensor & M, const torch::Tensor & R) {
    TORCH_CHECK(M.dim() >= 2 && M.dim() == R.dim() && M.size(-1) == M.size(-2) && R.size(-2) == M.size(-1) &&
                    M.sizes().slice(0, M.dim() - 2) == R.sizes().slice(0, R.dim() - 2),
                "unit_lower_solve: M ", M.sizes(), " and R ", R.sizes(), " are not [..., n, n] and [..., n, w]");
    if (!kernel_applies(M, R)) {
        return torch::linalg_solve_triangular(M, R, /*upper=*/false, /*left=*/true, /*unitriangular=*/true);
    }
    return UnitLowerSolveFunction::apply(M, R);
}

}  // namespace tinkerd::engine
