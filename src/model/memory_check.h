// Whether a model fits in memory, checked before it loads: the bytes its weights will hold (quantised blocks
// at their size, other tensors in the dtype they will be stored in) against the memory the machine has
// available, so that a model too big is refused at start-up with both numbers instead of swapping or dying.
#pragma once

#include <cstdint>
#include <string>

#include "common/status.h"

namespace tinkerd::model {

// Bytes of the weights of the model directory dir once loaded: U8 (quantised) tensors at their size, others
// at element_bytes each (0: their stored size).
Result<uint64_t> model_weight_bytes(const std::string & dir, size_t element_bytes);

// MemAvailable of /proc/meminfo in bytes (0 when unknown).
uint64_t available_memory_bytes();

// OK when model_weight_bytes(dir, element_bytes) fits in available_memory_bytes() (or that is unknown); else
// TOO_LARGE naming the model, what it needs and what there is, and what to try.
Result<void> check_model_fits(const std::string & name, const std::string & dir, size_t element_bytes);

}  // namespace tinkerd::model
