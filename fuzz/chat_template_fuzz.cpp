// chat_template_fuzz: two modes. Input with a NUL byte: template source before it, a JSON messages
// array after it -> ChatTemplate::compile + render. Input without one: JSON messages (or {"messages",
// "tools", "kwargs"}) rendered with the real Qwen3 template (fuzz/data/qwen3_chat_template.jinja), as
// /v1/chat/completions does with a client's messages.
#include <cstddef>
#include <cstdint>
#include <cstdlib>
#include <string>

#include <nlohmann/json.hpp>

#include "chat_template/chat_template.h"
#include "fuzz_util.h"

namespace {

using nlohmann::ordered_json;
using tinkerd::chat_template::ChatTemplate;

const ChatTemplate & qwen3() {
    static const ChatTemplate compiled = [] {
        auto t = ChatTemplate::compile(tinkerd::fuzz::read_data_file("qwen3_chat_template.jinja"));
        if (!t.ok()) {
            std::abort();  // fuzz/data missing or the interpreter cannot compile the real template
        }
        return *t;
    }();
    return compiled;
}

ordered_json parse(std::string_view text) {
    if (tinkerd::fuzz::too_deep(text)) {
        return ordered_json::array();
    }
    ordered_json value = ordered_json::parse(text, nullptr, false);
    return value.is_discarded() ? ordered_json::array() : value;
}

void render(const ChatTemplate & t, const ordered_json & input) {
    ordered_json messages = input, tools = nullptr, kwargs = ordered_json::object();
    if (input.is_object()) {
        messages = input.value("messages", ordered_json::array());
        tools = input.value("tools", ordered_json());
        kwargs = input.value("kwargs", ordered_json::object());
    }
    (void)t.render(messages, true, kwargs, "<s>", "</s>", tools);
    (void)t.render(messages, false, nullptr, "", "<|im_end|>", tools);
}

}  // namespace

extern "C" int LLVMFuzzerTestOneInput(const uint8_t * data, size_t size) {
    const std::string_view input = tinkerd::fuzz::as_view(data, size);
    const auto [source, messages] = tinkerd::fuzz::split_nul(input);
    if (source.size() == input.size()) {
        render(qwen3(), parse(input));
        return 0;
    }
    auto compiled = ChatTemplate::compile(std::string(source));
    if (compiled.ok()) {
        render(*compiled, parse(messages));
    }
    return 0;
}
