// Helpers shared by the fuzz targets: the input as a string, splitting it on a NUL byte, a bound on
// JSON nesting (deep nesting is a known crash handled in the server's body parsing, see ARCHITECTURE.md),
// and the data folder (fuzz/data: small real inputs the targets load once at start-up).
#pragma once

#include <cstddef>
#include <cstdint>
#include <fstream>
#include <sstream>
#include <string>
#include <string_view>
#include <utility>

namespace tinkerd::fuzz {

inline std::string_view as_view(const uint8_t * data, size_t size) {
    return {reinterpret_cast<const char *>(data), size};
}

// Before and after the first NUL byte (all of it and "" when there is none).
inline std::pair<std::string_view, std::string_view> split_nul(std::string_view input) {
    size_t nul = input.find('\0');
    if (nul == std::string_view::npos) {
        return {input, {}};
    }
    return {input.substr(0, nul), input.substr(nul + 1)};
}

// The deepest [ / { nesting of JSON text, ignoring brackets inside strings.
inline size_t json_depth(std::string_view text) {
    size_t depth = 0, deepest = 0;
    bool in_string = false, escaped = false;
    for (char c : text) {
        if (in_string) {
            if (escaped) {
                escaped = false;
            } else if (c == '\\') {
                escaped = true;
            } else if (c == '"') {
                in_string = false;
            }
            continue;
        }
        if (c == '"') {
            in_string = true;
        } else if (c == '[' || c == '{') {
            deepest = ++depth > deepest ? depth : deepest;
        } else if ((c == ']' || c == '}') && depth > 0) {
            --depth;
        }
    }
    return deepest;
}

// A file of fuzz/data ("" when it cannot be read; the target then aborts at start-up).
inline std::string read_data_file(const std::string & name) {
    std::ifstream in(std::string(TINKERD_FUZZ_DATA_DIR) + "/" + name, std::ios::binary);
    std::ostringstream text;
    text << in.rdbuf();
    return text.str();
}

}  // namespace tinkerd::fuzz
