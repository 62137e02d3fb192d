// OpenAI response bodies and streaming chunks built from generation results: chat.completion,
// text_completion, their chunks, the final usage chunk, SSE framing and the /v1/models list.
// Token text may hold invalid UTF-8 (partial characters): always serialise with dump_json() / sse_event().
#pragma once

#include <cstdint>
#include <optional>
#include <string>
#include <string_view>
#include <utility>
#include <vector>

#include <nlohmann/json.hpp>

namespace tinkerd::openai {

// One generated (or, with echo, prompt) token and its log-probability.
struct TokenLogprob {
    std::string token;           // its text; may be part of a UTF-8 character
    std::vector<uint8_t> bytes;  // its bytes; empty means the bytes of `token`
    double logprob = 0.0;        // -inf (and, in chat, NaN) is sent as -9999.0; NaN is null in completions
    std::vector<std::pair<std::string, double>> top;  // alternatives, best first
    bool in_text = true;  // false: a special token (its text is not in the choice's text; offsets skip it)
};

// One finished choice. Its index is its position in the vector handed to the builders.
struct ChoiceResult {
    std::string text;           // completions with echo: the caller puts the prompt text first
    std::string finish_reason;  // "stop" | "length"; empty is sent as null
    std::vector<TokenLogprob> logprobs;
    bool has_logprobs = false;  // false: "logprobs": null
    int64_t completion_tokens = 0;
};

struct Usage {
    int64_t prompt_tokens = 0;
    int64_t completion_tokens = 0;
};

struct ModelEntry {
    std::string id;
    int64_t created = 0;
    std::string owned_by = "tinkerd";
    std::string root;                   // the served base model behind a run or checkpoint ("" = not sent)
    std::optional<bool> chat_template;  // whether chat completions can render for it (absent = not sent)
};

// prefix + 24 random characters of [A-Za-z0-9] ("chatcmpl-", "cmpl-").
std::string new_id(const std::string & prefix);

// Length of UTF-8 text in code points (bytes that are not continuation bytes): the unit of text_offset.
int64_t utf8_length(std::string_view text);

// {"id", "object": "chat.completion", "created", "model", "system_fingerprint": null, "usage",
//  "choices": [{"index", "message": {"role": "assistant", "content", "refusal": null}, "logprobs", "finish_reason"}]}
nlohmann::json chat_response(const std::string & id, int64_t created, const std::string & model,
                             const std::vector<ChoiceResult> & choices, const Usage & usage);

// {"id", "object": "text_completion", "created", "model", "system_fingerprint": null, "usage",
//  "choices": [{"index", "text", "logprobs": {tokens, token_logprobs, top_logprobs, text_offset} | null,
//  "finish_reason"}]}. text_offset counts code points from the start of each choice's text.
nlohmann::json completion_response(const std::string & id, int64_t created, const std::string & model,
                                   const std::vector<ChoiceResult> & choices, const Usage & usage);

// One "chat.completion.chunk" with a single choice whose delta holds the role and/or content given.
nlohmann::json chat_chunk(const std::string & id, int64_t created, const std::string & model, int64_t index,
                          const std::optional<std::string> & role, const std::optional<std::string> & content,
                          const std::optional<std::string> & finish_reason,
                          const std::vector<TokenLogprob> * logprobs = nullptr);

// One streamed "text_completion" with a single choice. text_offset: code points of this choice's text
// already streamed, so that the logprobs' text_offset continue from there.
nlohmann::json completion_chunk(const std::string & id, int64_t created, const std::string & model, int64_t index,
                                const std::string & text, const std::optional<std::string> & finish_reason,
                                const std::vector<TokenLogprob> * logprobs = nullptr, int64_t text_offset = 0);

// The last chunk before [DONE] when stream_options.include_usage: "choices": [] and the usage.
nlohmann::json usage_chunk(bool chat, const std::string & id, int64_t created, const std::string & model,
                           const Usage & usage);

// {"object": "list", "data": [{"id", "object": "model", "created", "owned_by"}]}
nlohmann::json models_list(const std::vector<ModelEntry> & models);

// Compact JSON text that never throws: invalid UTF-8 becomes U+FFFD. Use it for every body built here.
std::string dump_json(const nlohmann::json & value);

// "data: <compact json>\n\n" (dumped as dump_json does).
std::string sse_event(const nlohmann::json & value);
inline constexpr const char * SSE_DONE = "data: [DONE]\n\n";

}  // namespace tinkerd::openai
