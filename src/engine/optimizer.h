// AdamW over one adapter's LoRA parameters, the math of torch.optim.AdamW (1.13 single-tensor path)
// preceded by global grad-norm clipping as torch.nn.utils.clip_grad_norm_, as one fused pass over the
// adapter's flat buffers (lora.h).
#pragma once

#include "engine/engine.h"
#include "engine/lora.h"

namespace tinkerd::engine {

// Validates hyper-parameters (finite, lr >= 0, 0 <= beta < 1, eps >= 0, wd >= 0, clip >= 0).
Result<void> validate_adam_params(const AdamParams & params);

// Clips a.grads, applies one AdamW step to a.params, then zeroes a.grads (all through the flat buffers).
// Returns the global gradient L2 norm before clipping.
double adamw_step(Adapter & a, const AdamParams & params);

}  // namespace tinkerd::engine
