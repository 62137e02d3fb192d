// delta_step.h's fused recurrent step: one loop body (head_step) compiled three times, for AVX-512, AVX2+FMA
// and the baseline ISA, chosen at run time by matmul.h's kernel_isa(). Per head the state [Dk, Dv] (64 KiB at
// Qwen3.5's 128 x 128) is read from memory once and written once; its second pass runs from L2.
#include "engine/kernels/delta_step.h"

#include <vector>

#include <ATen/Parallel.h>

#include "engine/kernels/matmul.h"

namespace tinkerd::engine::kernels {
namespace {

// One head: S [Dk, Dv] row-major, scratch [Dv]. Pass 1 scales S and sums knᵀS into scratch; pass 2 adds kn·δᵀ
// and sums qnᵀS into out. Every inner loop runs along Dv (independent lanes, vectorised by the compiler).
template <int Unused = 0>
__attribute__((always_inline)) inline void head_step(const float * qn, const float * kn, const float * v, float decay,
                                                     float beta, float * S, float * out, float * delta, int64_t Dk,
                                                     int64_t Dv) {
    for (int64_t j = 0; j < Dv; ++j) {
        delta[j] = 0.0f;
        out[j] = 0.0f;
    }
    for (int64_t i = 0; i < Dk; ++i) {
        float * row = S + i * Dv;
        const float ki = kn[i];
        for (int64_t j = 0; j < Dv; ++j) {
            row[j] *= decay;
            delta[j] += ki * row[j];  // recalled value knᵀS
        }
    }
    for (int64_t j = 0; j < Dv; ++j) {
        delta[j] = (v[j] - delta[j]) * beta;
    }
    for (int64_t i = 0; i < Dk; ++i) {
        float * row = S + i * Dv;
        const float ki = kn[i], qi = qn[i];
        for (int64_t j = 0; j < Dv; ++j) {
            row[j] += ki * delta[j];
            out[j] += qi * row[j];
        }
    }
}

using HeadsFn = void (*)(const DeltaStepRow *, int64_t, int64_t, int64_t, int64_t, int64_t, float *);

// Heads [h0, h1) of the flattened (row, head) range; scratch [Dv].
#define TINKERD_DELTA_HEADS(NAME, TARGET)                                                                       \
    TARGET void NAME(const DeltaStepRow * rows, int64_t H, int64_t Dk, int64_t Dv, int64_t h0, int64_t h1,      \
                     float * scratch) {                                                                         \
        for (int64_t f = h0; f < h1; ++f) {                                                                     \
            const DeltaStepRow & r = rows[f / H];                                                               \
            const int64_t h = f % H;                                                                            \
            head_step(r.qn + h * Dk, r.kn + h * Dk, r.v + h * Dv, r.decay[h], r.beta[h], r.state + h * Dk * Dv, \
                      r.out + h * Dv, scratch, Dk, Dv);                                                         \
        }                                                                                                       \
    }

TINKERD_DELTA_HEADS(heads_avx512, __attribute__((target("avx512f,avx512vl,avx2,fma"))))
TINKERD_DELTA_HEADS(heads_avx2, __attribute__((target("avx2,fma"))))
TINKERD_DELTA_HEADS(heads_generic, )

HeadsFn heads_for(KernelIsa isa) {
    switch (isa) {
        case KernelIsa::avx512:
            return heads_avx512;
        case KernelIsa::avx2:
            return heads_avx2;
        default:
            return heads_generic;
    }
}

}  // namespace

void delta_step(const DeltaStepRow * rows, int64_t n_rows, int64_t H, int64_t Dk, int64_t Dv) {
    const HeadsFn heads = heads_for(kernel_isa());
    at::parallel_for(0, n_rows * H, 1, [&](int64_t h0, int64_t h1) {
        std::vector<float> scratch(static_cast<size_t>(Dv));
        heads(rows, H, Dk, Dv, h0, h1, scratch.data());
    });
}

}  // namespace tinkerd::engine::kernels
