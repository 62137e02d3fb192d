// Dimuon (SDK 0.38's DimuonOptimizerConfig / DimuonParams) over an adapter's LoRA matrices: momentum, damped
// row / column equilibration, the matrix sign by quintic Newton–Schulz, a step of Frobenius norm
// lr · sqrt(rank) · rank correction per matrix. The documented pieces and tinkerd's constants for what the
// documentation leaves unsaid are in docs/sdk-0.38.md ("Dimuon").
#include <cmath>

#include "engine/grad_accumulate.h"
#include "engine/host_access.h"
#include "engine/optimizer.h"

namespace tinkerd::engine {

namespace {

constexpr int NEWTON_SCHULZ_STEPS = 5;
constexpr double NS_A = 3.4445, NS_B = -4.7750, NS_C = 2.0315;  // the quintic iteration's coefficients
constexpr double NORM_EPS = 1e-7;                               // the "normalization epsilon"
constexpr double RANK_REFERENCE = 32.0;

// x [B, m, n] -> the damped equilibration diag(r + δ·mean r)^(-1/2) · x · diag(c + δ·mean c)^(-1/2), with r and
// c the rows' and columns' mean squares (zero rows and columns stay zero).
torch::Tensor equilibrate(const torch::Tensor & x, double damping) {
    const torch::Tensor sq = x * x;
    const torch::Tensor rows = sq.mean(-1, true);  // [B, m, 1]
    const torch::Tensor cols = sq.mean(-2, true);  // [B, 1, n]
    const torch::Tensor row_scale = (rows + damping * rows.mean(-2, true) + 1e-30).rsqrt();
    const torch::Tensor col_scale = (cols + damping * cols.mean(-1, true) + 1e-30).rsqrt();
    return x * row_scale * col_scale;
}

// The matrix sign (orthogonal polar factor) of each x [B, m, n], approximately, by Newton–Schulz on the
// wide orientation.
torch::Tensor matrix_sign(torch::Tensor x) {
    const bool tall = x.size(-2) > x.size(-1);
    if (tall) {
        x = x.transpose(-2, -1);
    }
    x = x / (x.flatten(1).norm(2, 1).view({-1, 1, 1}) + NORM_EPS);
    for (int i = 0; i < NEWTON_SCHULZ_STEPS; ++i) {
        const torch::Tensor a = torch::matmul(x, x.transpose(-2, -1));  // [B, m, m]
        const torch::Tensor b = NS_B * a + NS_C * torch::matmul(a, a);
        x = NS_A * x + torch::matmul(b, x);
    }
    return tall ? x.transpose(-2, -1) : x;
}

// The update direction of one parameter's momentum m ([R, in], [out, R] or experts' [E, ., .]): each matrix's
// sign scaled to Frobenius norm sqrt(rank) (zero where the momentum is zero).
torch::Tensor direction(const torch::Tensor & m, int64_t rank, double damping) {
    const torch::Tensor x = m.dim() == 2 ? m.unsqueeze(0) : m;  // [B, ., .]
    const torch::Tensor o = matrix_sign(equilibrate(x, damping));
    const torch::Tensor norms = o.flatten(1).norm(2, 1).view({-1, 1, 1});  // [B, 1, 1]
    const torch::Tensor scaled = torch::where(norms > 0, o * (std::sqrt(static_cast<double>(rank)) / norms), o);
    return scaled.view(m.sizes());
}

}  // namespace

Result<double> dimuon_step(Adapter & a, const AdamParams & p, torch::Tensor & scratch) {
    torch::NoGradGuard no_grad;
    settle_gradient(a);
    auto grad = gradient_norm(a, p.grad_clip_norm);
    TRY_STATUS(grad);
    const double clip = grad->clip;
    const int64_t n = a.flat_params.numel();
    step_scratch(scratch, a).narrow(0, 0, n).copy_(a.flat_params);  // kept until the step is known to be finite
    scratch.narrow(0, n, n).copy_(a.flat_exp_avg);
    const double lr =
        p.learning_rate * std::pow(static_cast<double>(a.spec.rank) / RANK_REFERENCE, p.rank_lr_correction_exponent);
    for (size_t i = 0; i < a.params.size(); ++i) {
        a.exp_avg[i].mul_(p.beta1).add_(a.grads[i], (1.0 - p.beta1) * clip);
        a.params[i].sub_(direction(a.exp_avg[i], a.spec.rank, p.damping), lr);
    }
    const torch::Tensor poison = (a.flat_params.sum() + a.flat_exp_avg.sum()).mul(0);
    if (host_value<double>(poison, "dimuon_step finite check") != 0.0) {
        a.flat_params.copy_(scratch.narrow(0, 0, n));
        a.flat_exp_avg.copy_(scratch.narrow(0, n, n));
        return invalid_argument(
            "optim_step refused: this learning rate / these optimizer_params would make LoRA weights or the "
            "Dimuon momentum non-finite; the adapter, its momentum and its gradient are unchanged");
    }
    a.step += 1;
    // Zeroed in place, not released: the next forward_backward writes every page again, and faulting 40 MB of
    // released pages back in cost 250 ms a step on a KVM guest (SmolLM2, rank 32).
    a.flat_grads.zero_();
    return grad->norm;
}

}  // namespace tinkerd::engine
