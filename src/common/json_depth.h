// A guard for untrusted JSON text: its nesting depth is measured by one flat scan before any parser (or any
// recursive code walking the parsed value: copies, dumps, chat-template values) sees it, so a body nested
// 200,000 levels deep is refused with a clear error instead of overflowing a thread's stack.
#pragma once

#include <cstddef>
#include <string>
#include <string_view>

#include "common/status.h"

namespace tinkerd {

// The deepest JSON nesting accepted anywhere (request bodies, config and tokenizer files). Real requests
// nest a few levels; OpenAI tool schemas a few tens.
constexpr size_t MAX_JSON_DEPTH = 64;

// The deepest nesting of '[' / '{' in `text`, skipping string literals (with escapes); the scan stops as
// soon as the depth passes `stop_after`, returning that depth. Malformed text is measured as far as it goes.
size_t json_nesting_depth(std::string_view text, size_t stop_after = MAX_JSON_DEPTH);

// INVALID_ARGUMENT "<what>: JSON nested deeper than 64 levels (the limit)" when `text` nests too deep.
Result<void> check_json_depth(std::string_view text, const std::string & what, size_t max_depth = MAX_JSON_DEPTH);

}  // namespace tinkerd
