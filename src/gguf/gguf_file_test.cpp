// GgufFile on hand-built files: metadata and tensors read back, and every malformed or truncated
// file gives an error naming what is wrong; unsupported types, architectures and tokenizers are named.
#include "gguf/gguf_file.h"

#include <cmath>
#include <cstring>

#include <gtest/gtest.h>

#include "gguf/convert.h"
#include "gguf/test_builder.h"

namespace tinkerd::gguf {
namespace {

Builder small_file() {
    Builder b;
    b.kv_str("general.architecture", "llama");
    b.kv_u32("llama.block_count", 1);
    b.kv_strings("tokenizer.ggml.tokens", {"a", "b", "ab"});
    b.tensor("output_norm.weight", 0, {4}, floats({1, 2, 3, 4}));
    b.tensor("token_embd.weight", 0, {4, 3}, floats(std::vector<float>(12, 0.5f)));
    return b;
}

std::string parse_error(const std::vector<uint8_t> & bytes) {
    auto file = GgufFile::parse(bytes.data(), bytes.size(), "t.gguf");
    return file.ok() ? "" : file.error().message;
}

// Found by gguf_fuzz: a FLOAT32 value outside int64's range made the integer view a UB cast.
TEST(GgufFile, FloatMetadataOutsideInt64SaturatesItsIntegerView) {
    Builder b = small_file();
    const std::pair<const char *, float> values[] = {{"big", 4.8e21f}, {"small", -4.8e21f}, {"nan", NAN}, {"x", -2.5f}};
    for (const auto & [key, value] : values) {
        Builder::put_str(b.head, key);
        Builder::put<uint32_t>(b.head, 6);  // FLOAT32
        Builder::put<float>(b.head, value);
        ++b.n_kv;
    }
    const auto bytes = b.bytes();
    auto file = GgufFile::parse(bytes.data(), bytes.size(), "t.gguf");
    ASSERT_TRUE(file.ok()) << file.error().message;
    EXPECT_EQ((*file)->find("big")->i, INT64_MAX);
    EXPECT_EQ((*file)->find("small")->i, INT64_MIN);
    EXPECT_EQ((*file)->find("nan")->i, 0);
    EXPECT_EQ((*file)->find("x")->i, -2);
    EXPECT_EQ((*file)->get_float("big").value(), static_cast<double>(4.8e21f));
}

TEST(GgufFile, ReadsMetadataAndTensors) {
    const auto bytes = small_file().bytes();
    auto file = GgufFile::parse(bytes.data(), bytes.size(), "t.gguf");
    ASSERT_TRUE(file.ok()) << file.error().message;
    EXPECT_EQ((*file)->version(), 3u);
    EXPECT_EQ((*file)->get_string("general.architecture").value(), "llama");
    EXPECT_EQ((*file)->get_int("llama.block_count").value(), 1);
    EXPECT_EQ((*file)->find("tokenizer.ggml.tokens")->strings, (std::vector<std::string>{"a", "b", "ab"}));
    const TensorInfo * embd = (*file)->find_tensor("token_embd.weight");
    ASSERT_NE(embd, nullptr);
    EXPECT_EQ(embd->shape, (std::vector<int64_t>{3, 4}));  // GGUF dims reversed
    EXPECT_EQ(embd->n_bytes, 48u);
    float first;
    std::memcpy(&first, (*file)->find_tensor("output_norm.weight")->data, 4);
    EXPECT_EQ(first, 1.0f);
    EXPECT_NE((*file)->get_int("general.architecture").error().message.find("expected an integer"), std::string::npos);
    EXPECT_NE((*file)->get_string("nope").error().message.find("'nope' is missing"), std::string::npos);
}

TEST(GgufFile, EveryTruncationIsANamedError) {
    const auto bytes = small_file().bytes();
    for (size_t n = 0; n < bytes.size() - 32; ++n) {  // the last tensor's padding is not needed
        const std::vector<uint8_t> cut(bytes.begin(), bytes.begin() + static_cast<std::ptrdiff_t>(n));
        const std::string error = parse_error(cut);
        ASSERT_FALSE(error.empty()) << "a file cut at " << n << " bytes parsed";
        EXPECT_NE(error.find("t.gguf"), std::string::npos) << error;
    }
}

// Every single-byte corruption either parses (a changed value) or gives an error; never a crash or an
// out-of-bounds read (this test runs under ASan+UBSan in make asan-test).
TEST(GgufFile, CorruptedBytesNeverCrash) {
    const auto bytes = small_file().bytes();
    size_t errors = 0;
    for (size_t i = 0; i < bytes.size(); ++i) {
        for (uint8_t value : {uint8_t{0x00}, uint8_t{0xFF}, uint8_t{0x80}}) {
            auto bad = bytes;
            bad[i] = value;
            auto file = GgufFile::parse(bad.data(), bad.size(), "t.gguf");
            if (!file.ok()) {
                ++errors;
                EXPECT_NE(file.error().message.find("t.gguf"), std::string::npos) << file.error().message;
            } else {
                for (const TensorInfo & t : (*file)->tensors()) {
                    EXPECT_LE(t.data + t.n_bytes, bad.data() + bad.size()) << "tensor " << t.name << " past the end";
                }
            }
        }
    }
    EXPECT_GT(errors, bytes.size() / 4);  // most header bytes matter
}

TEST(GgufFile, MalformedHeadersAreNamed) {
    auto bytes = small_file().bytes();
    bytes[0] = 'X';
    EXPECT_NE(parse_error(bytes).find("bad magic"), std::string::npos);
    Builder v1 = small_file();
    v1.version = 1;
    EXPECT_NE(parse_error(v1.bytes()).find("GGUF version 1 is not supported"), std::string::npos);
    bytes = small_file().bytes();
    const uint64_t huge = 1ull << 60;
    std::memcpy(bytes.data() + 8, &huge, 8);  // tensor count
    EXPECT_NE(parse_error(bytes).find("cannot fit"), std::string::npos);
}

TEST(GgufFile, BadTensorsAreNamed) {
    Builder b;
    b.tensor("w", 16, {32}, std::vector<uint8_t>(64));  // IQ2_XXS: layout unknown to us
    EXPECT_NE(parse_error(b.bytes()).find("tensor 'w' has unsupported type IQ2_XXS"), std::string::npos);
    Builder c;
    c.tensor("w", 99, {32}, std::vector<uint8_t>(64));
    EXPECT_NE(parse_error(c.bytes()).find("type 99"), std::string::npos);
    Builder d;
    d.tensor("q", 2, {31}, std::vector<uint8_t>(18));  // Q4_0 rows must be whole 32-blocks
    EXPECT_NE(parse_error(d.bytes()).find("not a whole number of Q4_0 blocks"), std::string::npos);
    Builder e;
    e.tensor("big", 0, {1000}, floats({1}));  // data past the end
    EXPECT_NE(parse_error(e.bytes()).find("tensor 'big' data"), std::string::npos);
    Builder f;
    f.tensor("x", 0, {1}, floats({1}));
    f.tensor("x", 0, {1}, floats({1}));
    EXPECT_NE(parse_error(f.bytes()).find("tensor 'x' appears twice"), std::string::npos);
}

TEST(GgufConvert, UnsupportedArchitectureTokenizerAndTensorAreNamed) {
    Builder b;
    b.kv_str("general.architecture", "gpt2");
    auto bytes = b.bytes();
    auto file = GgufFile::parse(bytes.data(), bytes.size(), "t.gguf");
    ASSERT_TRUE(file.ok());
    EXPECT_NE(hf_config(**file).error().message.find("architecture 'gpt2' is not supported"), std::string::npos);

    Builder t;
    t.kv_str("tokenizer.ggml.model", "bert");
    bytes = t.bytes();
    file = GgufFile::parse(bytes.data(), bytes.size(), "t.gguf");
    EXPECT_NE(hf_tokenizer(**file).error().message.find("tokenizer model 'bert'"), std::string::npos);

    Builder m = small_file();
    for (const char * key : {"llama.embedding_length", "llama.feed_forward_length", "llama.attention.head_count",
                             "llama.context_length"}) {
        m.kv_u32(key, 4);
    }
    m.tensor("blk.0.mystery.weight", 0, {4}, floats({0, 0, 0, 0}));
    bytes = m.bytes();
    file = GgufFile::parse(bytes.data(), bytes.size(), "t.gguf");
    ASSERT_TRUE(file.ok()) << file.error().message;
    auto config = hf_config(**file);
    ASSERT_TRUE(config.ok()) << config.error().message;
    EXPECT_EQ((*config)["architectures"][0], "LlamaForCausalLM");
    EXPECT_EQ((*config)["tie_word_embeddings"], true);
    EXPECT_EQ((*config)["vocab_size"], 3);
    bool quantised = false;
    auto tensors = hf_tensors(**file, *config, quantised);
    ASSERT_FALSE(tensors.ok());
    EXPECT_NE(tensors.error().message.find("tensor 'blk.0.mystery.weight' has no counterpart"), std::string::npos);
}

// qwen3moe: the expert fields of config.json, and each stacked expert tensor [E, out, in] split per expert.
TEST(GgufConvert, Qwen3MoeConfigAndExpertsSplit) {
    Builder b;
    b.kv_str("general.architecture", "qwen3moe");
    for (const auto & [key, value] : std::vector<std::pair<std::string, uint32_t>>{{"block_count", 1},
                                                                                   {"embedding_length", 2},
                                                                                   {"attention.head_count", 1},
                                                                                   {"context_length", 8},
                                                                                   {"expert_count", 2},
                                                                                   {"expert_used_count", 1},
                                                                                   {"expert_feed_forward_length", 3}}) {
        b.kv_u32("qwen3moe." + key, value);
    }
    b.kv_strings("tokenizer.ggml.tokens", {"a", "b"});
    std::vector<float> gate(12);
    for (size_t i = 0; i < gate.size(); ++i)
        gate[i] = static_cast<float>(i);
    b.tensor("blk.0.ffn_gate_exps.weight", 0, {2, 3, 2}, floats(gate));  // [E=2, out=3, in=2]
    b.tensor("blk.0.ffn_down_exps.weight", 0, {3, 2, 2}, floats(gate));  // [E=2, out=2, in=3]
    b.tensor("blk.0.ffn_gate_inp.weight", 0, {2, 2}, floats({1, 2, 3, 4}));
    auto bytes = b.bytes();
    auto file = GgufFile::parse(bytes.data(), bytes.size(), "t.gguf");
    ASSERT_TRUE(file.ok()) << file.error().message;
    auto config = hf_config(**file);
    ASSERT_TRUE(config.ok()) << config.error().message;
    EXPECT_EQ((*config)["architectures"][0], "Qwen3MoeForCausalLM");
    EXPECT_EQ((*config)["model_type"], "qwen3_moe");
    EXPECT_EQ((*config)["num_experts"], 2);
    EXPECT_EQ((*config)["num_experts_per_tok"], 1);
    EXPECT_EQ((*config)["moe_intermediate_size"], 3);
    EXPECT_EQ((*config)["intermediate_size"], 3);  // no feed_forward_length: the expert width
    EXPECT_EQ((*config)["norm_topk_prob"], true);
    bool quantised = false;
    auto tensors = hf_tensors(**file, *config, quantised);
    ASSERT_TRUE(tensors.ok()) << tensors.error().message;
    EXPECT_EQ(tensors->size(), 5u);
    const model::OwnedTensor & gate1 = tensors->at("model.layers.0.mlp.experts.1.gate_proj.weight");
    EXPECT_EQ(gate1.shape, (std::vector<int64_t>{3, 2}));
    float first = 0;
    std::memcpy(&first, gate1.bytes.data(), 4);
    EXPECT_EQ(first, 6.0f);  // expert 1 starts after expert 0's 3 x 2 values
    EXPECT_EQ(tensors->at("model.layers.0.mlp.experts.0.down_proj.weight").shape, (std::vector<int64_t>{2, 3}));
    EXPECT_TRUE(tensors->count("model.layers.0.mlp.gate.weight"));

    Builder unnormalised = b;  // an explicit expert_weights_norm = false is followed
    unnormalised.kv_u32("qwen3moe.expert_weights_norm", 0);
    bytes = unnormalised.bytes();
    file = GgufFile::parse(bytes.data(), bytes.size(), "t.gguf");
    ASSERT_TRUE(file.ok());
    auto unnormalised_config = hf_config(**file);
    ASSERT_TRUE(unnormalised_config.ok());
    EXPECT_EQ((*unnormalised_config)["norm_topk_prob"], false);

    Builder bad = b;  // an expert tensor whose width disagrees with expert_feed_forward_length
    bad.tensor("blk.0.ffn_up_exps.weight", 0, {2, 4, 2}, floats(std::vector<float>(16)));
    bytes = bad.bytes();
    file = GgufFile::parse(bytes.data(), bytes.size(), "t.gguf");
    ASSERT_TRUE(file.ok());
    tensors = hf_tensors(**file, *config, quantised);
    ASSERT_FALSE(tensors.ok());
    EXPECT_NE(tensors.error().message.find("expected [2,3,2]"), std::string::npos) << tensors.error().message;
}

}  // namespace
}  // namespace tinkerd::gguf
