// The decoder chain of tokenizer.json (internal to src/tokenizer), compiled into per-token steps that
// yield raw bytes plus a whole-text Strip, so that full and incremental decoding share one code path.
#pragma once

#include <string>
#include <string_view>
#include <vector>

#include <nlohmann/json.hpp>

#include "common/status.h"

namespace tinkerd::tokenizer {

// Supports ByteLevel, Replace (String), ByteFallback, Fuse, Strip, Metaspace and Sequence; null joins
// tokens with spaces (as Hugging Face does without a decoder).
class Decoder {
  public:
    static Result<Decoder> from_json(const nlohmann::json & j);

    // Appends the raw bytes of one token; first is true for the first token of the output.
    void append_token(std::string_view token, bool first, std::string & out) const;

    // Whole-text Strip (after Fuse): up to strip_start() leading / strip_stop() trailing strip_char()s.
    size_t strip_start() const { return strip_start_; }
    size_t strip_stop() const { return strip_stop_; }
    const std::string & strip_char() const { return strip_char_; }

    // Full decode of token strings: raw bytes, the whole-text Strip, invalid UTF-8 -> U+FFFD.
    std::string decode(const std::vector<std::string_view> & tokens) const;

  private:
    struct Step {
        enum Kind { REPLACE, BYTE_LEVEL, BYTE_FALLBACK, STRIP_TOKEN, METASPACE } kind = REPLACE;
        std::string from, to;        // Replace; Metaspace (replacement -> " ")
        std::string content;         // per-token Strip
        size_t start = 0, stop = 0;  // per-token Strip
        bool strip_first = false;    // Metaspace: drop the first token's leading space
    };
    static Result<void> add(const nlohmann::json & j, Decoder & d);
    Result<void> add_strip(const nlohmann::json & j);
    static void apply(const Step & s, bool first, std::string & text);

    std::vector<Step> steps_;
    bool fused_ = false;            // a Fuse was seen: later Strip applies to the whole text
    bool join_with_space_ = false;  // no decoder at all
    size_t strip_start_ = 0, strip_stop_ = 0;
    std::string strip_char_ = " ";
};

// Removes up to n leading (from_end: trailing) copies of c from text; returns how many were removed.
size_t strip_repeated(std::string & text, const std::string & c, size_t n, bool from_end);

}  // namespace tinkerd::tokenizer
