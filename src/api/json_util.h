// Small helpers shared by the API handlers: typed JSON field access with errors that name the field,
// error bodies and status codes, ISO 8601 times, tinker:// paths, checkpoint names and body digests.
#pragma once

#include <cstdint>
#include <optional>
#include <string>

#include <nlohmann/json.hpp>

#include "common/status.h"
#include "http/server.h"

namespace tinkerd::api {

using json = nlohmann::json;

// Parses a JSON request body; an empty body is {}. Errors name the parse position.
Result<json> parse_json_body(const std::string & body);

// Field access. `required` fields that are missing, and present fields of the wrong type, are
// INVALID_ARGUMENT errors naming the field ("lora_config.rank: expected an integer").
Result<std::string> get_string(const json & obj, const std::string & key, const std::string & where = "");
Result<std::optional<std::string>> get_optional_string(const json & obj, const std::string & key,
                                                       const std::string & where = "");
Result<int64_t> get_int(const json & obj, const std::string & key, const std::string & where = "");
Result<std::optional<int64_t>> get_optional_int(const json & obj, const std::string & key,
                                                const std::string & where = "");
Result<double> get_number(const json & obj, const std::string & key, double fallback, const std::string & where = "");
Result<bool> get_bool(const json & obj, const std::string & key, bool fallback, const std::string & where = "");
// A JSON object of string values ({} when absent): user_metadata. Other value types are refused, and so are
// more than MAX_METADATA_KEYS keys, empty or longer keys, and longer values (the store keeps it whole).
inline constexpr size_t MAX_METADATA_KEYS = 100;
inline constexpr size_t MAX_METADATA_KEY_BYTES = 256;
inline constexpr size_t MAX_METADATA_VALUE_BYTES = 4096;
Result<json> get_string_map(const json & obj, const std::string & key, const std::string & where = "");

// The first error among several results, or nullptr when all are ok. Handlers read every field first,
// then report the first bad one: `if (const Error * e = first_error(a, b, c)) return *e;`.
template <typename... Results>
const Error * first_error(const Results &... results) {
    const Error * found = nullptr;
    ((found = (found == nullptr && !results.ok()) ? &results.error() : found), ...);
    return found;
}

// HTTP status for an error kind: 400, 404, 413 or 500.
int http_status(ErrorKind kind);
// {"detail": message, "code": "invalid_argument"|...} with the status of the error's kind.
http::Response error_response(const Error & error);
http::Response error_response(int status, const std::string & message);
http::Response json_response(const json & body, int status = 200);

// Seconds since the epoch, and their ISO 8601 UTC form ("2026-11-22T16:40:56.123Z").
double now_seconds();
std::string iso_time(double seconds);
std::string http_date(double seconds);  // "Sun, 22 Nov 2026 16:40:56 GMT"

// tinker://<run_id>/<kind>/<name> with kind "weights" or "sampler_weights" and a name without '/'.
struct TinkerPath {
    std::string run_id;
    std::string kind;  // "weights" or "sampler_weights"
    std::string name;
    std::string checkpoint_id() const { return kind + "/" + name; }
    std::string str() const { return "tinker://" + run_id + "/" + kind + "/" + name; }
};
Result<TinkerPath> parse_tinker_path(const std::string & path);
// "weights/<name>" or "sampler_weights/<name>" -> the parts; other forms are INVALID_ARGUMENT.
Result<TinkerPath> parse_checkpoint_id(const std::string & run_id, const std::string & checkpoint_id);
// Checkpoint names: 1-128 of [A-Za-z0-9._-], not "." or "..".
Result<void> validate_checkpoint_name(const std::string & name);

// A hex digest of a request body (64-bit FNV-1a and the length), for idempotent resends.
std::string body_digest(const std::string & body);
// A random hex string of n_chars characters.
std::string random_hex(size_t n_chars);

// Finite doubles only: non-finite values become null (JSON has no NaN; the SDK's parser rejects it).
json finite_or_null(double value);

// SDK 0.38 optimizer selection (create_model / load_weights "optimizer_config"): "adamw" or "dimuon" (version 1),
// nullopt when absent or null; another family or version is UNSUPPORTED, named.
Result<std::optional<std::string>> parse_optimizer_config(const json & body,
                                                          const std::string & key = "optimizer_config");
// A run's optimizer as the SDK's optimizer_config.
json optimizer_config_json(const std::string & optimizer);

}  // namespace tinkerd::api
