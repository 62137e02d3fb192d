// Helpers shared by the fuzz targets: the input as a string, splitting it on a NUL byte, a bound on
// the JSON nesting bound the server applies before parsing (common/json_depth.h),
// and the data folder (fuzz/data: small real inputs the targets load once at start-up).
#pragma once

#include <cstddef>
#include <cstdint>
#include <fstream>
#include <sstream>
#include <string>
#include <string_view>
#include <utility>

#include "common/json_depth.h"

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

// The server refuses JSON nested deeper than MAX_JSON_DEPTH before any parser sees it (common/json_depth.h);
// targets that call a parser directly mirror that order.
inline bool too_deep(std::string_view text) {
    return json_nesting_depth(text) > MAX_JSON_DEPTH;
}

// A file of fuzz/data ("" when it cannot be read; the target then aborts at start-up).
inline std::string read_data_file(const std::string & name) {
    std::ifstream in(std::string(TINKERD_FUZZ_DATA_DIR) + "/" + name, std::ios::binary);
    std::ostringstream text;
    text << in.rdbuf();
    return text.str();
}

}  // namespace tinkerd::fuzz
