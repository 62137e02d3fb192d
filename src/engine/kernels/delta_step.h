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

}  // namespace tinkerd::engine::kernels
