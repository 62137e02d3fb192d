// Logging implementation: formats one line per call and writes it to stderr atomically.
#include "common/log.h"

#include <atomic>
#include <chrono>
#include <cstdio>
#include <ctime>

namespace tinkerd {

static std::atomic<int> g_min_level{static_cast<int>(LogLevel::INFO)};

void set_log_level(LogLevel level) {
    g_min_level = static_cast<int>(level);
}

void log_line(LogLevel level, const char * component, const char * fmt, ...) {
    if (static_cast<int>(level) < g_min_level.load()) {
        return;
    }
    static const char * names[] = {"DBG", "INF", "WRN", "ERR"};
    auto now = std::chrono::system_clock::now();
    std::time_t secs = std::chrono::system_clock::to_time_t(now);
    auto ms = std::chrono::duration_cast<std::chrono::milliseconds>(now.time_since_epoch()).count() % 1000;
    std::tm tm_utc{};
    gmtime_r(&secs, &tm_utc);
    char stamp[32];
    std::strftime(stamp, sizeof(stamp), "%Y-%m-%dT%H:%M:%S", &tm_utc);

    char body[2048];
    va_list args;
    va_start(args, fmt);
    std::vsnprintf(body, sizeof(body), fmt, args);
    va_end(args);
    std::fprintf(stderr, "%s.%03dZ %s [%s] %s\n", stamp, static_cast<int>(ms), names[static_cast<int>(level)],
                 component, body);
}

}  // namespace tinkerd
