// The public API (see chat_template.h): compiling, setting up the variables transformers passes to a
// chat template, turning interpreter errors into Results, and reading chat_template from
// tokenizer_config.json.
#include "chat_template/chat_template.h"

#include <new>
#include <stdexcept>

#include "chat_template/interpreter.h"
#include "chat_template/syntax.h"

namespace tinkerd::chat_template {

Result<ChatTemplate> ChatTemplate::compile(const std::string & source) {
    try {
        return ChatTemplate(std::make_shared<const Program>(parse_template(source)));
    } catch (const TemplateError & e) {
        return invalid_argument(e.message);
    }
}

Result<std::string> ChatTemplate::render(const nlohmann::json & messages, bool add_generation_prompt,
                                         const nlohmann::json & extra, const std::string & bos_token,
                                         const std::string & eos_token, const nlohmann::json & tools) const {
    return render_json(messages, add_generation_prompt, extra, bos_token, eos_token, tools);
}

Result<std::string> ChatTemplate::render(const nlohmann::ordered_json & messages, bool add_generation_prompt,
                                         const nlohmann::ordered_json & extra, const std::string & bos_token,
                                         const std::string & eos_token, const nlohmann::ordered_json & tools) const {
    return render_json(messages, add_generation_prompt, extra, bos_token, eos_token, tools);
}

namespace {

// The variables transformers' render_jinja_template provides; extra may override the special tokens.
template <typename Json>
Result<Scope> make_globals(const Json & messages, bool add_generation_prompt, const Json & extra,
                           const std::string & bos_token, const std::string & eos_token, const Json & tools) {
    if (!messages.is_array()) {
        return invalid_argument("messages must be a JSON array");
    }
    if (!tools.is_null() && !tools.is_array()) {
        return invalid_argument("tools must be a JSON array or null");
    }
    if (!extra.is_null() && !extra.is_object()) {
        return invalid_argument("chat_template_kwargs must be a JSON object");
    }
    Scope globals;
    globals.vars["bos_token"] = Value::string(bos_token);
    globals.vars["eos_token"] = Value::string(eos_token);
    if (extra.is_object()) {
        for (const auto & [key, value] : extra.items()) {
            if (key == "messages" || key == "tools" || key == "documents" || key == "add_generation_prompt") {
                return invalid_argument("chat_template_kwargs may not set '" + key + "'");
            }
            globals.vars[key] = from_json(value);
        }
    }
    globals.vars["messages"] = from_json(messages);
    globals.vars["tools"] = from_json(tools);
    globals.vars["documents"] = Value::none();
    globals.vars["add_generation_prompt"] = Value::boolean(add_generation_prompt);
    return globals;
}

}  // namespace

template <typename Json>
Result<std::string> ChatTemplate::render_json(const Json & messages, bool add_generation_prompt, const Json & extra,
                                              const std::string & bos_token, const std::string & eos_token,
                                              const Json & tools) const {
    auto globals = make_globals(messages, add_generation_prompt, extra, bos_token, eos_token, tools);
    if (!globals.ok()) {
        return globals.error();
    }
    std::string out;
    Interpreter interpreter(globals.value(), out);
    try {
        interpreter.exec(program_->body);
    } catch (const TemplateError & e) {
        if (e.raised) {
            return invalid_argument(e.message);
        }
        return invalid_argument("chat template error at line " + std::to_string(interpreter.line()) + ": " + e.message);
    } catch (const std::length_error &) {
        return invalid_argument("the chat template's output is too large");
    } catch (const std::bad_alloc &) {
        return invalid_argument("the chat template's output is too large");
    }
    return out;
}

Result<std::string> chat_template_source(const nlohmann::json & tokenizer_config) {
    if (!tokenizer_config.is_object()) {
        return invalid_argument("tokenizer_config.json is not a JSON object");
    }
    const auto it = tokenizer_config.find("chat_template");
    if (it == tokenizer_config.end() || it->is_null()) {
        return not_found("the model has no chat template (tokenizer_config.json has no \"chat_template\")");
    }
    if (it->is_string()) {
        return it->get<std::string>();
    }
    if (!it->is_array()) {
        return invalid_argument(
            "tokenizer_config.json: \"chat_template\" must be a string or a list of {name, template}");
    }
    std::string names;
    for (const auto & entry : *it) {
        const auto name = entry.is_object() ? entry.find("name") : entry.end();
        const auto text = entry.is_object() ? entry.find("template") : entry.end();
        if (name == entry.end() || text == entry.end() || !name->is_string() || !text->is_string()) {
            return invalid_argument("tokenizer_config.json: each named chat template needs a string name and template");
        }
        if (*name == "default") {
            return text->get<std::string>();
        }
        names += (names.empty() ? "" : ", ") + name->get<std::string>();
    }
    return not_found("the model has no default chat template (tokenizer_config.json names only: " + names + ")");
}

}  // namespace tinkerd::chat_template
