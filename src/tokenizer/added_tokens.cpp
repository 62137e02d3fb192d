// Added-token matching: a first-byte index over the token contents, longest candidate first, so that
// "<|im_start|>" or "<|eot_id|>" inside user text become their single ids as in Hugging Face.
#include "tokenizer/added_tokens.h"

#include <algorithm>
#include <cctype>

namespace tinkerd::tokenizer {

namespace {

bool is_space(char c) {
    return c == ' ' || c == '\t' || c == '\n' || c == '\r' || c == '\v' || c == '\f';
}

// Word characters for single_word: ASCII alphanumerics, '_' and any non-ASCII byte.
bool is_word_byte(char c) {
    const auto u = static_cast<unsigned char>(c);
    return u >= 0x80 || std::isalnum(u) || c == '_';
}

}  // namespace

void AddedTokens::add(AddedToken t) {
    if (t.content.empty()) {
        return;
    }
    for (AddedToken & existing : tokens_) {
        if (existing.id == t.id) {
            existing = std::move(t);
            return;
        }
    }
    tokens_.push_back(std::move(t));
}

void AddedTokens::index() {
    for (auto & v : by_first_byte_) {
        v.clear();
    }
    for (uint32_t i = 0; i < tokens_.size(); ++i) {
        by_first_byte_[static_cast<unsigned char>(tokens_[i].content[0])].push_back(i);
    }
    for (auto & v : by_first_byte_) {
        std::stable_sort(v.begin(), v.end(), [this](uint32_t a, uint32_t b) {
            return tokens_[a].content.size() > tokens_[b].content.size();
        });
    }
}

bool AddedTokens::matches_at(const AddedToken & t, std::string_view text, size_t pos) const {
    if (text.compare(pos, t.content.size(), t.content) != 0) {
        return false;
    }
    if (!t.single_word) {
        return true;
    }
    const size_t end = pos + t.content.size();
    const bool word_before = pos > 0 && is_word_byte(text[pos - 1]);
    const bool word_after = end < text.size() && is_word_byte(text[end]);
    return !word_before && !word_after;
}

std::vector<AddedTokens::Piece> AddedTokens::split(std::string_view text) const {
    std::vector<Piece> out;
    size_t last = 0;  // end of the previous piece
    for (size_t pos = 0; pos < text.size();) {
        const AddedToken * hit = nullptr;
        for (const uint32_t i : by_first_byte_[static_cast<unsigned char>(text[pos])]) {
            if (matches_at(tokens_[i], text, pos)) {
                hit = &tokens_[i];
                break;
            }
        }
        if (hit == nullptr) {
            ++pos;
            continue;
        }
        size_t begin = pos, end = pos + hit->content.size();
        while (hit->lstrip && begin > last && is_space(text[begin - 1])) {
            --begin;
        }
        while (hit->rstrip && end < text.size() && is_space(text[end])) {
            ++end;
        }
        if (begin > last) {
            out.push_back({last, begin, -1});
        }
        out.push_back({begin, end, hit->id});
        last = pos = end;
    }
    if (last < text.size()) {
        out.push_back({last, text.size(), -1});
    }
    return out;
}

}  // namespace tinkerd::tokenizer
