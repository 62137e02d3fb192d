// A compiled PCRE2 regex (UTF + UCP, JIT when available) for the tokenizer's Split pre-tokenizers
// and Replace normalizers. Thread-safe: each find_all call uses its own match data.
#pragma once

#include <memory>
#include <string>
#include <string_view>
#include <utility>
#include <vector>

#include "common/status.h"

namespace tinkerd::tokenizer {

class Regex {
  public:
    // Compiles pattern (a tokenizer.json "Regex" value); errors name the pattern and PCRE2's message.
    static Result<std::shared_ptr<Regex>> compile(const std::string & pattern);
    ~Regex();
    Regex(const Regex &) = delete;
    Regex & operator=(const Regex &) = delete;

    // Every non-overlapping match in text as [begin, end) byte ranges, left to right.
    std::vector<std::pair<size_t, size_t>> find_all(std::string_view text) const;

  private:
    Regex() = default;
    void * code_ = nullptr;  // pcre2_code_8 *
};

}  // namespace tinkerd::tokenizer
