// A served model's chat formatting, read from its directory's tokenizer_config.json: the compiled
// chat_template and the bos/eos token strings the template may use. A model without a template (or
// with one that does not compile) keeps the reason, which /v1/chat/completions reports as a 400.
#pragma once

#include <memory>
#include <string>

#include "chat_template/chat_template.h"

namespace tinkerd::chat_template {

struct ModelChatTemplate {
    std::shared_ptr<const ChatTemplate> chat_template;  // nullptr: see missing_reason
    std::string missing_reason;
    std::string bos_token, eos_token;  // "" when the config names none
};

// Never fails: problems end up in missing_reason.
ModelChatTemplate load_model_chat_template(const std::string & model_dir);

}  // namespace tinkerd::chat_template
