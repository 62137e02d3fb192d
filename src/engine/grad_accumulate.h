// Accumulating one backward pass's LoRA gradients into an adapter's flat CPU gradient in two passes over
// memory (a finiteness check of the new values, then dst (+)= src with Σ dst² for optim_step's norm), and the
// lazily zeroed gradient that a CPU optim_step leaves (Adapter::consumed_version).
#pragma once

#include <optional>
#include <vector>

#include "engine/lora.h"

namespace tinkerd::engine {

// Adds grads[first + j] (undefined: none) to a.grads[j] for every parameter j when every new value is finite,
// and records Σ g² of the whole result in a.gradient_squares; false (nothing changed) otherwise. Writes
// instead of adding where a's gradient is consumed. Other devices than the CPU, and new gradients that are not
// contiguous or not in the adapter's dtype, go through torch ops (no Σ g² recorded).
bool accumulate_gradients(Adapter & a, const std::vector<torch::Tensor> & grads, size_t first);

// Marks a's gradient consumed by a CPU optimizer step (Adapter::consumed_version): it reads as zero from now.
void consume_gradient(Adapter & a);
// True while a's gradient is consumed and nothing has written it since.
bool gradient_is_consumed(const Adapter & a);
// Makes a consumed gradient read as zero in memory. Every reader of a's gradient other than
// accumulate_gradients calls it first.
void settle_gradient(Adapter & a);

// Marks a raw-pointer write to a.flat_grads (one torch does not see): bumps its version, so a recorded Σ g² is
// no longer trusted.
void note_raw_gradient_write(Adapter & a);

// Σ g² of a's gradient when the last accumulation recorded it and nothing has written the gradient since.
std::optional<double> recorded_gradient_squares(const Adapter & a);

}  // namespace tinkerd::engine
