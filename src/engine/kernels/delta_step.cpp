// delta_step.h's fused recurrent step (and the mixer's whole decode step around it): one loop body compiled three
// times, for AVX-512, AVX2+FMA and the baseline ISA, chosen at run time by matmul.h's kernel_isa(). Per head the state
// [Dk, Dv] (64 KiB at Qwen3.5's 128 x 128) is read from memory once and written once; its second pass runs from L2.
#include "engine/kernels/delta_step.h"

#include <cmath>
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

// dst[i] = x[i] / sqrt(Σx² + 1e-6) · scale for i < n (transformers' l2norm, then the query's scale).
__attribute__((always_inline)) inline void l2_normalised(const float * x, float scale, float * dst, int64_t n) {
    float sum = 0.0f;
    for (int64_t i = 0; i < n; ++i) {
        sum += x[i] * x[i];
    }
    const float inv = 1.0f / std::sqrt(sum + 1e-6f);
    for (int64_t i = 0; i < n; ++i) {
        dst[i] = x[i] * inv * scale;
    }
}

// out[j] = norm[j] · (o[j] / sqrt(mean(o²) + eps)) · silu(z[j]): Qwen3_5RMSNormGated on one head.
__attribute__((always_inline)) inline void gated_norm(const float * o, const float * z, const float * norm, float eps,
                                                      float * out, int64_t n) {
    float sum = 0.0f;
    for (int64_t j = 0; j < n; ++j) {
        sum += o[j] * o[j];
    }
    const float inv = 1.0f / std::sqrt(sum / static_cast<float>(n) + eps);
    for (int64_t j = 0; j < n; ++j) {
        out[j] = norm[j] * (o[j] * inv) * (z[j] / (1.0f + std::exp(-z[j])));
    }
}

float softplus(float x) {  // torch's threshold: x above 20 is returned as is
    return x > 20.0f ? x : std::log1p(std::exp(x));
}

// One (row, V head) of delta_mix_step; scratch [2·Dk + 2·Dv].
__attribute__((always_inline)) inline void mix_head(const DeltaMixRow & r, const DeltaMixWeights & w, int64_t h,
                                                    int64_t HK, int64_t HV, int64_t Dk, int64_t Dv, float * scratch) {
    float *qn = scratch, *kn = scratch + Dk, *o = scratch + 2 * Dk, *delta = o + Dv;
    const int64_t kh = h / (HV / HK);
    l2_normalised(r.q + kh * Dk, 1.0f / std::sqrt(static_cast<float>(Dk)), qn, Dk);
    l2_normalised(r.k + kh * Dk, 1.0f, kn, Dk);
    const float beta = 1.0f / (1.0f + std::exp(-r.b[h]));
    const float decay = std::exp(-std::exp(w.A_log[h]) * softplus(r.a[h] + w.dt_bias[h]));
    head_step(qn, kn, r.v + h * Dv, decay, beta, r.state + h * Dk * Dv, o, delta, Dk, Dv);
    gated_norm(o, r.z + h * Dv, w.norm, w.eps, r.out + h * Dv, Dv);
}

using HeadsFn = void (*)(const DeltaStepRow *, int64_t, int64_t, int64_t, int64_t, int64_t, float *);
using MixFn = void (*)(const DeltaMixRow *, const DeltaMixWeights &, int64_t, int64_t, int64_t, int64_t, int64_t,
                       int64_t, float *);

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

// (row, V head) pairs [f0, f1) of delta_mix_step; scratch [2·Dk + 2·Dv].
#define TINKERD_DELTA_MIX(NAME, TARGET)                                                                       \
    TARGET void NAME(const DeltaMixRow * rows, const DeltaMixWeights & w, int64_t HK, int64_t HV, int64_t Dk, \
                     int64_t Dv, int64_t f0, int64_t f1, float * scratch) {                                   \
        for (int64_t f = f0; f < f1; ++f) {                                                                   \
            mix_head(rows[f / HV], w, f % HV, HK, HV, Dk, Dv, scratch);                                       \
        }                                                                                                     \
    }

TINKERD_DELTA_MIX(mix_avx512, __attribute__((target("avx512f,avx512vl,avx2,fma"))))
TINKERD_DELTA_MIX(mix_avx2, __attribute__((target("avx2,fma"))))
TINKERD_DELTA_MIX(mix_generic, )

}  // namespace

void delta_mix_step(const DeltaMixRow * rows, int64_t n_rows, int64_t HK, int64_t HV, int64_t Dk, int64_t Dv,
                    const DeltaMixWeights & w) {
    const MixFn mix = for_isa<MixFn>(mix_avx512, mix_avx2, mix_generic);
    at::parallel_for(0, n_rows * HV, 1, [&](int64_t f0, int64_t f1) {
        std::vector<float> scratch(static_cast<size_t>(2 * Dk + 2 * Dv));
        mix(rows, w, HK, HV, Dk, Dv, f0, f1, scratch.data());
    });
}

void delta_step(const DeltaStepRow * rows, int64_t n_rows, int64_t H, int64_t Dk, int64_t Dv) {
    const HeadsFn heads = for_isa<HeadsFn>(heads_avx512, heads_avx2, heads_generic);
    at::parallel_for(0, n_rows * H, 1, [&](int64_t h0, int64_t h1) {
        std::vector<float> scratch(static_cast<size_t>(Dv));
        heads(rows, H, Dk, Dv, h0, h1, scratch.data());
    });
}

}  // namespace tinkerd::engine::kernels
