// Typed reads of OpenAI request parameters with errors that name the parameter, and the parameters
// both endpoints share (model, n, sampling, seed, stop, stream, stream_options, user). A JSON null is
// treated as an absent parameter, as OpenAI does.
#include "openai/request_fields.h"

#include <cmath>
#include <cstdint>
#include <limits>
#include <sstream>
#include <string>

namespace tinkerd::openai::detail {

namespace {

constexpr int64_t kMaxN = 128;
constexpr size_t kMaxStops = 4;

// A limit as people write it: "2", "0.5".
std::string show_number(double v) {
    if (std::floor(v) == v && std::fabs(v) < 1e15) {
        return std::to_string(static_cast<int64_t>(v));
    }
    std::ostringstream out;
    out << v;
    return out.str();
}

ApiError out_of_range(const std::string & param, const std::string & kind, bool above, const std::string & bound,
                      const json & got) {
    ApiError e;
    e.message = "Invalid '" + param + "': " + kind + (above ? " above maximum value" : " below minimum value") +
                ". Expected a value " + bound + ", but got " + got.dump() + " instead.";
    e.param = param;
    e.code = kind + (above ? "_above_max_value" : "_below_min_value");
    return e;
}

MaybeError read_seed(const json & body, GenerationRequest & req) {
    const json * v = find_value(body, "seed");
    if (v == nullptr) {
        return std::nullopt;
    }
    if (v->is_number_unsigned()) {
        req.seed = v->get<uint64_t>();
    } else if (v->is_number_integer()) {
        req.seed = static_cast<uint64_t>(v->get<int64_t>());
    } else {
        return invalid_type("seed", "an integer", *v);
    }
    return std::nullopt;
}

MaybeError check_stop_string(const json & s, const std::string & where) {
    if (!s.is_string()) {
        ApiError e = invalid_type(where, "a string", s);
        e.param = "stop";
        return e;
    }
    if (s.get_ref<const std::string &>().empty()) {
        return invalid_value("stop", "Invalid '" + where + "': empty string. Stop sequences must be non-empty.");
    }
    return std::nullopt;
}

MaybeError read_stop(const json & body, GenerationRequest & req) {
    const json * v = find_value(body, "stop");
    if (v == nullptr) {
        return std::nullopt;
    }
    if (v->is_string()) {
        OPENAI_TRY(check_stop_string(*v, "stop"));
        req.stop = {v->get<std::string>()};
        return std::nullopt;
    }
    if (!v->is_array()) {
        return invalid_type("stop", "a string or an array of strings", *v);
    }
    if (v->size() > kMaxStops) {
        ApiError e = invalid_value("stop", "Invalid 'stop': array too long. Expected an array with maximum length " +
                                               std::to_string(kMaxStops) + ", but got an array with length " +
                                               std::to_string(v->size()) + " instead.");
        e.code = "array_above_max_length";
        return e;
    }
    for (size_t i = 0; i < v->size(); ++i) {
        OPENAI_TRY(check_stop_string((*v)[i], "stop[" + std::to_string(i) + "]"));
        req.stop.push_back((*v)[i].get<std::string>());
    }
    return std::nullopt;
}

MaybeError read_stream_options(const json & body, GenerationRequest & req) {
    const json * v = find_value(body, "stream_options");
    if (v == nullptr) {
        return std::nullopt;
    }
    if (!v->is_object()) {
        return invalid_type("stream_options", "an object", *v);
    }
    if (!req.stream) {
        return invalid_value("stream_options",
                             "The 'stream_options' parameter is only allowed when 'stream' is enabled.");
    }
    return read_bool(*v, "include_usage", req.include_usage, "stream_options.");
}

}  // namespace

const json * find_value(const json & obj, const std::string & key) {
    auto it = obj.find(key);
    if (it == obj.end() || it->is_null()) {
        return nullptr;
    }
    return &*it;
}

MaybeError read_bool(const json & obj, const std::string & key, bool & out, const std::string & prefix) {
    const json * v = find_value(obj, key);
    if (v == nullptr) {
        return std::nullopt;
    }
    if (!v->is_boolean()) {
        return invalid_type(prefix + key, "a boolean", *v);
    }
    out = v->get<bool>();
    return std::nullopt;
}

MaybeError read_string(const json & obj, const std::string & key, std::string & out, const std::string & prefix) {
    const json * v = find_value(obj, key);
    if (v == nullptr) {
        return std::nullopt;
    }
    if (!v->is_string()) {
        return invalid_type(prefix + key, "a string", *v);
    }
    out = v->get<std::string>();
    return std::nullopt;
}

MaybeError read_optional_int(const json & obj, const std::string & key, int64_t min, int64_t max,
                             std::optional<int64_t> & out) {
    const json * v = find_value(obj, key);
    if (v == nullptr) {
        return std::nullopt;
    }
    if (!v->is_number_integer()) {
        return invalid_type(key, "an integer", *v);
    }
    // Non-negative integers arrive as unsigned and may exceed int64_t.
    bool too_big = v->is_number_unsigned() ? v->get<uint64_t>() > static_cast<uint64_t>(max) : v->get<int64_t>() > max;
    if (too_big) {
        return out_of_range(key, "integer", true, "<= " + std::to_string(max), *v);
    }
    int64_t x = v->is_number_unsigned() ? static_cast<int64_t>(v->get<uint64_t>()) : v->get<int64_t>();
    if (x < min) {
        return out_of_range(key, "integer", false, ">= " + std::to_string(min), *v);
    }
    out = x;
    return std::nullopt;
}

MaybeError read_int(const json & obj, const std::string & key, int64_t min, int64_t max, int64_t & out) {
    std::optional<int64_t> value;
    OPENAI_TRY(read_optional_int(obj, key, min, max, value));
    if (value) {
        out = *value;
    }
    return std::nullopt;
}

MaybeError read_number(const json & obj, const std::string & key, double min, double max, bool min_exclusive,
                       double & out) {
    const json * v = find_value(obj, key);
    if (v == nullptr) {
        return std::nullopt;
    }
    if (!v->is_number()) {
        return invalid_type(key, "a decimal", *v);
    }
    double x = v->get<double>();
    if (x > max) {
        return out_of_range(key, "decimal", true, "<= " + show_number(max), *v);
    }
    if (x < min || (min_exclusive && x <= min)) {
        return out_of_range(key, "decimal", false, (min_exclusive ? "> " : ">= ") + show_number(min), *v);
    }
    out = x;
    return std::nullopt;
}

MaybeError read_common(const json & body, GenerationRequest & req) {
    const json * model = find_value(body, "model");
    if (model == nullptr) {
        return missing_param("model");
    }
    OPENAI_TRY(read_string(body, "model", req.model));
    OPENAI_TRY(read_int(body, "n", 1, kMaxN, req.n));
    OPENAI_TRY(read_number(body, "temperature", 0.0, 2.0, false, req.temperature));
    OPENAI_TRY(read_number(body, "top_p", 0.0, 1.0, true, req.top_p));
    OPENAI_TRY(read_int(body, "top_k", -1, std::numeric_limits<int64_t>::max(), req.top_k));
    if (req.top_k == 0) {
        return invalid_value("top_k", "Invalid 'top_k': expected -1 (no limit) or a value >= 1, but got 0 instead.");
    }
    OPENAI_TRY(read_seed(body, req));
    OPENAI_TRY(read_stop(body, req));
    OPENAI_TRY(read_bool(body, "stream", req.stream));
    OPENAI_TRY(read_stream_options(body, req));
    OPENAI_TRY(read_string(body, "user", req.user));
    return std::nullopt;
}

}  // namespace tinkerd::openai::detail
