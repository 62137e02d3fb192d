// Added tokens (special and not) of a tokenizer (internal to src/tokenizer): matched in the raw text
// before anything else, leftmost then longest, honouring lstrip / rstrip / single_word.
#pragma once

#include <array>
#include <cstdint>
#include <string>
#include <string_view>
#include <vector>

namespace tinkerd::tokenizer {

struct AddedToken {
    int32_t id = -1;
    std::string content;
    bool special = false;
    bool lstrip = false;
    bool rstrip = false;
    bool single_word = false;
    bool normalized = false;  // recorded; matching always runs on the raw text
};

class AddedTokens {
  public:
    // Adds t, or updates the entry with the same id; call index() after the last add.
    void add(AddedToken t);
    void index();

    // A span of the input: an added token (id >= 0) or plain text (id == -1).
    struct Piece {
        size_t begin, end;
        int32_t id;
    };
    std::vector<Piece> split(std::string_view text) const;

    const std::vector<AddedToken> & tokens() const { return tokens_; }

  private:
    bool matches_at(const AddedToken & t, std::string_view text, size_t pos) const;

    std::vector<AddedToken> tokens_;
    std::array<std::vector<uint32_t>, 256> by_first_byte_;  // indices into tokens_, longest first
};

}  // namespace tinkerd::tokenizer
