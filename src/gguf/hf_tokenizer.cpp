// tokenizer.json and tokenizer_config.json from a GGUF vocabulary (see convert.h): byte-level BPE
// ("gpt2": tokens + merges, pre-tokenizer chosen by tokenizer.ggml.pre) or SentencePiece-style BPE
// ("llama": tokens + scores, merges derived from the scores, byte fallback).
#include <algorithm>
#include <tuple>
#include <unordered_map>

#include "gguf/convert.h"

namespace tinkerd::gguf {
namespace {

using nlohmann::json;

// llama.cpp token types.
constexpr int TOKEN_NORMAL = 1, TOKEN_UNKNOWN = 2, TOKEN_CONTROL = 3, TOKEN_USER = 4;

// Split patterns of the Hugging Face tokenizers these pre-tokenizer names stand for.
constexpr const char * LLAMA3_PATTERN =
    "(?i:'s|'t|'re|'ve|'m|'ll|'d)|[^\\r\\n\\p{L}\\p{N}]?\\p{L}+|\\p{N}{1,3}| ?[^\\s\\p{L}\\p{N}]+[\\r\\n]*|"
    "\\s*[\\r\\n]+|\\s+(?!\\S)|\\s+";
constexpr const char * QWEN2_PATTERN =
    "(?i:'s|'t|'re|'ve|'m|'ll|'d)|[^\\r\\n\\p{L}\\p{N}]?\\p{L}+|\\p{N}| ?[^\\s\\p{L}\\p{N}]+[\\r\\n]*|"
    "\\s*[\\r\\n]+|\\s+(?!\\S)|\\s+";

struct Vocab {
    const std::vector<std::string> * tokens = nullptr;
    std::vector<int> types;      // one per token (NORMAL when the file has none)
    std::vector<double> scores;  // one per token ("llama"), else empty
};

Result<Vocab> read_vocab(const GgufFile & file) {
    const Value * tokens = file.find("tokenizer.ggml.tokens");
    if (!tokens || tokens->type != ValueType::ARRAY || tokens->elem_type != ValueType::STRING ||
        tokens->strings.empty()) {
        return not_found(file.name() + ": no tokenizer.ggml.tokens string array");
    }
    Vocab v;
    v.tokens = &tokens->strings;
    v.types.assign(tokens->strings.size(), TOKEN_NORMAL);
    const size_t n = tokens->strings.size();
    for (const char * key : {"tokenizer.ggml.token_type", "tokenizer.ggml.scores"}) {
        const Value * arr = file.find(key);
        if (!arr)
            continue;
        if (arr->type != ValueType::ARRAY || arr->numbers.size() != n) {
            return invalid_argument(file.name() + ": " + key + " must be a number array of " + std::to_string(n) +
                                    " entries");
        }
        if (std::string(key).ends_with("token_type")) {
            std::transform(arr->numbers.begin(), arr->numbers.end(), v.types.begin(),
                           [](double x) { return static_cast<int>(x); });
        } else {
            v.scores = arr->numbers;
        }
    }
    return v;
}

json byte_level(bool use_regex) {
    return {{"type", "ByteLevel"}, {"add_prefix_space", false}, {"trim_offsets", true}, {"use_regex", use_regex}};
}

json split(const char * pattern) {
    return {{"type", "Split"}, {"pattern", {{"Regex", pattern}}}, {"behavior", "Isolated"}, {"invert", false}};
}

// The pre-tokenizer of a byte-level vocabulary, by tokenizer.ggml.pre.
Result<json> byte_level_pre_tokenizer(const std::string & pre, const std::string & file_name) {
    if (pre.empty() || pre == "default" || pre == "gpt2" || pre == "gpt-2") {
        return byte_level(true);
    }
    if (pre == "smollm") {  // single digits, then GPT-2's split
        json digits = {{"type", "Digits"}, {"individual_digits", true}};
        return json{{"type", "Sequence"}, {"pretokenizers", {digits, byte_level(true)}}};
    }
    if (pre == "llama-bpe" || pre == "llama3" || pre == "qwen2") {
        const char * pattern = pre == "qwen2" ? QWEN2_PATTERN : LLAMA3_PATTERN;
        return json{{"type", "Sequence"}, {"pretokenizers", {split(pattern), byte_level(false)}}};
    }
    return unsupported(file_name + ": pre-tokenizer '" + pre +
                       "' (tokenizer.ggml.pre) is not supported (default, gpt2, smollm, llama-bpe, qwen2)");
}

// SentencePiece BPE merges: every split of a normal piece into two known pieces, the pieces with the
// highest scores merged first.
json merges_from_scores(const Vocab & v) {
    const auto & tokens = *v.tokens;
    std::unordered_map<std::string, size_t> ids;
    for (size_t i = 0; i < tokens.size(); ++i) {
        ids.emplace(tokens[i], i);
    }
    std::vector<std::tuple<double, size_t, size_t, size_t>> found;  // (-score, piece, left, right)
    for (size_t p = 0; p < tokens.size(); ++p) {
        const std::string & piece = tokens[p];
        if (v.types[p] != TOKEN_NORMAL)
            continue;
        for (size_t k = 1; k < piece.size(); ++k) {
            if ((static_cast<unsigned char>(piece[k]) & 0xC0) == 0x80)
                continue;  // inside a UTF-8 character
            const auto a = ids.find(piece.substr(0, k)), b = ids.find(piece.substr(k));
            if (a != ids.end() && b != ids.end()) {
                found.emplace_back(-v.scores[p], p, a->second, b->second);
            }
        }
    }
    std::sort(found.begin(), found.end());
    json merges = json::array();
    for (const auto & [score, p, a, b] : found) {
        merges.push_back({tokens[a], tokens[b]});
    }
    return merges;
}

json added_tokens(const Vocab & v) {
    json added = json::array();
    for (size_t i = 0; i < v.tokens->size(); ++i) {
        const int type = v.types[i];
        if (type != TOKEN_CONTROL && type != TOKEN_USER && type != TOKEN_UNKNOWN)
            continue;
        added.push_back({{"id", i},
                         {"content", (*v.tokens)[i]},
                         {"single_word", false},
                         {"lstrip", false},
                         {"rstrip", false},
                         {"normalized", false},
                         {"special", type != TOKEN_USER}});
    }
    return added;
}

json vocab_object(const Vocab & v) {
    json vocab = json::object();
    for (size_t i = 0; i < v.tokens->size(); ++i) {
        vocab[(*v.tokens)[i]] = i;
    }
    return vocab;
}

std::string token_at(const GgufFile & file, const std::string & key) {
    const Value * tokens = file.find("tokenizer.ggml.tokens");
    auto id = file.get_int(key);
    if (!tokens || !id.ok() || *id < 0 || static_cast<size_t>(*id) >= tokens->strings.size()) {
        return "";
    }
    return tokens->strings[static_cast<size_t>(*id)];
}

bool flag_or(const GgufFile & file, const std::string & key, bool fallback) {
    const Value * v = file.find(key);
    return v && v->type == ValueType::BOOL ? v->i != 0 : fallback;
}

// The SentencePiece-style parts: normalizer, decoder and model options.
void sentencepiece_parts(const GgufFile & file, const Vocab & v, json & tok) {
    const bool prefix = flag_or(file, "tokenizer.ggml.add_space_prefix", true);
    json replace = {{"type", "Replace"}, {"pattern", {{"String", " "}}}, {"content", "\u2581"}};
    tok["normalizer"] =
        prefix ? json{{"type", "Sequence"}, {"normalizers", {{{"type", "Prepend"}, {"prepend", "\u2581"}}, replace}}}
               : replace;
    json decoders = {{{"type", "Replace"}, {"pattern", {{"String", "\u2581"}}}, {"content", " "}},
                     {{"type", "ByteFallback"}},
                     {{"type", "Fuse"}}};
    if (prefix) {
        decoders.push_back({{"type", "Strip"}, {"content", " "}, {"start", 1}, {"stop", 0}});
    }
    tok["decoder"] = {{"type", "Sequence"}, {"decoders", decoders}};
    tok["model"]["merges"] = merges_from_scores(v);
    tok["model"]["byte_fallback"] = true;
    tok["model"]["fuse_unk"] = true;
    const std::string unk = token_at(file, "tokenizer.ggml.unknown_token_id");
    tok["model"]["unk_token"] = unk.empty() ? json() : json(unk);
}

}  // namespace

Result<json> hf_tokenizer(const GgufFile & file) {
    auto kind = file.get_string("tokenizer.ggml.model");
    TRY_STATUS(kind);
    if (*kind != "gpt2" && *kind != "llama") {
        return unsupported(file.name() + ": tokenizer model '" + *kind +
                           "' (tokenizer.ggml.model) is not supported (gpt2, llama)");
    }
    auto vocab = read_vocab(file);
    TRY_STATUS(vocab);
    json tok = {{"version", "1.0"},         {"truncation", nullptr},
                {"padding", nullptr},       {"added_tokens", added_tokens(*vocab)},
                {"normalizer", nullptr},    {"pre_tokenizer", nullptr},
                {"post_processor", nullptr}};
    tok["model"] = {{"type", "BPE"},     {"dropout", nullptr},     {"unk_token", nullptr},
                    {"fuse_unk", false}, {"byte_fallback", false}, {"vocab", vocab_object(*vocab)}};
    if (*kind == "llama") {
        if (vocab->scores.empty()) {
            return invalid_argument(file.name() + ": a 'llama' tokenizer needs tokenizer.ggml.scores");
        }
        sentencepiece_parts(file, *vocab, tok);
        return tok;
    }
    const Value * merges = file.find("tokenizer.ggml.merges");
    if (!merges || merges->elem_type != ValueType::STRING) {
        return not_found(file.name() + ": a 'gpt2' tokenizer needs the tokenizer.ggml.merges string array");
    }
    auto pre = file.get_string("tokenizer.ggml.pre");
    auto pre_tokenizer = byte_level_pre_tokenizer(pre.ok() ? *pre : "", file.name());
    TRY_STATUS(pre_tokenizer);
    tok["pre_tokenizer"] = *pre_tokenizer;
    tok["decoder"] = byte_level(true);
    tok["model"]["merges"] = merges->strings;
    tok["model"]["ignore_merges"] = pre.ok() && (*pre == "llama-bpe" || *pre == "llama3");
    return tok;
}

Result<json> hf_tokenizer_config(const GgufFile & file) {
    auto kind = file.get_string("tokenizer.ggml.model");
    TRY_STATUS(kind);
    json config = {{"add_bos_token", flag_or(file, "tokenizer.ggml.add_bos_token", *kind == "llama")},
                   {"add_eos_token", flag_or(file, "tokenizer.ggml.add_eos_token", false)},
                   {"clean_up_tokenization_spaces", false},
                   {"model_max_length", 1 << 20}};
    for (const char * name : {"bos", "eos", "unk", "pad"}) {
        const std::string key =
            name == std::string("unk") ? "unknown" : (name == std::string("pad") ? "padding" : name);
        const std::string token = token_at(file, "tokenizer.ggml." + key + "_token_id");
        if (!token.empty()) {
            config[std::string(name) + "_token"] = token;
        }
    }
    if (auto chat = file.get_string("tokenizer.chat_template"); chat.ok()) {
        config["chat_template"] = *chat;
    }
    return config;
}

}  // namespace tinkerd::gguf
