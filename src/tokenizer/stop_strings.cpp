// stop_string_matcher (stop_strings.h): decodes only a window of the generated tail, long enough for any
// token split of the longest stop string, so a check costs the same at token 10 and at token 10,000.
#include "tokenizer/stop_strings.h"

#include <algorithm>

namespace tinkerd::tokenizer {

StopCheck stop_string_matcher(const Tokenizer & tokenizer, std::vector<std::string> stops) {
    size_t longest = 0;
    for (const auto & s : stops) {
        longest = std::max(longest, s.size());
    }
    const size_t window = 4 * longest + 8;  // tokens: enough for any token split of the longest stop string
    const Tokenizer * tok = &tokenizer;
    return [tok, stops = std::move(stops), window](const std::vector<int64_t> & generated) {
        const size_t start = generated.size() > window ? generated.size() - window : 0;
        const std::vector<int32_t> tail(generated.begin() + static_cast<std::ptrdiff_t>(start), generated.end());
        const std::string text = tok->decode(tail, false);
        for (const auto & s : stops) {
            if (text.find(s) != std::string::npos) {
                return true;
            }
        }
        return false;
    };
}

}  // namespace tinkerd::tokenizer
