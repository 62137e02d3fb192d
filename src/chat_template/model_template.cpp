// load_model_chat_template (model_template.h): tokenizer_config.json -> compiled template and the
// special-token strings ("bos_token": "<s>" or {"content": "<s>", ...}).
#include "chat_template/model_template.h"

#include <fstream>
#include <sstream>

#include "common/json_depth.h"

namespace tinkerd::chat_template {

namespace {

std::string token_string(const nlohmann::json & config, const char * key) {
    const auto it = config.find(key);
    if (it == config.end()) {
        return "";
    }
    if (it->is_string()) {
        return it->get<std::string>();
    }
    if (it->is_object() && it->contains("content") && (*it)["content"].is_string()) {
        return (*it)["content"].get<std::string>();
    }
    return "";
}

}  // namespace

ModelChatTemplate load_model_chat_template(const std::string & model_dir) {
    ModelChatTemplate out;
    const std::string path = model_dir + "/tokenizer_config.json";
    std::ifstream file(path);
    if (!file) {
        out.missing_reason = "the model directory has no tokenizer_config.json, so no chat template";
        return out;
    }
    std::stringstream text;
    text << file.rdbuf();
    if (!check_json_depth(text.str(), path).ok()) {
        out.missing_reason = path + " nests JSON deeper than the limit";
        return out;
    }
    const nlohmann::json config = nlohmann::json::parse(text.str(), nullptr, false);
    if (config.is_discarded() || !config.is_object()) {
        out.missing_reason = path + " is not a JSON object";
        return out;
    }
    out.bos_token = token_string(config, "bos_token");
    out.eos_token = token_string(config, "eos_token");
    auto source = chat_template_source(config);
    if (!source.ok()) {
        out.missing_reason = source.error().message;
        return out;
    }
    auto compiled = ChatTemplate::compile(*source);
    if (!compiled.ok()) {
        out.missing_reason = "the chat template in " + path + " does not compile: " + compiled.error().message;
        return out;
    }
    out.chat_template = std::make_shared<const ChatTemplate>(std::move(compiled).value());
    return out;
}

}  // namespace tinkerd::chat_template
