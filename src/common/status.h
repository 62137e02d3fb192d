// Status and Result<T>: how expected failures (bad input, missing files, unsupported models)
// travel between modules without exceptions. The kind decides the HTTP status in api/.
#pragma once

#include <string>
#include <utility>
#include <variant>

namespace tinkerd {

enum class ErrorKind {
    INVALID_ARGUMENT,  // the caller's input is wrong (HTTP 400)
    NOT_FOUND,         // a named thing does not exist (HTTP 404)
    UNSUPPORTED,       // valid but not supported by this server (HTTP 400)
    TOO_LARGE,         // a body or decompressed payload over a configured limit (HTTP 413)
    UNAVAILABLE,       // busy right now, retry shortly (HTTP 429, the SDK's backpressure signal)
    INTERNAL,          // our fault (HTTP 500)
};

struct Error {
    ErrorKind kind = ErrorKind::INTERNAL;
    std::string message;
};

inline Error invalid_argument(std::string msg) {
    return {ErrorKind::INVALID_ARGUMENT, std::move(msg)};
}
inline Error not_found(std::string msg) {
    return {ErrorKind::NOT_FOUND, std::move(msg)};
}
inline Error unsupported(std::string msg) {
    return {ErrorKind::UNSUPPORTED, std::move(msg)};
}
inline Error too_large(std::string msg) {
    return {ErrorKind::TOO_LARGE, std::move(msg)};
}
inline Error unavailable(std::string msg) {
    return {ErrorKind::UNAVAILABLE, std::move(msg)};
}
inline Error internal_error(std::string msg) {
    return {ErrorKind::INTERNAL, std::move(msg)};
}

// Result<T>: either a value or an Error. Result<void> carries only success or an Error.
template <typename T>
class [[nodiscard]] Result {
  public:
    Result(T value) : data_(std::move(value)) {}      // NOLINT(google-explicit-constructor)
    Result(Error error) : data_(std::move(error)) {}  // NOLINT(google-explicit-constructor)

    bool ok() const { return std::holds_alternative<T>(data_); }
    explicit operator bool() const { return ok(); }
    T & value() & { return std::get<T>(data_); }
    const T & value() const & { return std::get<T>(data_); }
    T && value() && { return std::get<T>(std::move(data_)); }
    T & operator*() & { return value(); }
    T * operator->() { return &std::get<T>(data_); }
    const T * operator->() const { return &std::get<T>(data_); }
    const Error & error() const { return std::get<Error>(data_); }

  private:
    std::variant<T, Error> data_;
};

template <>
class [[nodiscard]] Result<void> {
  public:
    Result() = default;
    Result(Error error) : error_(std::move(error)), ok_(false) {}  // NOLINT(google-explicit-constructor)
    bool ok() const { return ok_; }
    explicit operator bool() const { return ok_; }
    const Error & error() const { return error_; }

  private:
    Error error_;
    bool ok_ = true;
};

}  // namespace tinkerd

// Propagates an error from an expression returning Result<...>.
#define TRY_STATUS(expr)                       \
    do {                                       \
        const auto & tinkerd_status_ = (expr); \
        if (!tinkerd_status_.ok()) {           \
            return tinkerd_status_.error();    \
        }                                      \
    } while (0)
