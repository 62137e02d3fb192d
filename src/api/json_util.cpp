// JSON field access, error responses, times, tinker:// paths and digests for the API handlers.
#include "api/json_util.h"

#include <algorithm>
#include <chrono>
#include <cmath>
#include <cstdio>
#include <ctime>
#include <random>

#include "common/json_depth.h"
#include "common/redact.h"

namespace tinkerd::api {

namespace {

std::string field_name(const std::string & where, const std::string & key) {
    return where.empty() ? key : where + "." + key;
}

Error type_error(const std::string & where, const std::string & key, const char * expected) {
    return invalid_argument(field_name(where, key) + ": expected " + expected);
}

}  // namespace

Result<json> parse_json_body(const std::string & body) {
    if (body.empty()) {
        return json::object();
    }
    TRY_STATUS(check_json_depth(body, "request body"));
    try {
        json parsed = json::parse(body);
        if (!parsed.is_object()) {
            return invalid_argument("request body must be a JSON object");
        }
        return parsed;
    } catch (const json::exception & e) {  // parse errors, and numbers out of double's range (1e999)
        return invalid_argument(std::string("malformed JSON body: ") + e.what());
    }
}

Result<std::string> get_string(const json & obj, const std::string & key, const std::string & where) {
    auto it = obj.find(key);
    if (it == obj.end() || it->is_null()) {
        return invalid_argument(field_name(where, key) + ": required");
    }
    if (!it->is_string()) {
        return type_error(where, key, "a string");
    }
    return it->get<std::string>();
}

Result<std::optional<std::string>> get_optional_string(const json & obj, const std::string & key,
                                                       const std::string & where) {
    auto it = obj.find(key);
    if (it == obj.end() || it->is_null()) {
        return std::optional<std::string>();
    }
    if (!it->is_string()) {
        return type_error(where, key, "a string");
    }
    return std::optional<std::string>(it->get<std::string>());
}

Result<int64_t> get_int(const json & obj, const std::string & key, const std::string & where) {
    auto value = get_optional_int(obj, key, where);
    if (!value.ok()) {
        return value.error();
    }
    if (!value->has_value()) {
        return invalid_argument(field_name(where, key) + ": required");
    }
    return **value;
}

Result<std::optional<int64_t>> get_optional_int(const json & obj, const std::string & key, const std::string & where) {
    auto it = obj.find(key);
    if (it == obj.end() || it->is_null()) {
        return std::optional<int64_t>();
    }
    if (it->is_number_integer()) {
        return std::optional<int64_t>(it->get<int64_t>());
    }
    if (it->is_number_float()) {
        const double v = it->get<double>();
        if (std::isfinite(v) && v == std::floor(v) && std::fabs(v) < 9e15) {
            return std::optional<int64_t>(static_cast<int64_t>(v));
        }
    }
    return type_error(where, key, "an integer");
}

Result<double> get_number(const json & obj, const std::string & key, double fallback, const std::string & where) {
    auto it = obj.find(key);
    if (it == obj.end() || it->is_null()) {
        return fallback;
    }
    if (!it->is_number()) {
        return type_error(where, key, "a number");
    }
    return it->get<double>();
}

Result<bool> get_bool(const json & obj, const std::string & key, bool fallback, const std::string & where) {
    auto it = obj.find(key);
    if (it == obj.end() || it->is_null()) {
        return fallback;
    }
    if (!it->is_boolean()) {
        return type_error(where, key, "true or false");
    }
    return it->get<bool>();
}

Result<json> get_string_map(const json & obj, const std::string & key, const std::string & where) {
    auto it = obj.find(key);
    if (it == obj.end() || it->is_null()) {
        return json::object();
    }
    if (!it->is_object()) {
        return type_error(where, key, "an object of strings");
    }
    const std::string name = field_name(where, key);
    if (it->size() > MAX_METADATA_KEYS) {
        return invalid_argument(name + ": at most " + std::to_string(MAX_METADATA_KEYS) + " keys, got " +
                                std::to_string(it->size()));
    }
    for (const auto & [k, v] : it->items()) {
        if (!v.is_string()) {
            return type_error(name, k, "a string");
        }
        if (k.empty() || k.size() > MAX_METADATA_KEY_BYTES ||
            v.get_ref<const std::string &>().size() > MAX_METADATA_VALUE_BYTES) {
            return invalid_argument(name + ": keys are 1-" + std::to_string(MAX_METADATA_KEY_BYTES) +
                                    " bytes and values at most " + std::to_string(MAX_METADATA_VALUE_BYTES) +
                                    " bytes (key '" + k.substr(0, 64) + "')");
        }
    }
    return *it;
}

int http_status(ErrorKind kind) {
    switch (kind) {
        case ErrorKind::INVALID_ARGUMENT:
        case ErrorKind::UNSUPPORTED:
            return 400;
        case ErrorKind::NOT_FOUND:
            return 404;
        case ErrorKind::TOO_LARGE:
            return 413;
        case ErrorKind::UNAVAILABLE:
            return 429;
        case ErrorKind::INTERNAL:
            return 500;
    }
    return 500;
}

static const char * error_code(ErrorKind kind) {
    switch (kind) {
        case ErrorKind::INVALID_ARGUMENT:
            return "invalid_argument";
        case ErrorKind::UNSUPPORTED:
            return "unsupported";
        case ErrorKind::NOT_FOUND:
            return "not_found";
        case ErrorKind::TOO_LARGE:
            return "too_large";
        case ErrorKind::UNAVAILABLE:
            return "unavailable";
        case ErrorKind::INTERNAL:
            return "internal";
    }
    return "internal";
}

http::Response error_response(const Error & error) {
    json body = {{"detail", redact_paths(error.message)}, {"code", error_code(error.kind)}};
    http::Response response = json_response(body, http_status(error.kind));
    if (error.kind == ErrorKind::UNAVAILABLE) {
        response.headers.emplace_back("Retry-After", "1");
    }
    return response;
}

http::Response error_response(int status, const std::string & message) {
    return json_response(json{{"detail", redact_paths(message)}}, status);
}

http::Response json_response(const json & body, int status) {
    return http::Response::json(status, body.dump(-1, ' ', false, json::error_handler_t::replace));
}

double now_seconds() {
    using namespace std::chrono;
    return duration_cast<duration<double>>(system_clock::now().time_since_epoch()).count();
}

std::string iso_time(double seconds) {
    const auto whole = static_cast<std::time_t>(std::floor(seconds));
    const int millis = static_cast<int>((seconds - std::floor(seconds)) * 1000.0);
    std::tm tm_utc{};
    gmtime_r(&whole, &tm_utc);
    char buf[40];
    std::strftime(buf, sizeof(buf), "%Y-%m-%dT%H:%M:%S", &tm_utc);
    char out[48];
    std::snprintf(out, sizeof(out), "%s.%03dZ", buf, millis);
    return out;
}

std::string http_date(double seconds) {
    const auto whole = static_cast<std::time_t>(std::floor(seconds));
    std::tm tm_utc{};
    gmtime_r(&whole, &tm_utc);
    char buf[40];
    std::strftime(buf, sizeof(buf), "%a, %d %b %Y %H:%M:%S GMT", &tm_utc);
    return buf;
}

Result<void> validate_checkpoint_name(const std::string & name) {
    if (name.empty() || name.size() > 128 || name == "." || name == "..") {
        return invalid_argument("checkpoint name '" + name + "' must be 1-128 characters, not '.' or '..'");
    }
    for (char c : name) {
        const bool ok = std::isalnum(static_cast<unsigned char>(c)) || c == '.' || c == '_' || c == '-';
        if (!ok) {
            return invalid_argument("checkpoint name '" + name +
                                    "' may contain only letters, digits, '.', '_' and '-'");
        }
    }
    return {};
}

Result<TinkerPath> parse_checkpoint_id(const std::string & run_id, const std::string & checkpoint_id) {
    const auto slash = checkpoint_id.find('/');
    if (slash == std::string::npos) {
        return invalid_argument("checkpoint id '" + checkpoint_id +
                                "' must be 'weights/<name>' or 'sampler_weights/<name>'");
    }
    TinkerPath path{run_id, checkpoint_id.substr(0, slash), checkpoint_id.substr(slash + 1)};
    if (path.kind != "weights" && path.kind != "sampler_weights") {
        return invalid_argument("checkpoint kind '" + path.kind + "' must be 'weights' or 'sampler_weights'");
    }
    TRY_STATUS(validate_checkpoint_name(path.name));
    return path;
}

Result<TinkerPath> parse_tinker_path(const std::string & path) {
    const std::string prefix = "tinker://";
    if (path.rfind(prefix, 0) != 0) {
        return invalid_argument("path '" + path + "' must start with tinker://");
    }
    const std::string rest = path.substr(prefix.size());
    const auto first = rest.find('/');
    if (first == std::string::npos || first == 0) {
        return invalid_argument("path '" + path + "' must be tinker://<run_id>/<weights|sampler_weights>/<name>");
    }
    auto parsed = parse_checkpoint_id(rest.substr(0, first), rest.substr(first + 1));
    if (!parsed.ok()) {
        return invalid_argument("path '" + path + "': " + parsed.error().message);
    }
    return parsed;
}

std::string body_digest(const std::string & body) {
    uint64_t hash = 1469598103934665603ULL;
    for (unsigned char c : body) {
        hash = (hash ^ c) * 1099511628211ULL;
    }
    char out[48];
    std::snprintf(out, sizeof(out), "%016llx-%zx", static_cast<unsigned long long>(hash), body.size());
    return out;
}

std::string random_hex(size_t n_chars) {
    static thread_local std::random_device entropy;  // the kernel's CSPRNG: ids and archive links are bearer secrets
    static const char * digits = "0123456789abcdef";
    std::string out(n_chars, '0');
    for (size_t i = 0; i < n_chars; i += 8) {
        uint32_t bits = entropy();
        for (size_t j = i; j < std::min(n_chars, i + 8); ++j, bits >>= 4) {
            out[j] = digits[bits & 15];
        }
    }
    return out;
}

json finite_or_null(double value) {
    return std::isfinite(value) ? json(value) : json(nullptr);
}

Result<std::optional<std::string>> parse_optimizer_config(const json & body, const std::string & key) {
    auto it = body.find(key);
    if (it == body.end() || it->is_null()) {
        return std::optional<std::string>();
    }
    if (!it->is_object() || !it->contains("type") || !(*it)["type"].is_string()) {
        return invalid_argument(key + ": expected {\"type\": \"adamw\"} or {\"type\": \"dimuon\", \"version\": 1}");
    }
    const std::string type = (*it)["type"].get<std::string>();
    if (type != "adamw" && type != "dimuon") {
        return unsupported(key + ".type '" + type + "' is not supported: this server trains with adamw or dimuon");
    }
    const json version = it->value("version", json(1));
    if (type == "dimuon" && version != json(1)) {
        return unsupported(key + ".version " + version.dump() + " of dimuon is not supported (version 1 is)");
    }
    return std::optional<std::string>(type);
}

json optimizer_config_json(const std::string & optimizer) {
    return optimizer == "dimuon" ? json{{"type", "dimuon"}, {"version", 1}} : json{{"type", "adamw"}};
}

}  // namespace tinkerd::api
