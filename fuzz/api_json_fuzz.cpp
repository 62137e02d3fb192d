// api_json_fuzz: arbitrary bytes as a Tinker API request body -> api::parse_json_body, the typed field
// getters the handlers use (on the keys they read), tinker:// paths and checkpoint names from string
// fields, parse_optimizer_config, the legacy JSON forward_backward decoder and SDK 0.38's target_prompt_logprobs
// TensorData decoder (wire).
#include <cstddef>
#include <cstdint>
#include <string>

#include "api/json_util.h"
#include "fuzz_util.h"
#include "wire/forward_backward_codec.h"
#include "wire/prompt_extras_codec.h"

namespace {

using tinkerd::api::json;

// See openai_request_fuzz.cpp: deeper bodies are the known crash, skipped until the api layer limits them.
const char * const KEYS[] = {"model_id",    "base_model",    "path",          "seq_id",    "rank",        "name",
                             "lora_config", "user_metadata", "learning_rate", "train_mlp", "ttl_seconds", "type"};

void getters(const json & obj, const std::string & where) {
    using namespace tinkerd::api;
    for (const char * key : KEYS) {
        (void)get_string(obj, key, where);
        (void)get_optional_string(obj, key, where);
        (void)get_int(obj, key, where);
        (void)get_optional_int(obj, key, where);
        (void)get_number(obj, key, 0.5, where);
        (void)get_bool(obj, key, false, where);
        (void)get_string_map(obj, key, where);
    }
}

void paths(const json & body) {
    using namespace tinkerd::api;
    for (const char * key : KEYS) {
        auto text = get_string(body, key);
        if (!text.ok()) {
            continue;
        }
        auto path = parse_tinker_path(*text);
        if (path.ok() && !parse_tinker_path(path->str()).ok()) {
            __builtin_trap();  // a parsed path prints as one that parses again
        }
        (void)parse_checkpoint_id("run", *text);
        (void)validate_checkpoint_name(*text);
    }
}

}  // namespace

extern "C" int LLVMFuzzerTestOneInput(const uint8_t * data, size_t size) {
    const std::string body_text(tinkerd::fuzz::as_view(data, size));
    // parse_json_body checks the nesting itself and turns every nlohmann exception (incl. the numbers out of
    // double's range this target found, {"seq_id": -1e400}) into a 400; anything thrown here is a bug.
    tinkerd::Result<json> body = tinkerd::api::parse_json_body(body_text);
    if (!body.ok()) {
        return 0;
    }
    getters(*body, "");
    if (body->contains("lora_config") && (*body)["lora_config"].is_object()) {
        getters((*body)["lora_config"], "lora_config");
    }
    paths(*body);
    (void)tinkerd::api::parse_optimizer_config(*body);
    if (body->contains("target_prompt_logprobs")) {
        (void)tinkerd::wire::decode_target_prompt_ids((*body)["target_prompt_logprobs"], 1000, 1000);
    }
    (void)tinkerd::api::body_digest(body_text);
    (void)tinkerd::wire::decode_forward_backward_json(*body);
    return 0;
}
