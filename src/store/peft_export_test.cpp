// peft_loadable_adapter: Qwen3.5's in_proj_q/k/v LoRAs merged into one exact block-diagonal LoRA on in_proj_qkv
// (values, shapes, rank/alpha patterns, target_modules), other tensors untouched, named errors; and the
// patterns reach adapter_config.json.
#include "store/peft_export.h"

#include <cstring>
#include <filesystem>
#include <fstream>

#include <gtest/gtest.h>
#include <nlohmann/json.hpp>

namespace tinkerd::store {
namespace {

model::OwnedTensor f32(std::vector<int64_t> shape, float first) {
    int64_t n = 1;
    for (int64_t d : shape) {
        n *= d;
    }
    std::vector<float> v(static_cast<size_t>(n));
    for (size_t i = 0; i < v.size(); ++i) {
        v[i] = first + static_cast<float>(i);
    }
    model::OwnedTensor t{model::DType::F32, std::move(shape), std::vector<uint8_t>(v.size() * 4)};
    std::memcpy(t.bytes.data(), v.data(), t.bytes.size());
    return t;
}

float at(const model::OwnedTensor & t, int64_t row, int64_t col) {
    float x = 0;
    std::memcpy(&x, t.bytes.data() + (row * t.shape[1] + col) * 4, 4);
    return x;
}

const std::string kLayer = "base_model.model.model.layers.2.linear_attn.";

// Rank 2, C 3, Kd 2, Vd 4: A_q/k/v [2, 3] starting at 100/200/300, B_q/B_k [2, 2] and B_v [4, 2] at 10/20/30.
Tensors qwen35_tensors() {
    Tensors t;
    t[kLayer + "in_proj_q.lora_A.weight"] = f32({2, 3}, 100);
    t[kLayer + "in_proj_k.lora_A.weight"] = f32({2, 3}, 200);
    t[kLayer + "in_proj_v.lora_A.weight"] = f32({2, 3}, 300);
    t[kLayer + "in_proj_q.lora_B.weight"] = f32({2, 2}, 10);
    t[kLayer + "in_proj_k.lora_B.weight"] = f32({2, 2}, 20);
    t[kLayer + "in_proj_v.lora_B.weight"] = f32({4, 2}, 30);
    t[kLayer + "out_proj.lora_A.weight"] = f32({2, 4}, 1);
    t["base_model.model.model.layers.0.mlp.experts.w1.lora_A.weight"] = f32({1, 2, 3}, 5);
    return t;
}

AdapterConfig qwen35_config() {
    AdapterConfig c;
    c.rank = 2;
    c.alpha = 8;
    c.target_modules = {"in_proj_q", "in_proj_k", "in_proj_v", "in_proj_z", "out_proj", "experts.w1", "lm_head"};
    return c;
}

TEST(PeftExport, InProjQkvBecomesOneBlockDiagonalLoraOfRank3R) {
    auto out = peft_loadable_adapter(qwen35_config(), qwen35_tensors());
    ASSERT_TRUE(out.ok()) << out.error().message;
    const model::OwnedTensor & a = out->tensors.at(kLayer + "in_proj_qkv.lora_A.weight");
    const model::OwnedTensor & b = out->tensors.at(kLayer + "in_proj_qkv.lora_B.weight");
    ASSERT_EQ(a.shape, (std::vector<int64_t>{6, 3}));
    ASSERT_EQ(b.shape, (std::vector<int64_t>{8, 6}));
    EXPECT_EQ(at(a, 0, 0), 100);  // A_q rows, then A_k, then A_v
    EXPECT_EQ(at(a, 3, 1), 204);
    EXPECT_EQ(at(a, 5, 2), 305);
    for (int64_t row = 0; row < 8; ++row) {
        const int64_t block = row < 2 ? 0 : row < 4 ? 1 : 2;
        const int64_t local = row - (block == 0 ? 0 : block == 1 ? 2 : 4);
        for (int64_t col = 0; col < 6; ++col) {
            const float want = col / 2 == block ? 10.0f * (block + 1) + static_cast<float>(local * 2 + col % 2) : 0.0f;
            EXPECT_EQ(at(b, row, col), want) << "B[" << row << ", " << col << "]";
        }
    }
    for (const char * gone : {"in_proj_q", "in_proj_k", "in_proj_v"}) {
        EXPECT_EQ(out->tensors.count(kLayer + gone + ".lora_A.weight"), 0u) << gone;
    }
    EXPECT_EQ(out->tensors.count(kLayer + "out_proj.lora_A.weight"), 1u);
    EXPECT_EQ(out->tensors.count("base_model.model.model.layers.0.mlp.experts.w1.lora_A.weight"), 1u);
    EXPECT_EQ(out->config.target_modules,
              (std::vector<std::string>{"in_proj_qkv", "in_proj_z", "out_proj", "lm_head"}));
    EXPECT_EQ(out->config.rank_pattern.at("in_proj_qkv"), 6);
    EXPECT_DOUBLE_EQ(out->config.alpha_pattern.at("in_proj_qkv"), 24.0) << "(3α)/(3R) = α/R";
}

TEST(PeftExport, OtherFamiliesPassThroughUnchanged) {
    AdapterConfig c;
    c.target_modules = {"q_proj", "v_proj", "lm_head"};
    Tensors t{{"base_model.model.model.layers.0.self_attn.q_proj.lora_A.weight", f32({2, 3}, 1)}};
    auto out = peft_loadable_adapter(c, t);
    ASSERT_TRUE(out.ok());
    EXPECT_EQ(out->config.target_modules, c.target_modules);
    EXPECT_TRUE(out->config.rank_pattern.empty());
    EXPECT_EQ(out->tensors.size(), 1u);
}

TEST(PeftExport, AMissingOrMisShapedFactorIsNamed) {
    Tensors t = qwen35_tensors();
    t.erase(kLayer + "in_proj_v.lora_B.weight");
    auto out = peft_loadable_adapter(qwen35_config(), t);
    ASSERT_FALSE(out.ok());
    EXPECT_NE(out.error().message.find("in_proj_v.lora_B.weight"), std::string::npos) << out.error().message;
    t = qwen35_tensors();
    t[kLayer + "in_proj_k.lora_A.weight"] = f32({3, 3}, 0);
    out = peft_loadable_adapter(qwen35_config(), t);
    ASSERT_FALSE(out.ok());
    EXPECT_NE(out.error().message.find("in_proj_k.lora_A.weight"), std::string::npos) << out.error().message;
}

TEST(PeftExport, PatternsAreWrittenToAdapterConfigJson) {
    auto out = peft_loadable_adapter(qwen35_config(), qwen35_tensors());
    ASSERT_TRUE(out.ok());
    const std::string dir = (std::filesystem::temp_directory_path() / "peft_export_test_ckpt").string();
    ASSERT_TRUE(write_checkpoint(dir, out->config, out->tensors, true).ok());
    std::ifstream in(dir + "/adapter_config.json");
    const nlohmann::json doc = nlohmann::json::parse(in);
    EXPECT_EQ(doc.at("rank_pattern").at("in_proj_qkv"), 6);
    EXPECT_EQ(doc.at("alpha_pattern").at("in_proj_qkv"), 24.0);
    EXPECT_EQ(doc.at("r"), 2);
    ASSERT_TRUE(remove_checkpoint(dir).ok());
}

}  // namespace
}  // namespace tinkerd::store
