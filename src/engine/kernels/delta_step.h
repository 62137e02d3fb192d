// The gated delta rule's one-token recurrent step as one fused pass per head over the fp32 state (Qwen3.5's
// linear-attention decode), torch-free on raw pointers: the state is read once and written once, instead of
// the half-dozen full passes (scale, matvec, outer-product add, copy, matvec) of the tensor-op form.
#pragma once

#include <cstdint>

namespace tinkerd::engine::kernels {

// One sequence's pointers for delta_step: qn, kn [H, Dk] (l2-normalised; qn also scaled by 1/sqrt(Dk)),
// v [H, Dv], decay = exp(g) and beta [H], state [H, Dk, Dv] (updated in place), out [H, Dv].
struct DeltaStepRow {
    const float * qn;
    const float * kn;
    const float * v;
    const float * decay;
    const float * beta;
    float * state;
    float * out;
};

// For each head h of each row: S ← decay_h·S; δ = (v − knᵀS)·beta_h; S ← S + kn·δᵀ; out = qnᵀS. Heads run in
// parallel (at::parallel_for); per-head sums run over Dk in order, so results do not depend on the thread count.
// Uses the AVX-512 / AVX2 build of the loops as matmul.h's kernel_isa() allows (same formulas, FMA-contracted).
void delta_step(const DeltaStepRow * rows, int64_t n_rows, int64_t H, int64_t Dk, int64_t Dv);

// One sequence's pointers for delta_mix_step, the mixer's whole decode step after the conv: raw q, k [HK, Dk]
// and v [HV, Dv] (the conv output's slices), a, b [HV] (in_proj_a / in_proj_b outputs), z [HV, Dv] (in_proj_z),
// the state [HV, Dk, Dv] (updated in place) and out [HV, Dv].
struct DeltaMixRow {
    const float * q;
    const float * k;
    const float * v;
    const float * a;
    const float * b;
    const float * z;
    float * state;
    float * out;
};

// The layer's own weights: A_log, dt_bias [HV], the gated norm's weight [Dv] and its eps.
struct DeltaMixWeights {
    const float * A_log;
    const float * dt_bias;
    const float * norm;
    float eps;
};

// Per V head h (K head h / (HV / HK)): q, k l2-normalised (eps 1e-6 under the root), q scaled by 1/sqrt(Dk);
// beta = sigmoid(b_h), decay = exp(-exp(A_log_h)·softplus(a_h + dt_bias_h)); delta_step's update; then
// out = norm·rmsnorm(out)·silu(z): Qwen3_5GatedDeltaNet's decode step as the tensor ops compute it, in fp32.
void delta_mix_step(const DeltaMixRow * rows, int64_t n_rows, int64_t HK, int64_t HV, int64_t Dk, int64_t Dv,
                    const DeltaMixWeights & w);

}  // namespace tinkerd::engine::kernels
