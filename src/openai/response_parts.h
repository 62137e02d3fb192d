// Internal to src/openai: JSON pieces shared by the full responses and the streaming chunks (the
// envelope fields, usage, and the two logprobs shapes: chat's per-token list and completions' columns).
#pragma once

#include <cstdint>
#include <string>
#include <vector>

#include <nlohmann/json.hpp>

#include "openai/openai_response.h"

namespace tinkerd::openai::detail {

// {"id", "object", "created", "model", "system_fingerprint": null}
nlohmann::json envelope(const std::string & id, const char * object, int64_t created, const std::string & model);

// {"prompt_tokens", "completion_tokens", "total_tokens"}
nlohmann::json usage_json(const Usage & usage);

// {"content": [{"token", "logprob", "bytes", "top_logprobs": [{"token", "logprob", "bytes"}]}], "refusal": null}
nlohmann::json chat_logprobs(const std::vector<TokenLogprob> & tokens);

// {"tokens", "token_logprobs", "top_logprobs": [{text: logprob} | null], "text_offset"}, offsets starting at
// first_offset. Each top_logprobs object holds the sampled token and its alternatives (first one wins).
nlohmann::json completion_logprobs(const std::vector<TokenLogprob> & tokens, int64_t first_offset);

}  // namespace tinkerd::openai::detail
