// The flag table (flag_table.h): every flag of tinkerd, how its value is read (an integer or a number of
// seconds in a range, one of a few words, a string) and where it goes in Options. The usage text
// (usage.cpp) and README.md's flag table describe the same flags; cli_test checks that they agree.
#include <algorithm>
#include <charconv>
#include <cmath>
#include <cstdlib>
#include <limits>
#include <type_traits>

#include "cli/flag_table.h"
#include "store/database.h"

namespace tinkerd::cli {

namespace {

using Setter = std::function<Result<void>(const std::string & value, Options & options)>;

constexpr long long NO_LIMIT = std::numeric_limits<long long>::max();
constexpr long long MAX_MIB = 1LL << 30;  // MiB flags are shifted into bytes: keep them far from overflow
constexpr double MAX_SECONDS = 1e9;       // seconds flags become milliseconds in a long long

Error bad_value(const std::string & flag, const std::string & expected, const std::string & value) {
    return invalid_argument(flag + " must be " + expected + ", got '" + value + "'");
}

// The whole of `value` as a decimal integer in [lo, min(hi, type_max)]; the error shows the upper end when
// the flag has one (hi) or the value passed the type's (type_max).
Result<long long> read_integer(const std::string & flag, const std::string & value, long long lo, long long hi,
                               long long type_max) {
    long long v = 0;
    const char * end = value.data() + value.size();
    const auto [ptr, ec] = std::from_chars(value.data(), end, v);
    const bool parsed = !value.empty() && ec == std::errc() && ptr == end;
    const long long top = std::min(hi, type_max);
    if (!parsed || v < lo || v > top) {
        const bool show_top = hi != NO_LIMIT || (parsed && v > top);
        return bad_value(flag,
                         show_top ? "an integer from " + std::to_string(lo) + " to " + std::to_string(top)
                                  : "an integer >= " + std::to_string(lo),
                         value);
    }
    return v;
}

// The whole of `value` as a finite number of seconds: > 0 (positive) or >= 0, at most MAX_SECONDS.
Result<double> read_seconds(const std::string & flag, const std::string & value, bool positive) {
    char * end = nullptr;
    const double v = value.empty() ? 0 : std::strtod(value.c_str(), &end);
    const bool parsed = !value.empty() && end == value.c_str() + value.size() && std::isfinite(v);
    if (!parsed || v > MAX_SECONDS || (positive ? !(v > 0) : !(v >= 0))) {
        return bad_value(flag, std::string("a number of seconds ") + (positive ? "> 0" : ">= 0") + " (at most 1e9)",
                         value);
    }
    return v;
}

// FIELD(port): the accessor of one Options member for the setters below.
#define FIELD(member)           \
    [](Options & o) -> auto & { \
        return o.member;        \
    }

template <typename Field>
FlagDef integer(const std::string & flag, Field field, long long lo, long long hi = NO_LIMIT) {
    return {flag, false, [=](const std::string & value, Options & o) -> Result<void> {
                using T = std::remove_reference_t<decltype(field(o))>;
                auto v = read_integer(flag, value, lo, hi, std::numeric_limits<T>::max());
                if (!v.ok()) {
                    return v.error();
                }
                field(o) = static_cast<T>(*v);
                return {};
            }};
}

template <typename Field>
FlagDef seconds(const std::string & flag, Field field, bool positive) {
    return {flag, false, [=](const std::string & value, Options & o) -> Result<void> {
                auto v = read_seconds(flag, value, positive);
                if (!v.ok()) {
                    return v.error();
                }
                field(o) = *v;
                return {};
            }};
}

// A non-empty string; `prefixes` (when any) are the beginnings it may have.
template <typename Field>
FlagDef text(const std::string & flag, Field field, const std::vector<std::string> & prefixes = {},
             const std::string & expected = "a non-empty value") {
    return {flag, false, [=](const std::string & value, Options & o) -> Result<void> {
                bool fits = prefixes.empty();
                for (const std::string & prefix : prefixes) {
                    fits = fits || value.rfind(prefix, 0) == 0;
                }
                if (value.empty() || !fits) {
                    return bad_value(flag, expected, value);
                }
                field(o) = value;
                return {};
            }};
}

// One of a few words.
template <typename Field>
FlagDef choice(const std::string & flag, Field field, const std::vector<std::string> & words) {
    return {flag, false, [=](const std::string & value, Options & o) -> Result<void> {
                for (const std::string & word : words) {
                    if (value == word) {
                        field(o) = value;
                        return {};
                    }
                }
                std::string expected = "one of";
                for (const std::string & word : words) {
                    expected += (&word == &words.front() ? " " : ", ") + word;
                }
                return bad_value(flag, expected, value);
            }};
}

// --model NAME=DIR | NAME=FILE.gguf | ORG/NAME (repeatable).
FlagDef model_flag() {
    return {"--model", false, [](const std::string & value, Options & o) -> Result<void> {
                const auto eq = value.find('=');
                if (value.empty() || eq == 0 || (eq != std::string::npos && eq + 1 == value.size())) {
                    return bad_value("--model", "NAME=DIR, NAME=FILE.gguf or ORG/NAME", value);
                }
                o.models.emplace_back(eq == std::string::npos ? value : value.substr(0, eq),
                                      eq == std::string::npos ? "" : value.substr(eq + 1));
                return {};
            }};
}

FlagDef database_flag() {
    return {"--database", false, [](const std::string & value, Options & o) -> Result<void> {
                if (!store::is_postgres_uri(value)) {
                    return bad_value("--database", "a PostgreSQL URI, postgresql://USER@HOST:PORT/DB", value);
                }
                o.database = value;
                return {};
            }};
}

FlagDef internal(FlagDef flag) {
    flag.internal = true;
    return flag;
}

std::vector<FlagDef> make_table() {
    return {
        model_flag(),
        text("--host", FIELD(host)),
        integer("--port", FIELD(port), 0, 65535),
        text("--data-dir", FIELD(data_dir)),
        database_flag(),
        text("--api-keys", FIELD(api_keys_file)),
        choice("--dtype", FIELD(dtype), {"auto", "bf16", "fp32"}),
        choice("--matmul", FIELD(matmul), {"auto", "exact", "bf16"}),
        choice("--base-quant", FIELD(base_quant), {"auto", "gguf", "dequant", "q8_0", "q4_k"}),
        choice("--sample-activations", FIELD(sample_activations), {"fp32", "int8"}),
        text("--device", FIELD(device)),
        integer("--threads", FIELD(threads), 0),
        integer("--io-threads", FIELD(io_threads), 1),
        seconds("--session-timeout-seconds", FIELD(session_timeout_seconds), true),
        seconds("--poll-timeout-seconds", FIELD(poll_timeout_seconds), true),
        integer("--max-body-bytes", FIELD(max_body_bytes), 1024),
        integer("--kv-cache-mib", FIELD(kv_cache_mib), 1, MAX_MIB),
        integer("--max-sampler-adapters", FIELD(max_sampler_adapters), 1),
        seconds("--seq-gap-timeout-seconds", FIELD(seq_gap_timeout_seconds), true),
        integer("--disk-reserve-mib", FIELD(disk_reserve_mib), 0, MAX_MIB),
        integer("--header-timeout-seconds", FIELD(header_timeout_seconds), 1),
        integer("--body-timeout-seconds", FIELD(body_timeout_seconds), 1),
        integer("--max-connections", FIELD(max_connections), 1),
        seconds("--snapshot-ttl-seconds", FIELD(snapshot_ttl_seconds), false),
        integer("--snapshot-disk-mib", FIELD(snapshot_disk_mib), 0, MAX_MIB),
        integer("--max-metric-points", FIELD(max_metric_points), 4),
        integer("--max-event-streams", FIELD(max_event_streams), 0, 100000),
        integer("--dp", FIELD(dist.dp), 1, 256),
        text("--dist-init", FIELD(dist.init), {"tcp://", "file://"}, "tcp://HOST:PORT (or file://PATH on one machine)"),
        integer("--rank", FIELD(dist.rank), 0),
        integer("--world-size", FIELD(dist.world_size), 1, 256),
        seconds("--dist-timeout-seconds", FIELD(dist.timeout_seconds), true),
        seconds("--dist-keepalive-seconds", FIELD(dist.keepalive_seconds), false),
        integer("--sampling-replicas", FIELD(replicas.count), 0, 64),
        internal(integer("--replica-index", FIELD(replicas.index), 1)),
        internal(text("--replica-init", FIELD(replicas.init), {"file://"}, "file://PATH")),
    };
}

#undef FIELD

}  // namespace

const std::vector<FlagDef> & flag_table() {
    static const std::vector<FlagDef> table = make_table();
    return table;
}

const FlagDef * find_flag(const std::string & name) {
    for (const FlagDef & flag : flag_table()) {
        if (flag.name == name) {
            return &flag;
        }
    }
    return nullptr;
}

}  // namespace tinkerd::cli
