// POST /v1/completions bodies: the four prompt forms (string, [string], [int], [[int]]), logprobs as an
// integer 0..5, echo, and max_tokens (16 when absent, as OpenAI documents). Shared sampling parameters
// are read by read_common().
#include <limits>
#include <string>

#include "openai/openai_request.h"
#include "openai/request_fields.h"

namespace tinkerd::openai {

namespace {

using detail::invalid_type;
using detail::invalid_value;
using detail::json;
using detail::MaybeError;

constexpr int64_t kDefaultMaxTokens = 16;
constexpr int64_t kMaxLogprobs = 5;
constexpr const char * kPromptTypes =
    "a string, an array of strings, an array of integers or an array of arrays of integers";

ApiError empty_prompt(const std::string & where) {
    ApiError e = invalid_value(where, "Invalid '" + where +
                                          "': empty array. Expected an array with minimum length "
                                          "1, but got an empty array instead.");
    e.code = "empty_array";
    return e;
}

// A non-empty list of token ids (each >= 0).
MaybeError read_token_ids(const json & ids, const std::string & where, PromptInput & out) {
    if (ids.empty()) {
        return empty_prompt(where);
    }
    out.is_tokens = true;
    for (size_t k = 0; k < ids.size(); ++k) {
        const json & id = ids[k];
        std::string at = where + "[" + std::to_string(k) + "]";
        if (!id.is_number_integer()) {
            return invalid_type(at, "an integer", id);
        }
        bool fits = id.is_number_unsigned()
                        ? id.get<uint64_t>() <= static_cast<uint64_t>(std::numeric_limits<int64_t>::max())
                        : id.get<int64_t>() >= 0;
        if (!fits) {
            return invalid_value(
                at, "Invalid '" + at + "': token ids must be non-negative 64-bit integers, but got " + id.dump() + ".");
        }
        out.tokens.push_back(id.get<int64_t>());
    }
    return std::nullopt;
}

// [string, ...] or [[int, ...], ...]: every element takes the form of the first.
MaybeError read_prompt_list(const json & list, GenerationRequest & req) {
    bool strings = list[0].is_string();
    for (size_t i = 0; i < list.size(); ++i) {
        const json & item = list[i];
        std::string at = "prompt[" + std::to_string(i) + "]";
        PromptInput prompt;
        if (strings && item.is_string()) {
            prompt.text = item.get<std::string>();
        } else if (!strings && item.is_array()) {
            OPENAI_TRY(read_token_ids(item, at, prompt));
        } else {
            return invalid_type(at, strings ? "a string" : "an array of integers", item);
        }
        req.prompts.push_back(std::move(prompt));
    }
    return std::nullopt;
}

MaybeError read_prompt(const json & body, GenerationRequest & req) {
    const json * v = detail::find_value(body, "prompt");
    if (v == nullptr) {
        return detail::missing_param("prompt");
    }
    if (v->is_string()) {
        req.prompts.push_back(PromptInput{false, v->get<std::string>(), {}});
        return std::nullopt;
    }
    if (!v->is_array()) {
        return invalid_type("prompt", kPromptTypes, *v);
    }
    if (v->empty()) {
        return empty_prompt("prompt");
    }
    const json & first = (*v)[0];
    if (first.is_number_integer()) {
        PromptInput prompt;
        OPENAI_TRY(read_token_ids(*v, "prompt", prompt));
        req.prompts.push_back(std::move(prompt));
        return std::nullopt;
    }
    if (!first.is_string() && !first.is_array()) {
        return invalid_type("prompt[0]", "a string, an integer or an array of integers", first);
    }
    return read_prompt_list(*v, req);
}

// logprobs is an integer here: how many alternatives to return per token (0: the sampled token only).
MaybeError read_completion_logprobs(const json & body, GenerationRequest & req) {
    std::optional<int64_t> count;
    OPENAI_TRY(detail::read_optional_int(body, "logprobs", 0, kMaxLogprobs, count));
    if (count) {
        req.logprobs = true;
        req.top_logprobs = *count;
    }
    return std::nullopt;
}

MaybeError read_completion(const json & body, GenerationRequest & req) {
    OPENAI_TRY(detail::read_common(body, req));
    OPENAI_TRY(read_prompt(body, req));
    OPENAI_TRY(read_completion_logprobs(body, req));
    OPENAI_TRY(detail::read_bool(body, "echo", req.echo));
    OPENAI_TRY(detail::read_optional_int(body, "max_tokens", 0, std::numeric_limits<int64_t>::max(), req.max_tokens));
    if (!req.max_tokens) {
        req.max_tokens = kDefaultMaxTokens;
    }
    return std::nullopt;
}

}  // namespace

ParseResult parse_completion_request(const nlohmann::json & body) {
    if (!body.is_object()) {
        return detail::body_not_object(body);
    }
    GenerationRequest req;
    if (MaybeError e = read_completion(body, req)) {
        return std::move(*e);
    }
    return req;
}

}  // namespace tinkerd::openai
