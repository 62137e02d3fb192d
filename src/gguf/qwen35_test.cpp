// Qwen3.5 GGUFs (qwen35.cpp) on a hand-built file: config.json's hybrid fields, each value transform of
// llama.cpp's converter undone on known values (V heads tiled -> grouped with HK = 2 < HV = 4, -exp(A_log),
// (1 + w) norms, conv1d's shape), which tensors stay quantised, and the MTP layer skipped.
#include "gguf/qwen35.h"

#include <cmath>
#include <cstring>
#include <memory>

#include <gtest/gtest.h>

#include "gguf/convert.h"
#include "gguf/test_builder.h"

namespace tinkerd::gguf {
namespace {

// Tiled slot of grouped V head g (HK = 2, 2 V heads per K head): g = k·2 + j lies at j·2 + k.
constexpr int TILED_OF[4] = {0, 2, 1, 3};

Builder qwen35_file() {
    Builder b;
    b.kv_str("general.architecture", "qwen35");
    for (const auto & [key, value] : std::vector<std::pair<std::string, uint32_t>>{{"block_count", 3},
                                                                                   {"nextn_predict_layers", 1},
                                                                                   {"embedding_length", 4},
                                                                                   {"attention.head_count", 1},
                                                                                   {"attention.key_length", 4},
                                                                                   {"context_length", 8},
                                                                                   {"feed_forward_length", 4},
                                                                                   {"rope.dimension_count", 1},
                                                                                   {"ssm.group_count", 2},
                                                                                   {"ssm.time_step_rank", 4},
                                                                                   {"ssm.state_size", 1},
                                                                                   {"ssm.inner_size", 4},
                                                                                   {"ssm.conv_kernel", 2}}) {
        b.kv_u32("qwen35." + key, value);
    }
    b.kv_bools("qwen35.attention.recurrent_layers", {true, false, false});
    b.kv_strings("tokenizer.ggml.tokens", {"a", "b"});
    std::vector<float> a(4), conv(16), out(16), beta(16);
    for (int g = 0; g < 4; ++g)
        a[TILED_OF[g]] = -std::exp(0.1f * static_cast<float>(g + 1));  // A_log = 0.1 (g + 1)
    for (int i = 0; i < 16; ++i) {
        conv[i] = out[i] = beta[i] = static_cast<float>(i);
    }
    b.tensor("token_embd.weight", 0, {4, 2}, floats(std::vector<float>(8, 0.5f)));
    b.tensor("blk.0.ssm_a", 0, {4}, floats(a));
    b.tensor("blk.0.attn_norm.weight", 0, {4}, floats({1.5f, 1.0f, 0.25f, 2.0f}));
    b.tensor("blk.0.ssm_conv1d.weight", 0, {2, 8}, floats(conv));      // [C = 2·HK·Dk + HV·Dv = 8, K = 2]
    b.tensor("blk.0.ssm_out.weight", 0, {4, 4}, floats(out));          // [hidden, HV·Dv]
    b.tensor("blk.0.ssm_beta.weight", 0, {4, 4}, floats(beta));        // [HV, hidden]
    b.tensor("blk.0.ssm_norm.weight", 0, {1}, floats({3.0f}));         // the gated norm: no offset
    b.tensor("blk.2.attn_norm.weight", 0, {4}, floats({1, 1, 1, 1}));  // the MTP layer
    return b;
}

// The file parsed (kept alive with its bytes) and its config.json.
struct Parsed {
    std::vector<uint8_t> bytes = qwen35_file().bytes();
    std::shared_ptr<GgufFile> file;
    nlohmann::json config;
    Parsed() {
        auto f = GgufFile::parse(bytes.data(), bytes.size(), "q.gguf");
        EXPECT_TRUE(f.ok()) << f.error().message;
        file = f.ok() ? *f : nullptr;
        auto c = file ? hf_config(*file) : Result<nlohmann::json>(invalid_argument("no file"));
        EXPECT_TRUE(c.ok()) << c.error().message;
        config = c.ok() ? *c : nlohmann::json();
    }
};

std::vector<float> values(const model::OwnedTensor & t) {
    std::vector<float> v(t.bytes.size() / 4);
    std::memcpy(v.data(), t.bytes.data(), t.bytes.size());
    return v;
}

TEST(GgufQwen35, ConfigHasTheHybridFieldsWithoutTheMtpLayer) {
    Parsed q;
    ASSERT_TRUE(q.file);
    const nlohmann::json * config = &q.config;
    EXPECT_EQ((*config)["architectures"][0], "Qwen3_5ForCausalLM");
    EXPECT_EQ((*config)["model_type"], "qwen3_5_text");
    EXPECT_EQ((*config)["num_hidden_layers"], 2);
    EXPECT_EQ((*config)["layer_types"], nlohmann::json({"linear_attention", "full_attention"}));
    EXPECT_EQ((*config)["linear_num_key_heads"], 2);
    EXPECT_EQ((*config)["linear_num_value_heads"], 4);
    EXPECT_EQ((*config)["linear_key_head_dim"], 1);
    EXPECT_EQ((*config)["linear_value_head_dim"], 1);
    EXPECT_EQ((*config)["linear_conv_kernel_dim"], 2);
    EXPECT_EQ((*config)["rope_parameters"]["partial_rotary_factor"], 0.25);
}

TEST(GgufQwen35, TransformsAreUndone) {
    Parsed q;
    ASSERT_TRUE(q.file);
    bool quantised = false;
    auto t = hf_tensors(*q.file, q.config, quantised);
    ASSERT_TRUE(t.ok()) << t.error().message;
    EXPECT_EQ(t->size(), 7u);  // the MTP layer's norm is skipped
    const std::string p = "model.layers.0.";
    const std::vector<float> a_log = values(t->at(p + "linear_attn.A_log"));
    for (int g = 0; g < 4; ++g) {
        EXPECT_NEAR(a_log[g], 0.1f * static_cast<float>(g + 1), 1e-7) << g;
        EXPECT_EQ(std::exp(a_log[g]), std::exp(0.1f * static_cast<float>(g + 1))) << g;  // the value used
    }
    EXPECT_EQ(values(t->at(p + "input_layernorm.weight")), (std::vector<float>{0.5f, 0.0f, -0.75f, 1.0f}));
    EXPECT_EQ(values(t->at(p + "linear_attn.norm.weight")), (std::vector<float>{3.0f}));
    const model::OwnedTensor & conv = t->at(p + "linear_attn.conv1d.weight");
    EXPECT_EQ(conv.shape, (std::vector<int64_t>{8, 1, 2}));
    const std::vector<float> c = values(conv), out = values(t->at(p + "linear_attn.out_proj.weight")),
                             beta = values(t->at(p + "linear_attn.in_proj_b.weight"));
    for (int g = 0; g < 4; ++g) {
        EXPECT_EQ(c[2 * (4 + g)], static_cast<float>(2 * (4 + TILED_OF[g]))) << "conv V channel " << g;
        EXPECT_EQ(c[2 * g], static_cast<float>(2 * g)) << "conv q/k channel " << g;  // untouched
        EXPECT_EQ(out[4 + g], static_cast<float>(4 + TILED_OF[g])) << "out_proj column " << g;
        EXPECT_EQ(beta[4 * g + 1], static_cast<float>(4 * TILED_OF[g] + 1)) << "in_proj_b row " << g;
    }
}

TEST(GgufQwen35, OnlyRowPermutedTensorsStayQuantised) {
    Parsed q;
    ASSERT_TRUE(q.file);
    const std::shared_ptr<GgufFile> & file = q.file;
    bool needs_f32 = true;
    EXPECT_TRUE(qwen35_transformed(*file, "blk.0.attn_gate.weight", needs_f32));
    EXPECT_FALSE(needs_f32);  // rows move as whole block rows
    EXPECT_TRUE(qwen35_transformed(*file, "blk.0.ssm_out.weight", needs_f32));
    EXPECT_FALSE(needs_f32);  // columns of plain values (quantised: whole blocks per V head, else kept tiled)
    EXPECT_FALSE(qwen35_tiled_columns(*file, "blk.0.ssm_out.weight"));  // F32: untiled, not kept as blocks
    EXPECT_TRUE(qwen35_transformed(*file, "blk.0.attn_norm.weight", needs_f32));
    EXPECT_TRUE(needs_f32);  // arithmetic
    EXPECT_FALSE(qwen35_transformed(*file, "blk.1.attn_q.weight", needs_f32));
    EXPECT_TRUE(qwen35_mtp_tensor(*file, "blk.2.attn_q.weight"));
    EXPECT_FALSE(qwen35_mtp_tensor(*file, "blk.1.attn_q.weight"));
}

}  // namespace
}  // namespace tinkerd::gguf
