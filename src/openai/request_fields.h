// Internal to src/openai: typed reads of request fields that fail with OpenAI-style errors naming the
// parameter. Each reader leaves its output untouched when the key is absent or null, and returns the
// first error found (std::nullopt when the value is fine).
#pragma once

#include <cstdint>
#include <optional>
#include <string>
#include <utility>

#include <nlohmann/json.hpp>

#include "openai/openai_types.h"

namespace tinkerd::openai::detail {

using json = nlohmann::json;
using MaybeError = std::optional<ApiError>;

// Returns from the enclosing function when `expr` yields an error.
#define OPENAI_TRY(expr)                    \
    do {                                    \
        if (auto openai_err_ = (expr)) {    \
            return std::move(*openai_err_); \
        }                                   \
    } while (0)

// Error constructors, worded after OpenAI's messages.
ApiError missing_param(const std::string & param);
ApiError invalid_type(const std::string & param, const std::string & expected, const json & got);
ApiError invalid_value(const std::string & param, const std::string & message);
// The request body is not a JSON object (param null).
ApiError body_not_object(const json & body);
// "a string", "an integer", "a decimal", "a boolean", "an array", "an object", "null".
std::string describe_type(const json & value);

// A present, non-null value of key, or nullptr.
const json * find_value(const json & obj, const std::string & key);

// Errors name the parameter `prefix + key` ("stream_options." + "include_usage").
MaybeError read_bool(const json & obj, const std::string & key, bool & out, const std::string & prefix = "");
MaybeError read_string(const json & obj, const std::string & key, std::string & out, const std::string & prefix = "");
// Integers within [min, max] (decimals such as 2.0 are refused, as OpenAI does).
MaybeError read_int(const json & obj, const std::string & key, int64_t min, int64_t max, int64_t & out);
MaybeError read_optional_int(const json & obj, const std::string & key, int64_t min, int64_t max,
                             std::optional<int64_t> & out);
// Numbers within [min, max], or (min, max] when min_exclusive.
MaybeError read_number(const json & obj, const std::string & key, double min, double max, bool min_exclusive,
                       double & out);

// The parameters both endpoints share: model, n, temperature, top_p, top_k, seed, stop, stream,
// stream_options, user. The endpoint parsers read the rest.
MaybeError read_common(const json & body, GenerationRequest & req);

}  // namespace tinkerd::openai::detail
