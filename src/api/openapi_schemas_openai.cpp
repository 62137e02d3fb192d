// JSON Schemas (2020-12) of the OpenAI-compatible bodies under /v1/ and /oai/api/v1/, written from the
// parsers in src/openai/ (chat_request.cpp, completion_request.cpp, request_fields.cpp: null counts as
// absent, unknown parameters are ignored) and the response builders (openai_response.h, openai_errors.cpp).
#include "api/openapi_schemas.h"

namespace tinkerd::api::detail {

namespace {

const char * const OPENAI_REQUEST_SCHEMAS = R"json({
  "OpenAIError": {"type": "object", "required": ["error"],
    "properties": {"error": {"type": "object", "required": ["message", "type", "param", "code"],
      "properties": {"message": {"type": "string"}, "type": {"type": "string"},
        "param": {"type": ["string", "null"]}, "code": {"type": ["string", "null"]}}}}},
  "OpenAIStop": {"anyOf": [{"type": "null"}, {"type": "string", "minLength": 1},
    {"type": "array", "maxItems": 4, "items": {"type": "string", "minLength": 1}}]},
  "OpenAICommon": {"type": "object", "required": ["model"],
    "description": "Integers must be written without a fraction (2, not 2.0), as OpenAI requires",
    "properties": {"model": {"type": "string",
        "description": "A base model, a tinker:// sampler checkpoint, a loaded training run id or a sampler id"},
      "n": {"type": ["integer", "null"], "minimum": 1, "maximum": 128},
      "temperature": {"type": ["number", "null"], "minimum": 0, "maximum": 2},
      "top_p": {"type": ["number", "null"], "exclusiveMinimum": 0, "maximum": 1},
      "top_k": {"anyOf": [{"type": "null"}, {"const": -1}, {"type": "integer", "minimum": 1}]},
      "seed": {"type": ["integer", "null"]},
      "stop": {"$ref": "#/components/schemas/OpenAIStop"},
      "stream": {"type": ["boolean", "null"]},
      "stream_options": {"type": ["object", "null"], "description": "Only with stream: true",
        "properties": {"include_usage": {"type": ["boolean", "null"]}}},
      "user": {"type": ["string", "null"]}}},
  "ChatMessage": {"type": "object", "required": ["role"],
    "properties": {"role": {"enum": ["system", "developer", "user", "assistant", "tool"]},
      "content": {"anyOf": [{"type": "null"}, {"type": "string"},
        {"type": "array", "items": {"type": "object", "required": ["type", "text"],
          "properties": {"type": {"const": "text"}, "text": {"type": "string"}}}}],
        "description": "Required (non-null) except for assistant messages"},
      "name": {"type": ["string", "null"]}, "tool_call_id": {"type": ["string", "null"]},
      "tool_calls": {"type": ["array", "null"]}}},
  "ChatTool": {"type": "object", "required": ["type", "function"],
    "properties": {"type": {"const": "function"},
      "function": {"type": "object", "required": ["name"], "properties": {"name": {"type": "string"}}}}},
  "ChatCompletionRequest": {"allOf": [{"$ref": "#/components/schemas/OpenAICommon"}],
    "type": "object", "required": ["model", "messages"],
    "properties": {"messages": {"type": "array", "minItems": 1, "items": {"$ref": "#/components/schemas/ChatMessage"}},
      "tools": {"type": ["array", "null"], "items": {"$ref": "#/components/schemas/ChatTool"}},
      "chat_template_kwargs": {"type": ["object", "null"]},
      "add_generation_prompt": {"type": ["boolean", "null"]},
      "logprobs": {"type": ["boolean", "null"]},
      "top_logprobs": {"type": ["integer", "null"], "minimum": 0, "maximum": 20,
        "description": "Needs logprobs: true when > 0"},
      "max_tokens": {"type": ["integer", "null"], "minimum": 0},
      "max_completion_tokens": {"type": ["integer", "null"], "minimum": 0}}},
  "CompletionPrompt": {"anyOf": [{"type": "string"},
    {"type": "array", "minItems": 1, "items": {"type": "string"}},
    {"type": "array", "minItems": 1, "items": {"type": "integer", "minimum": 0}},
    {"type": "array", "minItems": 1,
      "items": {"type": "array", "minItems": 1, "items": {"type": "integer", "minimum": 0}}}]},
  "CompletionRequest": {"allOf": [{"$ref": "#/components/schemas/OpenAICommon"}],
    "type": "object", "required": ["model", "prompt"],
    "properties": {"prompt": {"$ref": "#/components/schemas/CompletionPrompt"},
      "logprobs": {"type": ["integer", "null"], "minimum": 0, "maximum": 5},
      "echo": {"type": ["boolean", "null"]},
      "max_tokens": {"type": ["integer", "null"], "minimum": 0, "description": "16 when absent"}}}
})json";

const char * const OPENAI_RESPONSE_SCHEMAS = R"json({
  "Usage": {"type": "object", "required": ["prompt_tokens", "completion_tokens", "total_tokens"],
    "properties": {"prompt_tokens": {"type": "integer"}, "completion_tokens": {"type": "integer"},
      "total_tokens": {"type": "integer"}}},
  "FinishReason": {"enum": ["stop", "length", null]},
  "ChatCompletion": {"type": "object", "required": ["id", "object", "created", "model", "choices"],
    "properties": {"id": {"type": "string"}, "object": {"const": "chat.completion"},
      "created": {"type": "integer"}, "model": {"type": "string"},
      "system_fingerprint": {"type": "null"}, "usage": {"$ref": "#/components/schemas/Usage"},
      "choices": {"type": "array", "items": {"type": "object", "required": ["index", "message", "finish_reason"],
        "properties": {"index": {"type": "integer"},
          "message": {"type": "object", "required": ["role", "content"],
            "properties": {"role": {"const": "assistant"}, "content": {"type": ["string", "null"]},
              "refusal": {"type": "null"}}},
          "logprobs": {"type": ["object", "null"]},
          "finish_reason": {"$ref": "#/components/schemas/FinishReason"}}}}}},
  "Completion": {"type": "object", "required": ["id", "object", "created", "model", "choices"],
    "properties": {"id": {"type": "string"}, "object": {"const": "text_completion"},
      "created": {"type": "integer"}, "model": {"type": "string"},
      "system_fingerprint": {"type": "null"}, "usage": {"$ref": "#/components/schemas/Usage"},
      "choices": {"type": "array", "items": {"type": "object", "required": ["index", "text", "finish_reason"],
        "properties": {"index": {"type": "integer"}, "text": {"type": "string"},
          "logprobs": {"type": ["object", "null"]},
          "finish_reason": {"$ref": "#/components/schemas/FinishReason"}}}}}},
  "ModelList": {"type": "object", "required": ["object", "data"],
    "properties": {"object": {"const": "list"},
      "data": {"type": "array", "items": {"type": "object", "required": ["id", "object", "created", "owned_by"],
        "properties": {"id": {"type": "string"}, "object": {"const": "model"}, "created": {"type": "integer"},
          "owned_by": {"type": "string"},
          "root": {"type": "string", "description": "tinkerd: the served base model behind this id"},
          "chat_template": {"type": "boolean",
            "description": "tinkerd: whether chat completions can render for it (the base model has a chat template)"}}}}}}
})json";

}  // namespace

std::vector<const char *> openai_schema_texts() {
    return {OPENAI_REQUEST_SCHEMAS, OPENAI_RESPONSE_SCHEMAS};
}

}  // namespace tinkerd::api::detail
