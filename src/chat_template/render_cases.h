// Test-only helpers shared by the chat template tests: render a template over two default messages and
// compare against strings that Python Jinja2 3.1 rendered with transformers' settings.
#pragma once

#include <string>
#include <vector>

#include <gtest/gtest.h>
#include <nlohmann/json.hpp>

#include "chat_template/chat_template.h"

namespace tinkerd::chat_template {

inline nlohmann::json default_messages() {
    return nlohmann::json::array(
        {{{"role", "system"}, {"content", "Be brief."}}, {{"role", "user"}, {"content", "Hi there"}}});
}

// Renders with the two default messages, bos "<s>", eos "</s>"; a failure comes back as "ERROR: message".
inline std::string render(const std::string & source, const nlohmann::json & extra = nlohmann::json::object()) {
    auto tmpl = ChatTemplate::compile(source);
    if (!tmpl.ok()) {
        return "ERROR: " + tmpl.error().message;
    }
    auto out = tmpl->render(default_messages(), false, extra, "<s>", "</s>");
    return out.ok() ? out.value() : "ERROR: " + out.error().message;
}

// Each expected string is what Python Jinja2 3.1 renders with transformers' settings.
struct Case {
    const char * source;
    const char * expected;
};

inline void expect_renders(const std::vector<Case> & cases) {
    for (const Case & c : cases) {
        EXPECT_EQ(render(c.source), c.expected) << "template: " << c.source;
    }
}

}  // namespace tinkerd::chat_template
