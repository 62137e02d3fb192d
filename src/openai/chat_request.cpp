// POST /v1/chat/completions bodies: messages (roles; text content normalised to one string, image_url data:
// parts kept as {"type": "image"} parts beside req.images), tools, chat_template_kwargs, add_generation_prompt,
// logprobs / top_logprobs and the max_completion_tokens
// over max_tokens precedence. Shared sampling parameters are read by read_common().
#include <array>
#include <limits>
#include <string>

#include "openai/openai_request.h"
#include "openai/request_fields.h"

namespace tinkerd::openai {

namespace {

using detail::invalid_type;
using detail::invalid_value;
using detail::json;
using detail::MaybeError;
using detail::missing_param;

constexpr std::array<const char *, 5> kRoles = {"system", "developer", "user", "assistant", "tool"};
constexpr int64_t kMaxTopLogprobs = 20;

bool known_role(const std::string & role) {
    for (const char * r : kRoles) {
        if (role == r) {
            return true;
        }
    }
    return false;
}

// Reads the string field `key` of `obj` as a required parameter named `where + "." + key`.
MaybeError required_string(const json & obj, const std::string & key, const std::string & where, std::string & out) {
    const json * v = detail::find_value(obj, key);
    if (v == nullptr) {
        return missing_param(where + "." + key);
    }
    return detail::read_string(obj, key, out, where + ".");
}

// {"type": "image_url", "image_url": {"url": "data:image/png;base64,..."}} (or "url" as a string) -> an
// ImagePart; any other URL scheme or media type is refused by name.
MaybeError read_image_part(const json & part, const std::string & at, std::vector<ImagePart> & images) {
    const json * image_url = detail::find_value(part, "image_url");
    if (image_url == nullptr) {
        return missing_param(at + ".image_url");
    }
    std::string url;
    if (image_url->is_string()) {
        url = image_url->get<std::string>();
    } else if (image_url->is_object()) {
        OPENAI_TRY(required_string(*image_url, "url", at + ".image_url", url));
    } else {
        return invalid_type(at + ".image_url", "an object with a url", *image_url);
    }
    const std::string where = at + ".image_url.url";
    const size_t comma = url.find(',');
    if (url.rfind("data:", 0) != 0 || comma == std::string::npos) {
        return invalid_value(where,
                             "Only data: URLs are accepted (data:image/png;base64,... or image/jpeg); "
                             "this server does not fetch remote images.");
    }
    const std::string header = url.substr(5, comma - 5);
    std::string format;
    if (header == "image/png;base64") {
        format = "png";
    } else if (header == "image/jpeg;base64" || header == "image/jpg;base64") {
        format = "jpeg";
    } else {
        return invalid_value(where, "Unsupported data URL '" + header.substr(0, 64) +
                                        "': send image/png or image/jpeg, base64-encoded.");
    }
    images.push_back({url.substr(comma + 1), format, at});
    return std::nullopt;
}

// Text parts joined into one string; with image_url parts, a list of {"type": "text"|"image"} parts
// instead (the chat template places the image tokens), the images appended to `images`.
MaybeError normalise_parts(const json & parts, const std::string & where, json & out, std::vector<ImagePart> & images) {
    std::string text;
    json listed = json::array();
    const size_t images_before = images.size();
    for (size_t j = 0; j < parts.size(); ++j) {
        const json & part = parts[j];
        std::string at = where + "[" + std::to_string(j) + "]";
        if (!part.is_object()) {
            return invalid_type(at, "an object", part);
        }
        std::string type;
        OPENAI_TRY(required_string(part, "type", at, type));
        if (type == "image_url") {
            OPENAI_TRY(read_image_part(part, at, images));
            listed.push_back({{"type", "image"}});
            continue;
        }
        if (type != "text") {
            return invalid_value(at + ".type",
                                 "Invalid value: '" + type + "'. Supported values are: 'text' and 'image_url'.");
        }
        std::string part_text;
        OPENAI_TRY(required_string(part, "text", at, part_text));
        text += part_text;
        listed.push_back({{"type", "text"}, {"text", std::move(part_text)}});
    }
    out = images.size() > images_before ? std::move(listed) : json(std::move(text));
    return std::nullopt;
}

// Leaves content a string (or a part list with images), or null for an assistant message without content.
MaybeError normalise_content(json & msg, const std::string & role, const std::string & where,
                             std::vector<ImagePart> & images) {
    auto it = msg.find("content");
    if (it == msg.end() || it->is_null()) {
        if (role != "assistant") {
            return missing_param(where + ".content");
        }
        msg["content"] = nullptr;
        return std::nullopt;
    }
    if (it->is_string()) {
        return std::nullopt;
    }
    if (!it->is_array()) {
        return invalid_type(where + ".content", "a string or an array of content parts", *it);
    }
    json normalised;
    OPENAI_TRY(normalise_parts(*it, where + ".content", normalised, images));
    *it = std::move(normalised);
    return std::nullopt;
}

MaybeError check_message(json & msg, const std::string & where, std::vector<ImagePart> & images) {
    if (!msg.is_object()) {
        return invalid_type(where, "an object", msg);
    }
    std::string role;
    OPENAI_TRY(required_string(msg, "role", where, role));
    if (!known_role(role)) {
        return invalid_value(where + ".role", "Invalid value: '" + role +
                                                  "'. Supported values are: 'system', 'developer', 'user', "
                                                  "'assistant', and 'tool'.");
    }
    OPENAI_TRY(normalise_content(msg, role, where, images));
    std::string unused;
    OPENAI_TRY(detail::read_string(msg, "name", unused, where + "."));
    OPENAI_TRY(detail::read_string(msg, "tool_call_id", unused, where + "."));
    const json * calls = detail::find_value(msg, "tool_calls");
    if (calls != nullptr && !calls->is_array()) {
        return invalid_type(where + ".tool_calls", "an array", *calls);
    }
    return std::nullopt;
}

MaybeError read_messages(const json & body, GenerationRequest & req) {
    const json * v = detail::find_value(body, "messages");
    if (v == nullptr) {
        return missing_param("messages");
    }
    if (!v->is_array()) {
        return invalid_type("messages", "an array", *v);
    }
    if (v->empty()) {
        ApiError e = invalid_value("messages",
                                   "Invalid 'messages': empty array. Expected an array with minimum "
                                   "length 1, but got an empty array instead.");
        e.code = "empty_array";
        return e;
    }
    req.messages = *v;
    for (size_t i = 0; i < req.messages.size(); ++i) {
        OPENAI_TRY(check_message(req.messages[i], "messages[" + std::to_string(i) + "]", req.images));
    }
    return std::nullopt;
}

MaybeError check_tool(const json & tool, const std::string & where) {
    if (!tool.is_object()) {
        return invalid_type(where, "an object", tool);
    }
    std::string type;
    OPENAI_TRY(required_string(tool, "type", where, type));
    if (type != "function") {
        return invalid_value(where + ".type", "Invalid value: '" + type + "'. Supported values are: 'function'.");
    }
    const json * fn = detail::find_value(tool, "function");
    if (fn == nullptr) {
        return missing_param(where + ".function");
    }
    if (!fn->is_object()) {
        return invalid_type(where + ".function", "an object", *fn);
    }
    std::string name;
    return required_string(*fn, "name", where + ".function", name);
}

// tools: null when absent, null or [] (an empty list means no tools); otherwise the array as given.
MaybeError read_tools(const json & body, GenerationRequest & req) {
    req.tools = nullptr;
    const json * v = detail::find_value(body, "tools");
    if (v == nullptr) {
        return std::nullopt;
    }
    if (!v->is_array()) {
        return invalid_type("tools", "an array", *v);
    }
    for (size_t i = 0; i < v->size(); ++i) {
        OPENAI_TRY(check_tool((*v)[i], "tools[" + std::to_string(i) + "]"));
    }
    if (!v->empty()) {
        req.tools = *v;
    }
    return std::nullopt;
}

MaybeError read_template_options(const json & body, GenerationRequest & req) {
    req.chat_template_kwargs = json::object();
    const json * v = detail::find_value(body, "chat_template_kwargs");
    if (v != nullptr) {
        if (!v->is_object()) {
            return invalid_type("chat_template_kwargs", "an object", *v);
        }
        req.chat_template_kwargs = *v;
    }
    return detail::read_bool(body, "add_generation_prompt", req.add_generation_prompt);
}

MaybeError read_chat_logprobs(const json & body, GenerationRequest & req) {
    OPENAI_TRY(detail::read_bool(body, "logprobs", req.logprobs));
    OPENAI_TRY(detail::read_int(body, "top_logprobs", 0, kMaxTopLogprobs, req.top_logprobs));
    if (req.top_logprobs > 0 && !req.logprobs) {
        return invalid_value("top_logprobs",
                             "Invalid value for 'top_logprobs': 'logprobs' must be set to true when "
                             "'top_logprobs' is used.");
    }
    return std::nullopt;
}

MaybeError read_chat_max_tokens(const json & body, GenerationRequest & req) {
    constexpr int64_t kMax = std::numeric_limits<int64_t>::max();
    std::optional<int64_t> legacy;
    std::optional<int64_t> current;
    OPENAI_TRY(detail::read_optional_int(body, "max_tokens", 0, kMax, legacy));
    OPENAI_TRY(detail::read_optional_int(body, "max_completion_tokens", 0, kMax, current));
    req.max_tokens = current ? current : legacy;
    return std::nullopt;
}

MaybeError read_chat(const json & body, GenerationRequest & req) {
    OPENAI_TRY(detail::read_common(body, req));
    OPENAI_TRY(read_messages(body, req));
    OPENAI_TRY(read_tools(body, req));
    OPENAI_TRY(read_template_options(body, req));
    OPENAI_TRY(read_chat_logprobs(body, req));
    return read_chat_max_tokens(body, req);
}

}  // namespace

ParseResult parse_chat_request(const nlohmann::json & body) {
    if (!body.is_object()) {
        return detail::body_not_object(body);
    }
    GenerationRequest req;
    req.chat = true;
    if (MaybeError e = read_chat(body, req)) {
        return std::move(*e);
    }
    return req;
}

}  // namespace tinkerd::openai
