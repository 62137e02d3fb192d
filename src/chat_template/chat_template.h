// Hugging Face chat templates: a small interpreter of the Jinja2 subset they use, matching Python
// Jinja2 3.1 as transformers' apply_chat_template configures it (trim_blocks, lstrip_blocks,
// loopcontrols, immutable sandbox, transformers' tojson / raise_exception / strftime_now). Torch-free.
#pragma once

#include <memory>
#include <string>

#include <nlohmann/json.hpp>

#include "common/status.h"

namespace tinkerd::chat_template {

struct Program;

class ChatTemplate {
  public:
    // Compiles a template once; syntax errors (INVALID_ARGUMENT) name the line and column.
    static Result<ChatTemplate> compile(const std::string & source);

    // Renders a conversation. Thread-safe: a compiled template may render from many threads at once.
    //   messages: JSON array of {role, content, ...}; content is a string, a list of
    //             {"type": "text", "text": ...} parts, or null (assistant tool-call turns).
    //   extra:    more top-level variables (chat_template_kwargs, e.g. {"enable_thinking": false}); an
    //             object or null. It may override bos_token/eos_token but not messages, tools, documents
    //             or add_generation_prompt.
    //   tools:    JSON array or null (then `tools` is none in the template, as in transformers).
    // Errors are INVALID_ARGUMENT: raise_exception("msg") in the template gives exactly "msg"; other
    // failures (undefined values misused, type errors) name the template line.
    Result<std::string> render(const nlohmann::json & messages, bool add_generation_prompt,
                               const nlohmann::json & extra, const std::string & bos_token,
                               const std::string & eos_token, const nlohmann::json & tools = nullptr) const;
    // The same for ordered JSON: object keys keep the client's order (what tojson prints for tools), where
    // nlohmann::json sorts them.
    Result<std::string> render(const nlohmann::ordered_json & messages, bool add_generation_prompt,
                               const nlohmann::ordered_json & extra, const std::string & bos_token,
                               const std::string & eos_token, const nlohmann::ordered_json & tools = nullptr) const;

  private:
    explicit ChatTemplate(std::shared_ptr<const Program> program) : program_(std::move(program)) {}
    template <typename Json>
    Result<std::string> render_json(const Json & messages, bool add_generation_prompt, const Json & extra,
                                    const std::string & bos_token, const std::string & eos_token,
                                    const Json & tools) const;

    std::shared_ptr<const Program> program_;
};

// The "chat_template" of a tokenizer_config.json object: a string, or a list of {name, template} (the one
// named "default" is used). Absent: NOT_FOUND naming that the model has no chat template.
Result<std::string> chat_template_source(const nlohmann::json & tokenizer_config);

}  // namespace tinkerd::chat_template
