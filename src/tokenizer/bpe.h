// The BPE model of tokenizer.json (internal to src/tokenizer): vocab, ranked merges in a hash map of id
// pairs, byte fallback / unk, ignore_merges, and a per-word result cache (thread-safe, bounded).
#pragma once

#include <array>
#include <cstdint>
#include <memory>
#include <mutex>
#include <string>
#include <string_view>
#include <unordered_map>
#include <vector>

#include <nlohmann/json.hpp>

#include "common/status.h"

namespace tinkerd::tokenizer {

struct StringHash {
    using is_transparent = void;
    size_t operator()(std::string_view s) const { return std::hash<std::string_view>{}(s); }
};
using Vocab = std::unordered_map<std::string, int32_t, StringHash, std::equal_to<>>;

class BpeModel {
  public:
    // Parses the "model" object; refuses non-BPE models, naming their type.
    static Result<std::unique_ptr<BpeModel>> from_json(const nlohmann::json & model);

    // Appends the ids of one pre-tokenized word.
    void encode_word(std::string_view word, std::vector<int32_t> & out) const;

    const Vocab & vocab() const { return vocab_; }
    bool byte_fallback() const { return byte_fallback_; }

  private:
    struct Merge {
        int32_t rank;
        int32_t id;
    };
    Result<void> load_merges(const nlohmann::json & merges);
    void initial_symbols(std::string_view word, std::vector<int32_t> & ids) const;
    bool has_byte_ids(std::string_view bytes) const;
    void merge(std::vector<int32_t> & ids) const;
    const Merge * find_merge(int32_t a, int32_t b) const;

    Vocab vocab_;
    std::unordered_map<uint32_t, int32_t> char_ids_;  // single-code-point tokens
    std::unordered_map<uint64_t, Merge> merges_;      // (left id << 32 | right id) -> rank, merged id
    std::array<int32_t, 256> byte_ids_{};             // <0xNN> tokens, -1 when missing
    int32_t unk_id_ = -1;
    bool byte_fallback_ = false;
    bool fuse_unk_ = false;
    bool ignore_merges_ = false;

    static constexpr size_t MAX_CACHED_WORD = 128;
    static constexpr size_t MAX_CACHE_ENTRIES = 1 << 18;
    mutable std::mutex cache_mu_;
    mutable std::unordered_map<std::string, std::vector<int32_t>, StringHash, std::equal_to<>> cache_;
};

}  // namespace tinkerd::tokenizer
