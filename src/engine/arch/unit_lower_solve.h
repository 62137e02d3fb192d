// The chunked gated delta rule's within-chunk solve as a differentiable tensor function: X = (I + M)^-1 R for
// batches of strictly lower-triangular M. CPU fp32 / fp64 runs kernels/triangular_solve.h's substitutions (and
// their transpose in the backward); other devices and dtypes torch::linalg_solve_triangular.
#pragma once

#include <torch/torch.h>

namespace tinkerd::engine {

// M [..., n, n] (only its strictly lower triangle is read: the diagonal is taken as 1), R [..., n, w] with the
// same leading dims -> X [..., n, w] with (I + tril(M, -1)) X = R. Differentiable by autograd in M's strictly
// lower triangle (the gradient is zero elsewhere) and in R.
torch::Tensor unit_lower_solve(const torch::Tensor & M, const torch::Tensor & R);

}  // namespace tinkerd::engine
