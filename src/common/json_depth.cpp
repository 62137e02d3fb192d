// The flat nesting-depth scan of JSON text (see json_depth.h).
#include "common/json_depth.h"

namespace tinkerd {

size_t json_nesting_depth(std::string_view text, size_t stop_after) {
    size_t depth = 0;
    size_t deepest = 0;
    bool in_string = false;
    for (size_t i = 0; i < text.size(); ++i) {
        const char c = text[i];
        if (in_string) {
            if (c == '\\') {
                ++i;  // the escaped character cannot end the string
            } else if (c == '"') {
                in_string = false;
            }
            continue;
        }
        if (c == '"') {
            in_string = true;
        } else if (c == '[' || c == '{') {
            if (++depth > deepest) {
                deepest = depth;
                if (deepest > stop_after) {
                    return deepest;
                }
            }
        } else if ((c == ']' || c == '}') && depth > 0) {
            --depth;
        }
    }
    return deepest;
}

Result<void> check_json_depth(std::string_view text, const std::string & what, size_t max_depth) {
    if (json_nesting_depth(text, max_depth) > max_depth) {
        return invalid_argument(what + ": JSON nested deeper than " + std::to_string(max_depth) +
                                " levels (the limit)");
    }
    return {};
}

}  // namespace tinkerd
