// Parsing and validation of OpenAI request bodies into a GenerationRequest. Wrong types and out-of-range
// values give a 400 ApiError whose `param` names the field ("temperature", "messages[2].role"); unknown
// parameters are ignored, as OpenAI does; JSON null counts as absent for optional parameters.
#pragma once

#include <nlohmann/json.hpp>

#include "openai/openai_types.h"

namespace tinkerd::openai {

// POST /v1/completions: model and prompt are required.
ParseResult parse_completion_request(const nlohmann::json & body);

// POST /v1/chat/completions: model and a non-empty messages array are required.
ParseResult parse_chat_request(const nlohmann::json & body);

}  // namespace tinkerd::openai
