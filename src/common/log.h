// Logging: one line per event on stderr, with a time stamp, a level and a component tag.
// Usage: LOG_INF("engine", "loaded %s in %.1f s", name.c_str(), secs);
#pragma once

#include <cstdarg>

namespace tinkerd {

enum class LogLevel { DEBUG = 0, INFO = 1, WARN = 2, ERROR = 3 };

void set_log_level(LogLevel level);
void log_line(LogLevel level, const char * component, const char * fmt, ...) __attribute__((format(printf, 3, 4)));

}  // namespace tinkerd

#define LOG_DBG(component, ...) ::tinkerd::log_line(::tinkerd::LogLevel::DEBUG, component, __VA_ARGS__)
#define LOG_INF(component, ...) ::tinkerd::log_line(::tinkerd::LogLevel::INFO, component, __VA_ARGS__)
#define LOG_WRN(component, ...) ::tinkerd::log_line(::tinkerd::LogLevel::WARN, component, __VA_ARGS__)
#define LOG_ERR(component, ...) ::tinkerd::log_line(::tinkerd::LogLevel::ERROR, component, __VA_ARGS__)
