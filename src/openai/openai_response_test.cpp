// Unit tests of the OpenAI response builders: chat.completion and text_completion bodies field by field
// (logprobs in both shapes, -inf and NaN handling, text_offset in code points), streaming chunks, the
// usage chunk, SSE framing, /v1/models, ids, and invalid UTF-8 that must serialise without throwing.
#include "openai/openai_response.h"

#include <cctype>
#include <cmath>
#include <limits>
#include <string>
#include <vector>

#include <gtest/gtest.h>
#include <nlohmann/json.hpp>

namespace tinkerd::openai {
namespace {

using json = nlohmann::json;

TokenLogprob tok(const std::string & text, double lp, std::vector<std::pair<std::string, double>> top = {}) {
    TokenLogprob t;
    t.token = text;
    t.logprob = lp;
    t.top = std::move(top);
    return t;
}

ChoiceResult choice(const std::string & text, const std::string & finish) {
    ChoiceResult c;
    c.text = text;
    c.finish_reason = finish;
    return c;
}

TEST(OpenAIResponseIds, PrefixAnd24Alphanumerics) {
    std::string a = new_id("chatcmpl-");
    std::string b = new_id("chatcmpl-");
    ASSERT_EQ(a.size(), 9u + 24u);
    EXPECT_EQ(a.rfind("chatcmpl-", 0), 0u);
    for (char c : a.substr(9)) {
        EXPECT_TRUE(std::isalnum(static_cast<unsigned char>(c))) << c;
    }
    EXPECT_NE(a, b);
    EXPECT_EQ(new_id("cmpl-").size(), 5u + 24u);
}

TEST(OpenAIChatResponse, FieldByField) {
    json body =
        chat_response("chatcmpl-x", 1700000000, "m", {choice("Hello", "stop"), choice("Hi", "length")}, Usage{12, 5});
    EXPECT_EQ(body["id"], "chatcmpl-x");
    EXPECT_EQ(body["object"], "chat.completion");
    EXPECT_EQ(body["created"], 1700000000);
    EXPECT_EQ(body["model"], "m");
    EXPECT_TRUE(body.contains("system_fingerprint"));
    EXPECT_TRUE(body["system_fingerprint"].is_null());
    EXPECT_EQ(body["usage"], json({{"prompt_tokens", 12}, {"completion_tokens", 5}, {"total_tokens", 17}}));
    ASSERT_EQ(body["choices"].size(), 2u);
    const json & c0 = body["choices"][0];
    EXPECT_EQ(c0["index"], 0);
    EXPECT_EQ(c0["message"], json({{"role", "assistant"}, {"content", "Hello"}, {"refusal", nullptr}}));
    EXPECT_TRUE(c0.contains("logprobs"));
    EXPECT_TRUE(c0["logprobs"].is_null());
    EXPECT_EQ(c0["finish_reason"], "stop");
    EXPECT_EQ(body["choices"][1]["index"], 1);
    EXPECT_EQ(body["choices"][1]["finish_reason"], "length");
    EXPECT_EQ(body.size(), 7u);
}

TEST(OpenAIChatResponse, Logprobs) {
    ChoiceResult c = choice("Hi!", "stop");
    c.has_logprobs = true;
    c.logprobs.push_back(tok("Hi", -0.25, {{"Hi", -0.25}, {"Hey", -1.5}}));
    TokenLogprob partial = tok("\xe2\x82", -std::numeric_limits<double>::infinity());
    partial.bytes = {0xe2, 0x82};
    c.logprobs.push_back(partial);
    json lp = chat_response("id", 1, "m", {c}, Usage{})["choices"][0]["logprobs"];
    EXPECT_TRUE(lp["refusal"].is_null());
    ASSERT_EQ(lp["content"].size(), 2u);
    const json & first = lp["content"][0];
    EXPECT_EQ(first["token"], "Hi");
    EXPECT_EQ(first["logprob"], -0.25);
    EXPECT_EQ(first["bytes"], json({72, 105}));
    ASSERT_EQ(first["top_logprobs"].size(), 2u);
    EXPECT_EQ(first["top_logprobs"][1], json({{"token", "Hey"}, {"logprob", -1.5}, {"bytes", {72, 101, 121}}}));
    EXPECT_EQ(lp["content"][1]["logprob"], -9999.0);
    EXPECT_EQ(lp["content"][1]["bytes"], json({226, 130}));
    EXPECT_EQ(lp["content"][1]["top_logprobs"], json::array());
    c.logprobs.clear();
    EXPECT_EQ(chat_response("id", 1, "m", {c}, Usage{})["choices"][0]["logprobs"]["content"], json::array());
}

TEST(OpenAICompletionResponse, FieldByField) {
    ChoiceResult c = choice("Say hi there", "");
    json body = completion_response("cmpl-x", 5, "m", {c}, Usage{3, 2});
    EXPECT_EQ(body["id"], "cmpl-x");
    EXPECT_EQ(body["object"], "text_completion");
    EXPECT_EQ(body["created"], 5);
    EXPECT_EQ(body["model"], "m");
    EXPECT_TRUE(body["system_fingerprint"].is_null());
    EXPECT_EQ(body["usage"]["total_tokens"], 5);
    EXPECT_EQ(body["choices"][0],
              json({{"index", 0}, {"text", "Say hi there"}, {"logprobs", nullptr}, {"finish_reason", nullptr}}));
}

TEST(OpenAICompletionResponse, LogprobsColumnsAndTextOffset) {
    ChoiceResult c = choice("Say héllo", "length");
    c.has_logprobs = true;
    c.logprobs.push_back(tok("Say", std::nan("")));  // first echoed prompt token: no logprob
    c.logprobs.push_back(tok(" hé", -0.5, {{" ha", -1.0}, {" hé", -0.5}}));
    c.logprobs.push_back(tok("llo", -std::numeric_limits<double>::infinity()));
    json lp = completion_response("id", 1, "m", {c}, Usage{})["choices"][0]["logprobs"];
    EXPECT_EQ(lp["tokens"], json({"Say", " hé", "llo"}));
    EXPECT_EQ(lp["token_logprobs"], json({nullptr, -0.5, -9999.0}));
    EXPECT_TRUE(lp["top_logprobs"][0].is_null());
    EXPECT_EQ(lp["top_logprobs"][1], json({{" hé", -0.5}, {" ha", -1.0}}));
    EXPECT_EQ(lp["top_logprobs"][2], json({{"llo", -9999.0}}));
    EXPECT_EQ(lp["text_offset"], json({0, 3, 6}));  // " hé" is 3 code points, 4 bytes
}

TEST(OpenAICompletionResponse, SpecialTokensKeepTheirTextWithoutMovingOffsets) {
    ChoiceResult c = choice("Hi.", "stop");
    c.has_logprobs = true;
    c.logprobs.push_back(tok("Hi", -0.1));
    TokenLogprob end = tok("<|im_end|>", -0.2, {{"<|im_end|>", -0.2}});
    end.in_text = false;  // a special token: not in the text
    c.logprobs.push_back(end);
    c.logprobs.push_back(tok(".", -0.3));
    json lp = completion_response("id", 1, "m", {c}, Usage{})["choices"][0]["logprobs"];
    EXPECT_EQ(lp["tokens"], json({"Hi", "<|im_end|>", "."}));
    EXPECT_EQ(lp["text_offset"], json({0, 2, 2}));
    json chat = chat_response("id", 1, "m", {c}, Usage{})["choices"][0]["logprobs"]["content"][1];
    EXPECT_EQ(chat["token"], "<|im_end|>");
    EXPECT_EQ(chat["bytes"], chat["top_logprobs"][0]["bytes"]);
}

TEST(OpenAIStreaming, ChatChunks) {
    json first = chat_chunk("c", 9, "m", 0, "assistant", std::string(), std::nullopt);
    EXPECT_EQ(first["object"], "chat.completion.chunk");
    EXPECT_EQ(first["id"], "c");
    EXPECT_EQ(first["created"], 9);
    EXPECT_EQ(first["model"], "m");
    EXPECT_TRUE(first["system_fingerprint"].is_null());
    EXPECT_TRUE(first.contains("usage"));
    EXPECT_TRUE(first["usage"].is_null());
    ASSERT_EQ(first["choices"].size(), 1u);
    EXPECT_EQ(first["choices"][0], json({{"index", 0},
                                         {"delta", {{"role", "assistant"}, {"content", ""}}},
                                         {"logprobs", nullptr},
                                         {"finish_reason", nullptr}}));
    std::vector<TokenLogprob> lps = {tok("lo", -0.1)};
    json middle = chat_chunk("c", 9, "m", 2, std::nullopt, "lo", std::nullopt, &lps);
    EXPECT_EQ(middle["choices"][0]["index"], 2);
    EXPECT_EQ(middle["choices"][0]["delta"], json({{"content", "lo"}}));
    EXPECT_EQ(middle["choices"][0]["logprobs"]["content"][0]["token"], "lo");
    json last = chat_chunk("c", 9, "m", 0, std::nullopt, std::nullopt, "stop");
    EXPECT_EQ(last["choices"][0]["delta"], json::object());
    EXPECT_EQ(last["choices"][0]["finish_reason"], "stop");
}

TEST(OpenAIStreaming, CompletionChunks) {
    json chunk = completion_chunk("k", 3, "m", 1, " wor", std::nullopt);
    EXPECT_EQ(chunk["object"], "text_completion");
    EXPECT_TRUE(chunk["usage"].is_null());
    EXPECT_EQ(chunk["choices"][0],
              json({{"index", 1}, {"text", " wor"}, {"logprobs", nullptr}, {"finish_reason", nullptr}}));
    std::vector<TokenLogprob> lps = {tok(" wo", -0.2), tok("r", -0.3)};
    chunk = completion_chunk("k", 3, "m", 0, " wor", "length", &lps, 10);
    EXPECT_EQ(chunk["choices"][0]["finish_reason"], "length");
    EXPECT_EQ(chunk["choices"][0]["logprobs"]["text_offset"], json({10, 13}));
    EXPECT_EQ(chunk["choices"][0]["logprobs"]["token_logprobs"], json({-0.2, -0.3}));
}

TEST(OpenAIStreaming, UsageChunk) {
    json chat = usage_chunk(true, "c", 1, "m", Usage{4, 6});
    EXPECT_EQ(chat["object"], "chat.completion.chunk");
    EXPECT_EQ(chat["choices"], json::array());
    EXPECT_EQ(chat["usage"], json({{"prompt_tokens", 4}, {"completion_tokens", 6}, {"total_tokens", 10}}));
    json text = usage_chunk(false, "k", 1, "m", Usage{4, 6});
    EXPECT_EQ(text["object"], "text_completion");
    EXPECT_EQ(text["choices"], json::array());
    EXPECT_EQ(text["usage"]["total_tokens"], 10);
}

TEST(OpenAIStreaming, SseFraming) {
    json chunk = chat_chunk("c", 1, "m", 0, std::nullopt, "a\nb", std::nullopt);
    std::string event = sse_event(chunk);
    ASSERT_GT(event.size(), 8u);
    EXPECT_EQ(event.rfind("data: ", 0), 0u);
    EXPECT_EQ(event.substr(event.size() - 2), "\n\n");
    std::string payload = event.substr(6, event.size() - 8);
    EXPECT_EQ(payload.find('\n'), std::string::npos);  // compact: one line per event
    EXPECT_EQ(json::parse(payload), chunk);
    EXPECT_STREQ(SSE_DONE, "data: [DONE]\n\n");
}

TEST(OpenAIInvalidUtf8, SerialisesWithReplacement) {
    ChoiceResult c = choice("ok \xff\xfe", "stop");
    c.has_logprobs = true;
    c.logprobs.push_back(tok("\xe2\x82", -1.0, {{"\xc3", -2.0}}));
    json chat = chat_response("id", 1, "m", {c}, Usage{});
    json text = completion_response("id", 1, "m", {c}, Usage{});
    EXPECT_THROW((void)chat.dump(), json::type_error);  // why callers must use dump_json()
    std::string out;
    EXPECT_NO_THROW(out = dump_json(chat));
    EXPECT_NE(out.find("ok \xEF\xBF\xBD"), std::string::npos);
    EXPECT_NO_THROW(out = dump_json(text));  // the token also appears as a top_logprobs key
    EXPECT_NO_THROW(json::parse(out));
    EXPECT_NO_THROW(out = sse_event(chat_chunk("c", 1, "m", 0, std::nullopt, "\xf0\x9f", std::nullopt)));
    EXPECT_NO_THROW(json::parse(out.substr(6)));
    EXPECT_NO_THROW(out = sse_event(completion_chunk("k", 1, "m", 0, "\x80", std::nullopt, &c.logprobs)));
}

TEST(OpenAIModels, ListShape) {
    json list = models_list({ModelEntry{"llama", 100, "tinkerd"}, ModelEntry{"run-1", 200, "me"}});
    EXPECT_EQ(list["object"], "list");
    ASSERT_EQ(list["data"].size(), 2u);
    EXPECT_EQ(list["data"][0], json({{"id", "llama"}, {"object", "model"}, {"created", 100}, {"owned_by", "tinkerd"}}));
    EXPECT_EQ(list["data"][1]["owned_by"], "me");
    EXPECT_EQ(models_list({}), json({{"object", "list"}, {"data", json::array()}}));
    // tinkerd's additions are sent only when known: the base model (root) and whether it can chat
    json extended = models_list({ModelEntry{"tinker://r/sampler_weights/s", 300, "me", "llama", false}});
    EXPECT_EQ(extended["data"][0]["root"], "llama");
    EXPECT_EQ(extended["data"][0]["chat_template"], false);
    EXPECT_FALSE(list["data"][0].contains("root"));
    EXPECT_FALSE(list["data"][0].contains("chat_template"));
}

TEST(OpenAIUtf8Length, CountsCodePoints) {
    EXPECT_EQ(utf8_length(""), 0);
    EXPECT_EQ(utf8_length("abc"), 3);
    EXPECT_EQ(utf8_length("h\xc3\xa9"), 2);
    EXPECT_EQ(utf8_length("\xf0\x9f\x98\x80"), 1);
    EXPECT_EQ(utf8_length("\xe2\x82"), 1);  // a partial character counts once, at its lead byte
}

}  // namespace
}  // namespace tinkerd::openai
