// tokenizer_fuzz: two modes. Input without a NUL byte: text encoded (with and without special tokens)
// by a real byte-level BPE tokenizer (Qwen3's, cut to 4k tokens: fuzz/data) and a SentencePiece-style one
// (stories260K), decoded back in one go and through IncrementalDecoder; the input's bytes as token ids are
// decoded too. Input with a NUL: a tokenizer.json before it (Tokenizer::from_json_text), text after it.
#include <cstddef>
#include <cstdint>
#include <cstdlib>
#include <cstring>
#include <memory>
#include <string>
#include <vector>

#include "fuzz_util.h"
#include "tokenizer/tokenizer.h"

namespace {

using tinkerd::tokenizer::IncrementalDecoder;
using tinkerd::tokenizer::Tokenizer;

std::unique_ptr<Tokenizer> load(const char * file) {
    auto tok = Tokenizer::from_json_text(tinkerd::fuzz::read_data_file(file), "", file);
    if (!tok.ok()) {
        std::abort();  // fuzz/data missing or no longer loadable
    }
    return std::move(*tok);
}

const std::vector<std::unique_ptr<Tokenizer>> & real_tokenizers() {
    static const auto all = [] {
        std::vector<std::unique_ptr<Tokenizer>> v;
        v.push_back(load("qwen3_small_tokenizer.json"));
        v.push_back(load("stories260k_tokenizer.json"));
        return v;
    }();
    return all;
}

void round_trip(const Tokenizer & tok, std::string_view text) {
    for (bool special : {false, true}) {
        std::vector<int32_t> ids = tok.encode(text, special);
        for (int32_t id : ids) {
            if (id < 0 || static_cast<size_t>(id) >= tok.vocab_size()) {
                __builtin_trap();  // encode only returns ids of the vocabulary
            }
        }
        (void)tok.decode(ids, !special);
        IncrementalDecoder stream(tok, special, !special);
        for (int32_t id : ids) {
            (void)stream.push(id);
        }
        (void)stream.flush();
    }
}

// The input's bytes as little-endian int32 ids (any value: unknown ids must be skipped).
void decode_ids(const Tokenizer & tok, std::string_view bytes) {
    std::vector<int32_t> ids(bytes.size() / 4);
    if (!ids.empty()) {
        std::memcpy(ids.data(), bytes.data(), ids.size() * 4);
    }
    (void)tok.decode(ids, false);
    IncrementalDecoder stream(tok, false);
    for (int32_t id : ids) {
        (void)stream.push(id % 70000);
        (void)tok.token_text(id);
        (void)tok.is_special(id);
    }
    (void)stream.flush();
}

}  // namespace

extern "C" int LLVMFuzzerTestOneInput(const uint8_t * data, size_t size) {
    const std::string_view input = tinkerd::fuzz::as_view(data, size);
    const auto [tokenizer_json, text] = tinkerd::fuzz::split_nul(input);
    if (tokenizer_json.size() == input.size()) {
        for (const auto & tok : real_tokenizers()) {
            round_trip(*tok, input);
            decode_ids(*tok, input);
        }
        return 0;
    }
    if (tinkerd::fuzz::too_deep(tokenizer_json)) {
        return 0;
    }
    auto tok = Tokenizer::from_json_text(std::string(tokenizer_json), "", "fuzz.json");
    if (tok.ok()) {
        round_trip(**tok, text);
        decode_ids(**tok, text);
    }
    return 0;
}
