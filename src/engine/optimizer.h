// AdamW over one adapter's LoRA parameters, the math of torch.optim.AdamW (1.13 single-tensor path)
// preceded by global grad-norm clipping as torch.nn.utils.clip_grad_norm_, as one fused pass over the
// adapter's flat buffers (lora.h).
#pragma once

#include "engine/adam_params.h"
#include "engine/engine.h"
#include "engine/lora.h"

namespace tinkerd::engine {

// Clips a.grads, applies one AdamW step to a.params, then zeroes a.grads (all through the flat buffers; on the
// CPU lazily: Adapter::consumed_version).
// Returns the global gradient L2 norm before clipping. A step whose gradient, new weights or new moments
// are not finite is refused (INVALID_ARGUMENT) and changes nothing: weights, moments, step and gradient
// stay as they were. On the CPU a checking pass (skipped when a.step_bounds prove the step finite) precedes
// the writing one, so nothing is copied; on other devices `scratch` ([3N], grown on demand, reusable across
// adapters) keeps the old values.
Result<double> adamw_step(Adapter & a, const AdamParams & params, torch::Tensor & scratch);

// Shared by both optimizers: the global L2 norm of a's gradient (a non-finite one is INVALID_ARGUMENT, nothing
// changed) and clip_grad_norm_'s coefficient min(1, max_norm / (norm + 1e-6)) (1 when max_norm is 0).
struct GradientNorm {
    double norm = 0;
    double clip = 1;
};
Result<GradientNorm> gradient_norm(const Adapter & a, double grad_clip_norm);
// `scratch` grown to [3N] in a's dtype and device (reused across steps and adapters); returns it.
torch::Tensor & step_scratch(torch::Tensor & scratch, const Adapter & a);

// One Dimuon step (dimuon.cpp; docs/sdk-0.38.md states the algorithm and its constants): per LoRA matrix
// (each expert's slice of a 3-D factor on its own), momentum M = beta1·M + (1 − beta1)·g in the exp_avg
// buffer, a damped row / column equilibration of M, its matrix sign by Newton–Schulz, scaled to Frobenius
// norm sqrt(rank), and W −= lr · (rank / 32)^exponent · that. Clipping, the finiteness refusal, the zeroed
// gradient and the step count as adamw_step; exp_avg_sq is not used.
Result<double> dimuon_step(Adapter & a, const AdamParams & params, torch::Tensor & scratch);

}  // namespace tinkerd::engine
