// Unit tests of the OpenAI request parsers: every parameter's accepted forms and defaults, and each
// refusal's status, param and code (chat messages and content parts, completions prompt forms,
// max_completion_tokens precedence, stream_options, unknown parameters ignored), plus error_body.
#include "openai/openai_request.h"

#include <cstdint>
#include <string>
#include <variant>
#include <vector>

#include <gtest/gtest.h>
#include <nlohmann/json.hpp>

namespace tinkerd::openai {
namespace {

using json = nlohmann::json;

json chat_body(const json & extra = json::object()) {
    json body = {{"model", "m"}, {"messages", json::array({{{"role", "user"}, {"content", "hi"}}})}};
    body.update(extra);
    return body;
}

json completion_body(const json & extra = json::object()) {
    json body = {{"model", "m"}, {"prompt", "hi"}};
    body.update(extra);
    return body;
}

GenerationRequest accepted(const ParseResult & r) {
    if (const auto * e = std::get_if<ApiError>(&r)) {
        ADD_FAILURE() << "refused: " << e->param << ": " << e->message;
        return {};
    }
    return std::get<GenerationRequest>(r);
}

ApiError refused(const ParseResult & r) {
    if (const auto * e = std::get_if<ApiError>(&r)) {
        return *e;
    }
    ADD_FAILURE() << "accepted a request that should be refused";
    return {};
}

struct BadCase {
    json body;
    std::string param;
    std::string code;
};

void expect_refusals(const std::vector<BadCase> & cases, bool chat) {
    for (const BadCase & c : cases) {
        SCOPED_TRACE(c.body.dump());
        ApiError e = refused(chat ? parse_chat_request(c.body) : parse_completion_request(c.body));
        EXPECT_EQ(e.status, 400);
        EXPECT_EQ(e.type, "invalid_request_error");
        EXPECT_EQ(e.param, c.param);
        EXPECT_EQ(e.code, c.code);
        EXPECT_FALSE(e.message.empty());
    }
}

TEST(OpenAIChatRequest, Defaults) {
    GenerationRequest r = accepted(parse_chat_request(chat_body()));
    EXPECT_TRUE(r.chat);
    EXPECT_EQ(r.model, "m");
    EXPECT_EQ(r.messages, chat_body()["messages"]);
    EXPECT_TRUE(r.tools.is_null());
    EXPECT_EQ(r.chat_template_kwargs, json::object());
    EXPECT_TRUE(r.add_generation_prompt);
    EXPECT_TRUE(r.prompts.empty());
    EXPECT_EQ(r.n, 1);
    EXPECT_FALSE(r.max_tokens.has_value());
    EXPECT_EQ(r.temperature, 1.0);
    EXPECT_EQ(r.top_p, 1.0);
    EXPECT_EQ(r.top_k, -1);
    EXPECT_FALSE(r.seed.has_value());
    EXPECT_TRUE(r.stop.empty());
    EXPECT_FALSE(r.logprobs);
    EXPECT_EQ(r.top_logprobs, 0);
    EXPECT_FALSE(r.stream);
    EXPECT_FALSE(r.include_usage);
    EXPECT_EQ(r.user, "");
}

TEST(OpenAIChatRequest, EveryParameterAccepted) {
    json tools = json::array({{{"type", "function"}, {"function", {{"name", "get_weather"}, {"parameters", {}}}}}});
    GenerationRequest r = accepted(parse_chat_request(chat_body({{"n", 3},
                                                                 {"max_tokens", 7},
                                                                 {"temperature", 0.5},
                                                                 {"top_p", 0.9},
                                                                 {"top_k", 40},
                                                                 {"seed", 42},
                                                                 {"stop", {"a", "bc"}},
                                                                 {"logprobs", true},
                                                                 {"top_logprobs", 20},
                                                                 {"stream", true},
                                                                 {"stream_options", {{"include_usage", true}}},
                                                                 {"user", "u-1"},
                                                                 {"tools", tools},
                                                                 {"chat_template_kwargs", {{"enable_thinking", false}}},
                                                                 {"add_generation_prompt", false}})));
    EXPECT_EQ(r.n, 3);
    EXPECT_EQ(r.max_tokens, 7);
    EXPECT_EQ(r.temperature, 0.5);
    EXPECT_EQ(r.top_p, 0.9);
    EXPECT_EQ(r.top_k, 40);
    EXPECT_EQ(r.seed, 42u);
    EXPECT_EQ(r.stop, (std::vector<std::string>{"a", "bc"}));
    EXPECT_TRUE(r.logprobs);
    EXPECT_EQ(r.top_logprobs, 20);
    EXPECT_TRUE(r.stream);
    EXPECT_TRUE(r.include_usage);
    EXPECT_EQ(r.user, "u-1");
    EXPECT_EQ(r.tools, tools);
    EXPECT_EQ(r.chat_template_kwargs, json({{"enable_thinking", false}}));
    EXPECT_FALSE(r.add_generation_prompt);
}

TEST(OpenAIChatRequest, BoundaryValuesAndSeedForms) {
    GenerationRequest r =
        accepted(parse_chat_request(chat_body({{"n", 128}, {"temperature", 0}, {"top_p", 1}, {"seed", -1}})));
    EXPECT_EQ(r.n, 128);
    EXPECT_EQ(r.temperature, 0.0);
    EXPECT_EQ(r.top_p, 1.0);
    EXPECT_EQ(r.seed, UINT64_MAX);
    r = accepted(parse_chat_request(chat_body({{"temperature", 2}, {"top_k", 1}, {"seed", UINT64_MAX}})));
    EXPECT_EQ(r.temperature, 2.0);
    EXPECT_EQ(r.top_k, 1);
    EXPECT_EQ(r.seed, UINT64_MAX);
    r = accepted(parse_chat_request(chat_body({{"stop", "END"}, {"top_logprobs", 0}})));
    EXPECT_EQ(r.stop, std::vector<std::string>{"END"});
    EXPECT_FALSE(r.logprobs);
}

TEST(OpenAIChatRequest, MaxCompletionTokensTakesPrecedence) {
    EXPECT_EQ(accepted(parse_chat_request(chat_body({{"max_tokens", 5}, {"max_completion_tokens", 9}}))).max_tokens, 9);
    EXPECT_EQ(accepted(parse_chat_request(chat_body({{"max_tokens", 5}}))).max_tokens, 5);
    EXPECT_EQ(accepted(parse_chat_request(chat_body({{"max_completion_tokens", 0}}))).max_tokens, 0);
    EXPECT_EQ(
        accepted(parse_chat_request(chat_body({{"max_tokens", 5}, {"max_completion_tokens", nullptr}}))).max_tokens, 5);
}

TEST(OpenAIChatRequest, ContentPartsJoinedAndOtherFieldsKept) {
    json messages = json::array({
        {{"role", "system"},
         {"content", json::array({{{"type", "text"}, {"text", "be "}}, {{"type", "text"}, {"text", "brief"}}})}},
        {{"role", "developer"}, {"content", json::array()}},
        {{"role", "user"}, {"content", "hi"}, {"name", "ann"}, {"x_custom", 1}},
        {{"role", "assistant"}, {"tool_calls", json::array({{{"id", "c1"}, {"type", "function"}}})}},
        {{"role", "tool"}, {"content", "{\"t\": 20}"}, {"tool_call_id", "c1"}},
        {{"role", "assistant"}, {"content", nullptr}},
    });
    GenerationRequest r = accepted(parse_chat_request(chat_body({{"messages", messages}})));
    ASSERT_EQ(r.messages.size(), 6u);
    EXPECT_EQ(r.messages[0]["content"], "be brief");
    EXPECT_EQ(r.messages[1]["content"], "");
    EXPECT_EQ(r.messages[2], messages[2]);
    EXPECT_TRUE(r.messages[3]["content"].is_null());
    EXPECT_EQ(r.messages[3]["tool_calls"], messages[3]["tool_calls"]);
    EXPECT_EQ(r.messages[4], messages[4]);
    EXPECT_TRUE(r.messages[5]["content"].is_null());
}

TEST(OpenAIChatRequest, ImageUrlDataPartsBecomeImagePartsInOrder) {
    json messages = json::array({
        {{"role", "user"},
         {"content", json::array({{{"type", "text"}, {"text", "what colour? "}},
                                  {{"type", "image_url"}, {"image_url", {{"url", "data:image/png;base64,iVBO"}}}},
                                  {{"type", "image_url"}, {"image_url", "data:image/jpeg;base64,/9j/"}}})}},
    });
    GenerationRequest r = accepted(parse_chat_request(chat_body({{"messages", messages}})));
    EXPECT_EQ(r.messages[0]["content"],
              json::parse(R"([{"type": "text", "text": "what colour? "}, {"type": "image"}, {"type": "image"}])"));
    ASSERT_EQ(r.images.size(), 2u);
    EXPECT_EQ(r.images[0].base64, "iVBO");
    EXPECT_EQ(r.images[0].format, "png");
    EXPECT_EQ(r.images[0].where, "messages[0].content[1]");
    EXPECT_EQ(r.images[1].format, "jpeg");
    EXPECT_EQ(r.images[1].base64, "/9j/");
}

TEST(OpenAIChatRequest, NullsActAsAbsentAndUnknownParametersIgnored) {
    GenerationRequest r = accepted(parse_chat_request(chat_body({{"temperature", nullptr},
                                                                 {"n", nullptr},
                                                                 {"stop", nullptr},
                                                                 {"stream_options", nullptr},
                                                                 {"tools", json::array()},
                                                                 {"presence_penalty", 0.5},
                                                                 {"response_format", {{"type", "text"}}},
                                                                 {"frobnicate", "x"}})));
    EXPECT_EQ(r.temperature, 1.0);
    EXPECT_EQ(r.n, 1);
    EXPECT_TRUE(r.stop.empty());
    EXPECT_TRUE(r.tools.is_null());
}

TEST(OpenAIChatRequest, MessageRefusalsNameTheField) {
    auto msgs = [](const json & list) { return json{{"model", "m"}, {"messages", list}}; };
    json user = {{"role", "user"}, {"content", "hi"}};
    json image = {
        {"role", "user"},
        {"content", json::array({{{"type", "text"}, {"text", "a"}}, {{"type", "image_url"}, {"image_url", {}}}})}};
    auto image_url = [](const json & url) {
        return json{{"role", "user"}, {"content", json::array({{{"type", "image_url"}, {"image_url", url}}})}};
    };
    json audio = {{"role", "user"}, {"content", json::array({{{"type", "input_audio"}}})}};
    expect_refusals(
        {
            {json::array({1}), "", "invalid_type"},
            {{{"messages", json::array({user})}}, "model", "missing_required_parameter"},
            {{{"model", 5}, {"messages", json::array({user})}}, "model", "invalid_type"},
            {{{"model", "m"}}, "messages", "missing_required_parameter"},
            {msgs("hi"), "messages", "invalid_type"},
            {msgs(json::array()), "messages", "empty_array"},
            {msgs(json::array({"x"})), "messages[0]", "invalid_type"},
            {msgs(json::array({{{"content", "x"}}})), "messages[0].role", "missing_required_parameter"},
            {msgs(json::array({user, {{"role", "bot"}, {"content", "x"}}})), "messages[1].role", "invalid_value"},
            {msgs(json::array({{{"role", 3}, {"content", "x"}}})), "messages[0].role", "invalid_type"},
            {msgs(json::array({{{"role", "user"}}})), "messages[0].content", "missing_required_parameter"},
            {msgs(json::array({{{"role", "system"}, {"content", nullptr}}})), "messages[0].content",
             "missing_required_parameter"},
            {msgs(json::array({{{"role", "user"}, {"content", 5}}})), "messages[0].content", "invalid_type"},
            {msgs(json::array({user, user, image})), "messages[2].content[1].image_url", "missing_required_parameter"},
            {msgs(json::array({image_url({{"url", "https://example.com/cat.png"}})})),
             "messages[0].content[0].image_url.url", "invalid_value"},
            {msgs(json::array({image_url("data:image/gif;base64,R0lG")})), "messages[0].content[0].image_url.url",
             "invalid_value"},
            {msgs(json::array({image_url(5)})), "messages[0].content[0].image_url", "invalid_type"},
            {msgs(json::array({audio})), "messages[0].content[0].type", "invalid_value"},
            {msgs(json::array({{{"role", "user"}, {"content", json::array({{{"text", "a"}}})}}})),
             "messages[0].content[0].type", "missing_required_parameter"},
            {msgs(json::array({{{"role", "user"}, {"content", json::array({{{"type", "text"}, {"text", 5}}})}}})),
             "messages[0].content[0].text", "invalid_type"},
            {msgs(json::array({{{"role", "user"}, {"content", json::array({{{"type", "text"}}})}}})),
             "messages[0].content[0].text", "missing_required_parameter"},
            {msgs(json::array({{{"role", "user"}, {"content", json::array({"a"})}}})), "messages[0].content[0]",
             "invalid_type"},
            {msgs(json::array({{{"role", "user"}, {"content", "x"}, {"name", 5}}})), "messages[0].name",
             "invalid_type"},
            {msgs(json::array({{{"role", "tool"}, {"content", "x"}, {"tool_call_id", 5}}})), "messages[0].tool_call_id",
             "invalid_type"},
            {msgs(json::array({{{"role", "assistant"}, {"tool_calls", "x"}}})), "messages[0].tool_calls",
             "invalid_type"},
        },
        true);
}

TEST(OpenAIChatRequest, SamplingRefusalsNameTheField) {
    expect_refusals(
        {
            {chat_body({{"n", 0}}), "n", "integer_below_min_value"},
            {chat_body({{"n", 129}}), "n", "integer_above_max_value"},
            {chat_body({{"n", "2"}}), "n", "invalid_type"},
            {chat_body({{"n", 1.5}}), "n", "invalid_type"},
            {chat_body({{"temperature", -0.1}}), "temperature", "decimal_below_min_value"},
            {chat_body({{"temperature", 2.5}}), "temperature", "decimal_above_max_value"},
            {chat_body({{"temperature", "hot"}}), "temperature", "invalid_type"},
            {chat_body({{"top_p", 0}}), "top_p", "decimal_below_min_value"},
            {chat_body({{"top_p", 1.5}}), "top_p", "decimal_above_max_value"},
            {chat_body({{"top_k", 0}}), "top_k", "invalid_value"},
            {chat_body({{"top_k", -2}}), "top_k", "integer_below_min_value"},
            {chat_body({{"top_k", 1.5}}), "top_k", "invalid_type"},
            {chat_body({{"seed", "x"}}), "seed", "invalid_type"},
            {chat_body({{"seed", 1.5}}), "seed", "invalid_type"},
            {chat_body({{"stop", 5}}), "stop", "invalid_type"},
            {chat_body({{"stop", {5}}}), "stop", "invalid_type"},
            {chat_body({{"stop", {"a", "b", "c", "d", "e"}}}), "stop", "array_above_max_length"},
            {chat_body({{"stop", ""}}), "stop", "invalid_value"},
            {chat_body({{"stop", {"a", ""}}}), "stop", "invalid_value"},
        },
        true);
}

TEST(OpenAIChatRequest, OtherParameterRefusalsNameTheField) {
    expect_refusals(
        {
            {chat_body({{"logprobs", "yes"}}), "logprobs", "invalid_type"},
            {chat_body({{"logprobs", true}, {"top_logprobs", 21}}), "top_logprobs", "integer_above_max_value"},
            {chat_body({{"logprobs", true}, {"top_logprobs", -1}}), "top_logprobs", "integer_below_min_value"},
            {chat_body({{"top_logprobs", 3}}), "top_logprobs", "invalid_value"},
            {chat_body({{"max_tokens", -1}}), "max_tokens", "integer_below_min_value"},
            {chat_body({{"max_tokens", "10"}}), "max_tokens", "invalid_type"},
            {chat_body({{"max_completion_tokens", -1}}), "max_completion_tokens", "integer_below_min_value"},
            {chat_body({{"stream", "true"}}), "stream", "invalid_type"},
            {chat_body({{"stream_options", {{"include_usage", true}}}}), "stream_options", "invalid_value"},
            {chat_body({{"stream", false}, {"stream_options", json::object()}}), "stream_options", "invalid_value"},
            {chat_body({{"stream", true}, {"stream_options", 5}}), "stream_options", "invalid_type"},
            {chat_body({{"stream", true}, {"stream_options", {{"include_usage", "y"}}}}),
             "stream_options.include_usage", "invalid_type"},
            {chat_body({{"user", 5}}), "user", "invalid_type"},
            {chat_body({{"tools", json::object()}}), "tools", "invalid_type"},
            {chat_body({{"tools", {{{"type", "custom"}}}}}), "tools[0].type", "invalid_value"},
            {chat_body({{"tools", {{{"type", "function"}}}}}), "tools[0].function", "missing_required_parameter"},
            {chat_body({{"tools", {{{"type", "function"}, {"function", json::object()}}}}}), "tools[0].function.name",
             "missing_required_parameter"},
            {chat_body({{"chat_template_kwargs", json::array()}}), "chat_template_kwargs", "invalid_type"},
            {chat_body({{"add_generation_prompt", 1}}), "add_generation_prompt", "invalid_type"},
        },
        true);
}

TEST(OpenAIChatRequest, MessagesWordedLikeOpenAI) {
    ApiError e = refused(parse_chat_request(chat_body({{"temperature", 3}})));
    EXPECT_EQ(e.message,
              "Invalid 'temperature': decimal above maximum value. Expected a value <= 2, but got 3 instead.");
    e = refused(parse_chat_request(chat_body({{"n", "2"}})));
    EXPECT_EQ(e.message, "Invalid type for 'n': expected an integer, but got a string instead.");
    e = refused(parse_chat_request(json{{"model", "m"}}));
    EXPECT_EQ(e.message, "Missing required parameter: 'messages'.");
    e = refused(parse_chat_request(chat_body({{"stream_options", {{"include_usage", true}}}})));
    EXPECT_EQ(e.message, "The 'stream_options' parameter is only allowed when 'stream' is enabled.");
}

TEST(OpenAICompletionRequest, DefaultsAndEveryParameter) {
    GenerationRequest r = accepted(parse_completion_request(completion_body()));
    EXPECT_FALSE(r.chat);
    EXPECT_EQ(r.max_tokens, 16);
    EXPECT_FALSE(r.logprobs);
    EXPECT_FALSE(r.echo);
    EXPECT_TRUE(r.messages.is_null());
    r = accepted(parse_completion_request(completion_body({{"max_tokens", 0},
                                                           {"logprobs", 3},
                                                           {"echo", true},
                                                           {"temperature", 0},
                                                           {"stop", "\n"},
                                                           {"seed", 7},
                                                           {"stream", true},
                                                           {"stream_options", {{"include_usage", true}}},
                                                           {"max_completion_tokens", 99}})));
    EXPECT_EQ(r.max_tokens, 0);
    EXPECT_TRUE(r.logprobs);
    EXPECT_EQ(r.top_logprobs, 3);
    EXPECT_TRUE(r.echo);
    EXPECT_EQ(r.temperature, 0.0);
    EXPECT_EQ(r.stop, std::vector<std::string>{"\n"});
    EXPECT_EQ(r.seed, 7u);
    EXPECT_TRUE(r.include_usage);
    r = accepted(parse_completion_request(completion_body({{"logprobs", 0}})));
    EXPECT_TRUE(r.logprobs);
    EXPECT_EQ(r.top_logprobs, 0);
    EXPECT_FALSE(accepted(parse_completion_request(completion_body({{"logprobs", nullptr}}))).logprobs);
}

TEST(OpenAICompletionRequest, PromptForms) {
    auto prompts = [](const json & p) {
        return accepted(parse_completion_request(completion_body({{"prompt", p}}))).prompts;
    };
    auto one = prompts("hello");
    ASSERT_EQ(one.size(), 1u);
    EXPECT_FALSE(one[0].is_tokens);
    EXPECT_EQ(one[0].text, "hello");
    EXPECT_EQ(prompts("")[0].text, "");
    auto texts = prompts({"a", "b"});
    ASSERT_EQ(texts.size(), 2u);
    EXPECT_EQ(texts[1].text, "b");
    auto ids = prompts({1, 2, 3});
    ASSERT_EQ(ids.size(), 1u);
    EXPECT_TRUE(ids[0].is_tokens);
    EXPECT_EQ(ids[0].tokens, (std::vector<int64_t>{1, 2, 3}));
    auto lists = prompts({{1, 2}, {0}});
    ASSERT_EQ(lists.size(), 2u);
    EXPECT_TRUE(lists[1].is_tokens);
    EXPECT_EQ(lists[0].tokens, (std::vector<int64_t>{1, 2}));
    EXPECT_EQ(lists[1].tokens, std::vector<int64_t>{0});
}

TEST(OpenAICompletionRequest, RefusalsNameTheField) {
    expect_refusals(
        {
            {json("text"), "", "invalid_type"},
            {json{{"model", "m"}}, "prompt", "missing_required_parameter"},
            {json{{"prompt", "hi"}}, "model", "missing_required_parameter"},
            {completion_body({{"prompt", 5}}), "prompt", "invalid_type"},
            {completion_body({{"prompt", json::array()}}), "prompt", "empty_array"},
            {completion_body({{"prompt", {json::array()}}}), "prompt[0]", "empty_array"},
            {completion_body({{"prompt", {"a", 1}}}), "prompt[1]", "invalid_type"},
            {completion_body({{"prompt", {{1}, "a"}}}), "prompt[1]", "invalid_type"},
            {completion_body({{"prompt", {1, "a"}}}), "prompt[1]", "invalid_type"},
            {completion_body({{"prompt", {-1}}}), "prompt[0]", "invalid_value"},
            {completion_body({{"prompt", {{1, -2}}}}), "prompt[0][1]", "invalid_value"},
            {completion_body({{"prompt", {true}}}), "prompt[0]", "invalid_type"},
            {completion_body({{"prompt", {1.5}}}), "prompt[0]", "invalid_type"},
            {completion_body({{"logprobs", 6}}), "logprobs", "integer_above_max_value"},
            {completion_body({{"logprobs", -1}}), "logprobs", "integer_below_min_value"},
            {completion_body({{"logprobs", true}}), "logprobs", "invalid_type"},
            {completion_body({{"echo", "yes"}}), "echo", "invalid_type"},
            {completion_body({{"max_tokens", -5}}), "max_tokens", "integer_below_min_value"},
            {completion_body({{"top_p", -1}}), "top_p", "decimal_below_min_value"},
            {completion_body({{"stream_options", {{"include_usage", true}}}}), "stream_options", "invalid_value"},
        },
        false);
}

TEST(OpenAIErrorBody, ShapeAndNulls) {
    json body = json::parse(error_body(ApiError{400, "bad", "invalid_request_error", "", ""}));
    EXPECT_EQ(body,
              json({{"error",
                     {{"message", "bad"}, {"type", "invalid_request_error"}, {"param", nullptr}, {"code", nullptr}}}}));
    body = json::parse(error_body(ApiError{404, "no model", "invalid_request_error", "model", "model_not_found"}));
    EXPECT_EQ(body["error"]["param"], "model");
    EXPECT_EQ(body["error"]["code"], "model_not_found");
    std::string text;
    ApiError bad_utf8;
    bad_utf8.message = "bad \xff byte";
    EXPECT_NO_THROW(text = error_body(bad_utf8));
    EXPECT_NE(text.find("\xEF\xBF\xBD"), std::string::npos);
}

}  // namespace
}  // namespace tinkerd::openai
