// Non-streaming OpenAI bodies: chat.completion and text_completion responses with their choices, usage
// and logprobs; the /v1/models list; response ids; the code-point length used by text_offset.
#include "openai/openai_response.h"

#include <random>
#include <string>

#include "openai/response_parts.h"

namespace tinkerd::openai {

namespace {

using json = nlohmann::json;

json finish_json(const std::string & reason) {
    return reason.empty() ? json(nullptr) : json(reason);
}

json chat_choice(int64_t index, const ChoiceResult & c) {
    json message = {{"role", "assistant"}, {"content", c.text}, {"refusal", nullptr}};
    return {{"index", index},
            {"message", std::move(message)},
            {"logprobs", c.has_logprobs ? detail::chat_logprobs(c.logprobs) : json(nullptr)},
            {"finish_reason", finish_json(c.finish_reason)}};
}

json completion_choice(int64_t index, const ChoiceResult & c) {
    return {{"index", index},
            {"text", c.text},
            {"logprobs", c.has_logprobs ? detail::completion_logprobs(c.logprobs, 0) : json(nullptr)},
            {"finish_reason", finish_json(c.finish_reason)}};
}

}  // namespace

std::string new_id(const std::string & prefix) {
    static constexpr char kChars[] = "ABCDEFGHIJKLMNOPQRSTUVWXYZabcdefghijklmnopqrstuvwxyz0123456789";
    thread_local std::mt19937_64 rng{std::random_device{}()};
    std::uniform_int_distribution<size_t> pick(0, sizeof(kChars) - 2);
    std::string id = prefix;
    for (int i = 0; i < 24; ++i) {
        id += kChars[pick(rng)];
    }
    return id;
}

int64_t utf8_length(std::string_view text) {
    int64_t n = 0;
    for (unsigned char c : text) {
        n += (c & 0xC0) != 0x80 ? 1 : 0;
    }
    return n;
}

json chat_response(const std::string & id, int64_t created, const std::string & model,
                   const std::vector<ChoiceResult> & choices, const Usage & usage) {
    json body = detail::envelope(id, "chat.completion", created, model);
    json list = json::array();
    for (size_t i = 0; i < choices.size(); ++i) {
        list.push_back(chat_choice(static_cast<int64_t>(i), choices[i]));
    }
    body["choices"] = std::move(list);
    body["usage"] = detail::usage_json(usage);
    return body;
}

json completion_response(const std::string & id, int64_t created, const std::string & model,
                         const std::vector<ChoiceResult> & choices, const Usage & usage) {
    json body = detail::envelope(id, "text_completion", created, model);
    json list = json::array();
    for (size_t i = 0; i < choices.size(); ++i) {
        list.push_back(completion_choice(static_cast<int64_t>(i), choices[i]));
    }
    body["choices"] = std::move(list);
    body["usage"] = detail::usage_json(usage);
    return body;
}

json models_list(const std::vector<ModelEntry> & models) {
    json data = json::array();
    for (const ModelEntry & m : models) {
        json entry = {{"id", m.id}, {"object", "model"}, {"created", m.created}, {"owned_by", m.owned_by}};
        if (!m.root.empty()) {
            entry["root"] = m.root;
        }
        if (m.chat_template) {
            entry["chat_template"] = *m.chat_template;
        }
        data.push_back(std::move(entry));
    }
    return {{"object", "list"}, {"data", std::move(data)}};
}

}  // namespace tinkerd::openai
