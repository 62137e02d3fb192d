// AdamW over one adapter's LoRA parameters, the math of torch.optim.AdamW (1.13 single-tensor path)
// preceded by global grad-norm clipping as torch.nn.utils.clip_grad_norm_, as one fused pass over the
// adapter's flat buffers (lora.h).
#pragma once

#include "engine/adam_params.h"
#include "engine/engine.h"
#include "engine/lora.h"

namespace tinkerd::engine {

// Clips a.grads, applies one AdamW step to a.params, then zeroes a.grads (all through the flat buffers).
// Returns the global gradient L2 norm before clipping. A step whose gradient, new weights or new moments
// are not finite is refused (INVALID_ARGUMENT) and changes nothing: weights, moments, step and gradient
// stay as they were. `scratch` ([3N], grown on demand, reusable across adapters) keeps the old values.
Result<double> adamw_step(Adapter & a, const AdamParams & params, torch::Tensor & scratch);

}  // namespace tinkerd::engine
