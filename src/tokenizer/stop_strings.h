// Stop strings as a per-token check over token ids: after each generated token the decoded text of the
// generated tail is searched for any of the strings. Used by the API (stop_check of a sample request) and
// by sampling replicas, which rebuild the check from the strings with their own tokenizer.
#pragma once

#include <cstdint>
#include <functional>
#include <string>
#include <vector>

#include "tokenizer/tokenizer.h"

namespace tinkerd::tokenizer {

using StopCheck = std::function<bool(const std::vector<int64_t> & generated)>;

// `tokenizer` must outlive the check; `stops` are non-empty strings (the caller validates them).
StopCheck stop_string_matcher(const Tokenizer & tokenizer, std::vector<std::string> stops);

}  // namespace tinkerd::tokenizer
