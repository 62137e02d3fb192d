// The chunked delta rule's within-chunk solves on raw pointers: batches of small unit lower-triangular systems
// (64 x 64 with a few hundred right-hand columns) by forward and back substitution, in place. torch's batched
// linalg_solve_triangular calls LAPACK's trsm once per system, whose speed depends on MKL's CPU check (on AMD in
// plain Python: ~28x a matmul of the same shape); these loops do not.
#pragma once

#include <cstdint>

namespace tinkerd::engine::kernels {

// R[b] <- L[b]^-1 R[b] for b < batch. L [batch, n, n] row-major with a unit diagonal implied: only its strictly
// lower triangle is read. R [batch, n, w] row-major, overwritten. Systems run in parallel (at::parallel_for);
// row i's sum runs over j = 0..i-1 in order, so results do not depend on the thread count. T: float or double.
template <typename T>
void unit_lower_solve(const T * L, T * R, int64_t batch, int64_t n, int64_t w);

// R[b] <- L[b]^-T R[b] (back substitution on L's transpose, the backward of unit_lower_solve); the same reads of L,
// row i's sum over j = n-1..i+1 in order.
template <typename T>
void unit_lower_solve_transposed(const T * L, T * R, int64_t batch, int64_t n, int64_t w);

}  // namespace tinkerd::engine::kernels
