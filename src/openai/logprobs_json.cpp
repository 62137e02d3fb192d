// The JSON pieces shared by responses and chunks: envelopes, usage and both logprobs shapes. Non-finite
// log-probabilities never reach the JSON: -inf becomes -9999.0 (as OpenAI sends for impossible tokens);
// NaN marks "no logprob" and is null in completions (the first echoed prompt token), -9999.0 in chat.
#include <cmath>

#include "openai/response_parts.h"

namespace tinkerd::openai::detail {

namespace {

using json = nlohmann::json;

constexpr double kFloorLogprob = -9999.0;

double finite_logprob(double lp) {
    return std::isfinite(lp) ? lp : kFloorLogprob;
}

json byte_list(const std::string & text) {
    json out = json::array();
    for (unsigned char c : text) {
        out.push_back(static_cast<int>(c));
    }
    return out;
}

json byte_list(const TokenLogprob & t) {
    if (t.bytes.empty()) {
        return byte_list(t.token);
    }
    json out = json::array();
    for (uint8_t b : t.bytes) {
        out.push_back(static_cast<int>(b));
    }
    return out;
}

json chat_token(const TokenLogprob & t) {
    json top = json::array();
    for (const auto & [text, lp] : t.top) {
        top.push_back({{"token", text}, {"logprob", finite_logprob(lp)}, {"bytes", byte_list(text)}});
    }
    return {{"token", t.token}, {"logprob", finite_logprob(t.logprob)}, {"bytes", byte_list(t)}, {"top_logprobs", top}};
}

json top_object(const TokenLogprob & t) {
    json top = json::object();
    top[t.token] = finite_logprob(t.logprob);
    for (const auto & [text, lp] : t.top) {
        if (!top.contains(text)) {
            top[text] = finite_logprob(lp);
        }
    }
    return top;
}

}  // namespace

json envelope(const std::string & id, const char * object, int64_t created, const std::string & model) {
    return {{"id", id}, {"object", object}, {"created", created}, {"model", model}, {"system_fingerprint", nullptr}};
}

json usage_json(const Usage & usage) {
    return {{"prompt_tokens", usage.prompt_tokens},
            {"completion_tokens", usage.completion_tokens},
            {"total_tokens", usage.prompt_tokens + usage.completion_tokens}};
}

json chat_logprobs(const std::vector<TokenLogprob> & tokens) {
    json content = json::array();
    for (const TokenLogprob & t : tokens) {
        content.push_back(chat_token(t));
    }
    return {{"content", std::move(content)}, {"refusal", nullptr}};
}

json completion_logprobs(const std::vector<TokenLogprob> & tokens, int64_t first_offset) {
    json texts = json::array();
    json logprobs = json::array();
    json tops = json::array();
    json offsets = json::array();
    int64_t offset = first_offset;
    for (const TokenLogprob & t : tokens) {
        bool known = !std::isnan(t.logprob);
        texts.push_back(t.token);
        logprobs.push_back(known ? json(finite_logprob(t.logprob)) : json(nullptr));
        tops.push_back(known ? top_object(t) : json(nullptr));
        offsets.push_back(offset);
        offset += t.in_text ? utf8_length(t.token) : 0;
    }
    return {{"tokens", std::move(texts)},
            {"token_logprobs", std::move(logprobs)},
            {"top_logprobs", std::move(tops)},
            {"text_offset", std::move(offsets)}};
}

}  // namespace tinkerd::openai::detail
