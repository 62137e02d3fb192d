// triangular_solve.h's substitutions: one loop body per direction, compiled for AVX-512, AVX2+FMA and the
// baseline ISA and chosen at run time by matmul.h's kernel_isa(), as delta_step.cpp does. Every inner loop runs
// along a row of right-hand columns (contiguous, independent lanes, vectorised by the compiler).
#include "engine/kernels/triangular_solve.h"

#include <ATen/Parallel.h>

#include "engine/kernels/matmul.h"

namespace tinkerd::engine::kernels {
namespace {

// row -= coef * other over w columns.
template <typename T>
__attribute__((always_inline)) inline void subtract_scaled(T * row, const T * other, T coef, int64_t w) {
    for (int64_t c = 0; c < w; ++c) {
        row[c] -= coef * other[c];
    }
}

// One system, forward: X[i] = R[i] - sum_{j<i} L[i, j] X[j], rows in increasing order.
template <typename T>
__attribute__((always_inline)) inline void forward_one(const T * L, T * R, int64_t n, int64_t w) {
    for (int64_t i = 1; i < n; ++i) {
        for (int64_t j = 0; j < i; ++j) {
            subtract_scaled(R + i * w, R + j * w, L[i * n + j], w);
        }
    }
}

// One system, transposed: Y[i] = R[i] - sum_{j>i} L[j, i] Y[j], rows in decreasing order.
template <typename T>
__attribute__((always_inline)) inline void backward_one(const T * L, T * R, int64_t n, int64_t w) {
    for (int64_t i = n - 2; i >= 0; --i) {
        for (int64_t j = n - 1; j > i; --j) {
            subtract_scaled(R + i * w, R + j * w, L[j * n + i], w);
        }
    }
}

// Systems [b0, b1) of one direction.
#define TINKERD_TRI_SOLVE(NAME, TARGET)                                                  \
    template <typename T, bool Transposed>                                               \
    TARGET void NAME(const T * L, T * R, int64_t n, int64_t w, int64_t b0, int64_t b1) { \
        for (int64_t b = b0; b < b1; ++b) {                                              \
            if constexpr (Transposed) {                                                  \
                backward_one(L + b * n * n, R + b * n * w, n, w);                        \
            } else {                                                                     \
                forward_one(L + b * n * n, R + b * n * w, n, w);                         \
            }                                                                            \
        }                                                                                \
    }

TINKERD_TRI_SOLVE(solve_avx512, __attribute__((target("avx512f,avx512vl,avx2,fma"))))
TINKERD_TRI_SOLVE(solve_avx2, __attribute__((target("avx2,fma"))))
TINKERD_TRI_SOLVE(solve_generic, )

template <typename T, bool Transposed>
void solve_batch(const T * L, T * R, int64_t batch, int64_t n, int64_t w) {
    using Fn = void (*)(const T *, T *, int64_t, int64_t, int64_t, int64_t);
    const Fn fn = for_isa<Fn>(solve_avx512<T, Transposed>, solve_avx2<T, Transposed>, solve_generic<T, Transposed>);
    at::parallel_for(0, batch, 1, [&](int64_t b0, int64_t b1) { fn(L, R, n, w, b0, b1); });
}

}  // namespace

template <typename T>
void unit_lower_solve(const T * L, T * R, int64_t batch, int64_t n, int64_t w) {
    solve_batch<T, false>(L, R, batch, n, w);
}

template <typename T>
void unit_lower_solve_transposed(const T * L, T * R, int64_t batch, int64_t n, int64_t w) {
    solve_batch<T, true>(L, R, batch, n, w);
}

template void unit_lower_solve<float>(const float *, float *, int64_t, int64_t, int64_t);
template void unit_lower_solve<double>(const double *, double *, int64_t, int64_t, int64_t);
template void unit_lower_solve_transposed<float>(const float *, float *, int64_t, int64_t, int64_t);
template void unit_lower_solve_transposed<double>(const double *, double *, int64_t, int64_t, int64_t);

}  // namespace tinkerd::engine::kernels
