// Shared pieces of the config.json parser (model_config.cpp, model_config_moe.cpp): typed field readers
// that apply a default when the key is absent or null and name the field in every error, and the
// MoE / hybrid parsers model_config_moe.cpp defines. Internal to src/model/.
#pragma once

#include <cstdint>
#include <string>

#include <nlohmann/json.hpp>

#include "common/status.h"
#include "model/model_config.h"

namespace tinkerd::model::config_json {

using nlohmann::json;

inline constexpr const char * CONFIG_PREFIX = "config.json: ";

bool is_present(const json & obj, const std::string & key);
Error missing_field(const std::string & key);
// An integer, or a float with an integral value (some exporters write 8192.0).
Result<int64_t> as_int(const json & value, const std::string & key);
Result<int64_t> required_int(const json & obj, const std::string & key);
Result<int64_t> optional_int(const json & obj, const std::string & key, int64_t fallback);
Result<double> optional_double(const json & obj, const std::string & key, double fallback);
Result<bool> optional_bool(const json & obj, const std::string & key, bool fallback);
Result<std::string> optional_string(const json & obj, const std::string & key);  // "" when absent

// The expert fields of a Qwen3-MoE / Qwen3.5-MoE config and which layers are sparse (no-op for dense).
Result<void> parse_moe(const json & obj, ModelConfig & config);
// The Gated DeltaNet layout and sizes of a Qwen3.5 text config (no-op for other families).
Result<void> parse_hybrid(const json & obj, ModelConfig & config);

// The vision tower, image token ids and mrope sections of an image-text checkpoint (model_config_vision.cpp):
// top is the whole config.json, text the text model's part (no-op without "vision_config").
Result<void> parse_vision(const json & top, const json & text, ModelConfig & config);

}  // namespace tinkerd::model::config_json
