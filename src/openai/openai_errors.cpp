// OpenAI-style errors: the error body every failed request gets, and the constructors the request
// parsers use, worded after the messages OpenAI sends ("Invalid type for 'n': expected an integer, but
// got a string instead.") with its codes ("invalid_type", "missing_required_parameter", ...).
#include <string>

#include <nlohmann/json.hpp>

#include "openai/request_fields.h"

namespace tinkerd::openai {

namespace {

nlohmann::json string_or_null(const std::string & s) {
    return s.empty() ? nlohmann::json(nullptr) : nlohmann::json(s);
}

}  // namespace

std::string error_body(const ApiError & error) {
    nlohmann::json inner = {
        {"message", error.message},
        {"type", error.type},
        {"param", string_or_null(error.param)},
        {"code", string_or_null(error.code)},
    };
    nlohmann::json body = {{"error", std::move(inner)}};
    return body.dump(-1, ' ', false, nlohmann::json::error_handler_t::replace);
}

namespace detail {

std::string describe_type(const json & value) {
    switch (value.type()) {
        case json::value_t::string:
            return "a string";
        case json::value_t::number_integer:
        case json::value_t::number_unsigned:
            return "an integer";
        case json::value_t::number_float:
            return "a decimal";
        case json::value_t::boolean:
            return "a boolean";
        case json::value_t::array:
            return "an array";
        case json::value_t::object:
            return "an object";
        case json::value_t::null:
            return "null";
        default:
            return "an unsupported value";
    }
}

ApiError missing_param(const std::string & param) {
    ApiError e;
    e.message = "Missing required parameter: '" + param + "'.";
    e.param = param;
    e.code = "missing_required_parameter";
    return e;
}

ApiError invalid_type(const std::string & param, const std::string & expected, const json & got) {
    ApiError e;
    e.message =
        "Invalid type for '" + param + "': expected " + expected + ", but got " + describe_type(got) + " instead.";
    e.param = param;
    e.code = "invalid_type";
    return e;
}

ApiError body_not_object(const json & body) {
    ApiError e;
    e.message = "Invalid request body: expected a JSON object, but got " + describe_type(body) + " instead.";
    e.code = "invalid_type";
    return e;
}

ApiError invalid_value(const std::string & param, const std::string & message) {
    ApiError e;
    e.message = message;
    e.param = param;
    e.code = "invalid_value";
    return e;
}

}  // namespace detail
}  // namespace tinkerd::openai
