// Streaming pieces: one chat.completion.chunk or text_completion chunk per call, the usage-only chunk
// sent before [DONE], and SSE framing. Every chunk carries "usage": null except the usage chunk, whose
// "choices" is empty, as OpenAI streams with stream_options.include_usage.
#include <string>

#include "openai/openai_response.h"
#include "openai/response_parts.h"

namespace tinkerd::openai {

namespace {

using json = nlohmann::json;

json optional_string(const std::optional<std::string> & s) {
    return s ? json(*s) : json(nullptr);
}

}  // namespace

json chat_chunk(const std::string & id, int64_t created, const std::string & model, int64_t index,
                const std::optional<std::string> & role, const std::optional<std::string> & content,
                const std::optional<std::string> & finish_reason, const std::vector<TokenLogprob> * logprobs) {
    json delta = json::object();
    if (role) {
        delta["role"] = *role;
    }
    if (content) {
        delta["content"] = *content;
    }
    json choice = {{"index", index},
                   {"delta", std::move(delta)},
                   {"logprobs", logprobs != nullptr ? detail::chat_logprobs(*logprobs) : json(nullptr)},
                   {"finish_reason", optional_string(finish_reason)}};
    json body = detail::envelope(id, "chat.completion.chunk", created, model);
    body["choices"] = json::array({std::move(choice)});
    body["usage"] = nullptr;
    return body;
}

json completion_chunk(const std::string & id, int64_t created, const std::string & model, int64_t index,
                      const std::string & text, const std::optional<std::string> & finish_reason,
                      const std::vector<TokenLogprob> * logprobs, int64_t text_offset) {
    json choice = {
        {"index", index},
        {"text", text},
        {"logprobs", logprobs != nullptr ? detail::completion_logprobs(*logprobs, text_offset) : json(nullptr)},
        {"finish_reason", optional_string(finish_reason)}};
    json body = detail::envelope(id, "text_completion", created, model);
    body["choices"] = json::array({std::move(choice)});
    body["usage"] = nullptr;
    return body;
}

json usage_chunk(bool chat, const std::string & id, int64_t created, const std::string & model, const Usage & usage) {
    json body = detail::envelope(id, chat ? "chat.completion.chunk" : "text_completion", created, model);
    body["choices"] = json::array();
    body["usage"] = detail::usage_json(usage);
    return body;
}

std::string dump_json(const json & value) {
    return value.dump(-1, ' ', false, json::error_handler_t::replace);
}

std::string sse_event(const json & value) {
    return "data: " + dump_json(value) + "\n\n";
}

}  // namespace tinkerd::openai
