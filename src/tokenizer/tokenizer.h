// Tokenizer: our own reader of Hugging Face tokenizer.json (+ tokenizer_config.json): byte-level BPE
// with the model's regex pre-tokenizer (Qwen2/3, Llama 3) and SentencePiece-style BPE with byte fallback
// (Llama 2, stories260K). encode/decode are const and thread-safe; IncrementalDecoder streams text.
#pragma once

#include <cstdint>
#include <memory>
#include <string>
#include <string_view>
#include <vector>

#include <nlohmann/json_fwd.hpp>

#include "common/status.h"

namespace tinkerd::tokenizer {

class BpeModel;
class Normalizer;
class PreTokenizer;
class Decoder;
class AddedTokens;

class Tokenizer {
  public:
    // Reads model_dir/tokenizer.json, plus tokenizer_config.json and generation_config.json when
    // present. Errors name the file and what is missing or unsupported.
    static Result<std::unique_ptr<Tokenizer>> load(const std::string & model_dir);
    // The same from JSON text (config_json may be empty); `name` is used in error messages.
    static Result<std::unique_ptr<Tokenizer>> from_json_text(const std::string & tokenizer_json,
                                                             const std::string & config_json,
                                                             const std::string & name = "tokenizer.json");
    ~Tokenizer();

    // Ids of text; added/special tokens written in the text are matched. add_special_tokens adds what
    // the post-processor (or tokenizer_config's add_bos_token/add_eos_token) says, e.g. BOS.
    std::vector<int32_t> encode(std::string_view text, bool add_special_tokens) const;
    // Text of ids (invalid UTF-8 becomes U+FFFD); unknown ids are skipped.
    std::string decode(const std::vector<int32_t> & ids, bool skip_special_tokens) const;

    int32_t token_to_id(std::string_view token) const;  // -1 when unknown
    // The bytes one token contributes in the middle of a text (a SentencePiece "▁" is a space; may be
    // part of a UTF-8 character); "" when out of range. For per-token logprob listings.
    std::string token_text(int32_t id) const;
    std::string id_to_token(int32_t id) const;                 // "" when out of range
    size_t vocab_size() const { return id_to_token_.size(); }  // including added tokens
    bool is_special(int32_t id) const;
    int32_t bos_id() const { return bos_id_; }  // -1 when the model has none
    const std::vector<int32_t> & eos_ids() const { return eos_ids_; }

  private:
    friend class IncrementalDecoder;
    Tokenizer();
    // init_fields, with nlohmann's exceptions (a field of the wrong type) as INVALID_ARGUMENT.
    Result<void> init(const std::string & tokenizer_json, const std::string & config_json);
    Result<void> init_fields(const std::string & tokenizer_json, const std::string & config_json);
    Result<void> load_added_tokens(const nlohmann::json & tokenizer, const nlohmann::json & config);
    Result<void> load_post_processor(const nlohmann::json & post_processor, const nlohmann::json & config);
    void load_special_ids(const nlohmann::json & config);
    void build_id_table();
    // Appends the raw decoded bytes of one token (no whole-text Strip, no UTF-8 repair).
    void token_bytes(int32_t id, bool first, std::string & out) const;

    std::unique_ptr<BpeModel> bpe_;
    std::unique_ptr<Normalizer> normalizer_;
    std::unique_ptr<PreTokenizer> pre_tokenizer_;
    std::unique_ptr<Decoder> decoder_;
    std::unique_ptr<AddedTokens> added_;
    std::vector<std::string> id_to_token_;
    std::vector<bool> special_;
    std::vector<int32_t> prefix_ids_, suffix_ids_;  // added around the text by add_special_tokens
    int32_t bos_id_ = -1;
    std::vector<int32_t> eos_ids_;
    std::string generation_config_;  // set by load() before init()
};

// Streams the text of ids one at a time: push() returns only complete UTF-8 (never a split multi-byte
// character; incomplete bytes are held back until the next id), flush() returns what is left.
class IncrementalDecoder {
  public:
    // continuation: the tokens continue a text decoded elsewhere (a completion after its prompt), so the
    // decoder's start-of-text rules (SentencePiece's leading-space strip) do not apply.
    explicit IncrementalDecoder(const Tokenizer & tokenizer, bool skip_special_tokens = true,
                                bool continuation = false);
    std::string push(int32_t id);
    std::string flush();

  private:
    const Tokenizer & tok_;
    bool skip_special_;
    bool first_ = true;
    size_t strip_left_;    // leading strip chars still to remove (SentencePiece prefix space)
    std::string pending_;  // decoded bytes not returned yet
};

}  // namespace tinkerd::tokenizer
