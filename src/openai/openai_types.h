// Types shared by the OpenAI-compatible request parsers and response builders (namespace tinkerd::openai):
// the error a request gets back, and one parsed /v1/completions or /v1/chat/completions request.
// Torch-free and HTTP-free; the api layer turns an ApiError into a response with error_body().
#pragma once

#include <cstdint>
#include <optional>
#include <string>
#include <variant>
#include <vector>

#include <nlohmann/json.hpp>

namespace tinkerd::openai {

// An OpenAI-style error. Empty `param` / `code` are sent as JSON null.
struct ApiError {
    int status = 400;
    std::string message;
    std::string type = "invalid_request_error";
    std::string param;
    std::string code;
};

// {"error": {"message": ..., "type": ..., "param": ... | null, "code": ... | null}}, compact, never throws
// (invalid UTF-8 in the message is replaced by U+FFFD).
std::string error_body(const ApiError & error);

// One prompt of a completions request: text, or token ids when the request sent integers.
struct PromptInput {
    bool is_tokens = false;
    std::string text;
    std::vector<int64_t> tokens;
};

// A chat message's {"type": "image_url", "image_url": {"url": "data:image/png;base64,..."}} part: only data:
// URLs (this server fetches nothing). The message keeps a {"type": "image"} part in its place for the
// chat template; the api layer decodes the base64 and prepares the image for a vision model.
struct ImagePart {
    std::string base64;  // the URL's payload
    std::string format;  // "png" | "jpeg"
    std::string where;   // "messages[0].content[1]", for errors
};

// A validated generation request. Fields not used by an endpoint keep their defaults.
struct GenerationRequest {
    bool chat = false;
    std::string model;
    nlohmann::json messages;              // chat: each message's content is a string, null (assistant), or
                                          // with images a list of {"type": "text"|"image"} parts
    std::vector<ImagePart> images;        // chat: image_url parts in message order
    nlohmann::json tools;                 // chat: the array as given, or null (absent, null or [])
    nlohmann::json chat_template_kwargs;  // chat: an object, {} by default
    bool add_generation_prompt = true;    // chat: vLLM-style extension
    std::vector<PromptInput> prompts;     // completions: one entry per prompt (string | [string] | [int] | [[int]])
    int64_t n = 1;                        // 1..128
    std::optional<int64_t> max_tokens;    // >= 0; chat: max_completion_tokens wins; completions: 16 by default
    double temperature = 1.0;             // 0..2
    double top_p = 1.0;                   // (0, 1]
    int64_t top_k = -1;                   // extension: -1 (off) or >= 1
    std::optional<uint64_t> seed;         // any integer; negative values are cast
    std::vector<std::string> stop;        // at most 4 non-empty strings
    bool logprobs = false;                // chat: bool; completions: true when the integer `logprobs` is given
    int64_t top_logprobs = 0;             // chat: 0..20 (needs logprobs); completions: the `logprobs` integer 0..5
    bool echo = false;                    // completions
    bool stream = false;
    bool include_usage = false;  // stream_options.include_usage
    std::string user;
};

// Either the request or the error to answer with: `if (auto * e = std::get_if<ApiError>(&r)) ...`.
using ParseResult = std::variant<GenerationRequest, ApiError>;

}  // namespace tinkerd::openai
