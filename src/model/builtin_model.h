// The built-in model: a small Llama-shaped checkpoint with random weights, generated deterministically
// so that tinkerd runs with no download at all. Written as a normal Hugging Face directory.
#pragma once

#include <string>

#include "common/status.h"

namespace tinkerd::model {

inline constexpr const char * BUILTIN_MODEL_NAME = "tinkerd/builtin-tiny";

// Writes config.json + model.safetensors into dir (created if needed) unless they already exist
// with the same generator version. Same seed -> byte-identical files.
Result<void> ensure_builtin_model(const std::string & dir, uint64_t seed = 0);

}  // namespace tinkerd::model
