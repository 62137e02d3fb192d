// Normalizers and pre-tokenizers of tokenizer.json (internal to src/tokenizer): the text steps that run
// before the BPE model. Built once from JSON; apply() is const and thread-safe.
#pragma once

#include <memory>
#include <string>
#include <string_view>
#include <vector>

#include <nlohmann/json.hpp>

#include "common/status.h"
#include "tokenizer/regex.h"

namespace tinkerd::tokenizer {

// A chain of normalizers: Sequence, Prepend, Replace (String or Regex), Strip, NFC (Unicode canonical
// composition through ICU, as the Qwen tokenizers declare).
class Normalizer {
  public:
    static Result<Normalizer> from_json(const nlohmann::json & j);  // null -> no-op
    void apply(std::string & text) const;
    bool empty() const { return steps_.empty(); }

  private:
    struct Step {
        enum Kind { PREPEND, REPLACE, STRIP, NFC } kind = PREPEND;
        std::string pattern;  // Replace: literal pattern (when re is null)
        std::string content;  // Prepend/Replace: inserted text
        std::shared_ptr<Regex> re;
        bool left = false, right = false;  // Strip
    };
    static Result<void> add(const nlohmann::json & j, std::vector<Step> & steps);
    std::vector<Step> steps_;
};

// A chain of pre-tokenizers: Sequence, Split, ByteLevel, Metaspace, Digits, Whitespace,
// WhitespaceSplit, Punctuation. Produces the words the BPE model encodes one by one.
class PreTokenizer {
  public:
    static Result<PreTokenizer> from_json(const nlohmann::json & j);  // null -> the whole text is one word
    // Appends the words of text; first_segment is true when text starts at offset 0 of the input.
    void apply(std::string_view text, bool first_segment, std::vector<std::string> & words) const;
    bool byte_level() const { return byte_level_; }

  private:
    enum class Behavior { ISOLATED, REMOVED, MERGED_WITH_PREVIOUS, MERGED_WITH_NEXT, CONTIGUOUS };
    struct Step {
        enum Kind { SPLIT, BYTE_LEVEL, METASPACE } kind = SPLIT;
        std::shared_ptr<Regex> re;  // Split (also ByteLevel's GPT-2 regex when use_regex)
        Behavior behavior = Behavior::ISOLATED;
        bool invert = false;
        bool add_prefix_space = false;  // ByteLevel
        std::string replacement;        // Metaspace
        std::string prepend_scheme;     // Metaspace: always | first | never
        bool split = false;             // Metaspace
    };
    static Result<void> add(const nlohmann::json & j, std::vector<Step> & steps);
    static Result<Step> split_step(const nlohmann::json & j);
    static Result<Step> byte_level_step(const nlohmann::json & j);
    static Result<Step> metaspace_step(const nlohmann::json & j);
    static void run_split(const Step & s, std::string_view text, std::vector<std::string> & out);
    static void run_step(const Step & s, std::string && piece, bool first, std::vector<std::string> & out);
    std::vector<Step> steps_;
    bool byte_level_ = false;
};

// Reads a Replace/Split pattern: {"String": "..."} sets literal, {"Regex": "..."} compiles re.
Result<void> read_pattern(const nlohmann::json & j, std::string & literal, std::shared_ptr<Regex> & re);

// text with every occurrence of from replaced by to (from must be non-empty).
std::string replace_all(std::string_view text, std::string_view from, std::string_view to);

}  // namespace tinkerd::tokenizer
