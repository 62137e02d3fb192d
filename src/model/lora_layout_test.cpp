// LoRA layout: the parameter count per rank of each Tinker component (mlp / attn / unembed) equals
// tinker-cookbook's _LORA_PARAMS_PER_RANK_BY_COMPONENT table (tinker-cookbook 0.5.8, hyperparam_utils.py)
// for the real config.json files in tests/data/model_configs/ (Qwen3, Qwen3-MoE, Qwen3.5 dense and MoE), and
// the expert and Gated DeltaNet factors have Tinker's shapes and names.
#include "model/lora_layout.h"

#include <algorithm>
#include <cstdlib>
#include <string>

#include <gtest/gtest.h>

namespace tinkerd::model {
namespace {

// The text of tests/data/model_configs/<name>.json ("" and a failure when it is missing).
std::string config_text(const std::string & name) {
    const char * source_dir = std::getenv("TINKERD_SOURCE_DIR");
    if (source_dir == nullptr) {
        ADD_FAILURE() << "TINKERD_SOURCE_DIR is not set (ctest sets it)";
        return "";
    }
    const std::string path = std::string(source_dir) + "/tests/data/model_configs/" + name + ".json";
    FILE * f = std::fopen(path.c_str(), "rb");
    if (f == nullptr) {
        ADD_FAILURE() << path << " is missing (test data of the repository)";
        return "";
    }
    std::string text;
    char buf[4096];
    for (size_t n; (n = std::fread(buf, 1, sizeof(buf), f)) > 0;) {
        text.append(buf, n);
    }
    std::fclose(f);
    return text;
}

ModelConfig real_config(const std::string & name) {
    auto config = parse_model_config(config_text(name));
    if (!config.ok()) {
        ADD_FAILURE() << name << ": " << config.error().message;
        return {};
    }
    return *config;
}

struct CookbookRow {
    const char * model;
    int64_t mlp, attn, unembed;  // per rank
};

TEST(LoraLayout, PerRankCountsEqualTheCookbookTable) {
    const CookbookRow rows[] = {
        {"Qwen3-8B", 1'769'472, 958'464, 156'032},           {"Qwen3-30B-A3B", 14'450'688, 835'584, 153'984},
        {"Qwen3.5-4B", 1'130'496, 897'024, 250'880},         {"Qwen3.5-27B", 4'325'376, 2'965'504, 253'440},
        {"Qwen3.5-35B-A3B", 16'281'600, 1'013'760, 250'368},
    };
    for (const CookbookRow & row : rows) {
        SCOPED_TRACE(row.model);
        const ModelConfig c = real_config(row.model);
        ASSERT_GT(c.n_layers, 0);
        EXPECT_EQ(lora_parameter_count(c, {false, true, false}, 1), row.mlp);
        EXPECT_EQ(lora_parameter_count(c, {true, false, false}, 1), row.attn);
        EXPECT_EQ(lora_parameter_count(c, {false, false, true}, 1), row.unembed);
        EXPECT_EQ(lora_parameter_count(c, {}, 32), 32 * (row.mlp + row.attn + row.unembed)) << "rank 32, all parts";
    }
}

TEST(LoraLayout, ExpertFactorsAreSharedOnTheHiddenSide) {
    const ModelConfig c = real_config("Qwen3-30B-A3B");
    ASSERT_EQ(c.family, ArchFamily::QWEN3_MOE);
    ASSERT_EQ(c.n_experts, 128);
    const auto pairs = lora_pairs(c, {false, true, false}, 8);
    ASSERT_EQ(pairs.size(), static_cast<size_t>(3 * c.n_layers)) << "every layer of Qwen3-30B-A3B is sparse";
    const LoraPair & gate = pairs[0];
    EXPECT_EQ(gate.target, LoraTarget::EXPERT_GATE);
    EXPECT_EQ(gate.a_shape, (std::vector<int64_t>{1, 8, 2048}));
    EXPECT_EQ(gate.b_shape, (std::vector<int64_t>{128, 768, 8}));
    EXPECT_EQ(gate.fan_in, 2048);
    const LoraPair & down = pairs[2];
    EXPECT_EQ(down.target, LoraTarget::EXPERT_DOWN);
    EXPECT_EQ(down.a_shape, (std::vector<int64_t>{128, 8, 768}));
    EXPECT_EQ(down.b_shape, (std::vector<int64_t>{1, 2048, 8}));
    EXPECT_EQ(down.fan_in, 768);
    EXPECT_EQ(peft_key(5, LoraTarget::EXPERT_UP, true), "base_model.model.model.layers.5.mlp.experts.w3.lora_B.weight");
    EXPECT_EQ(peft_key(5, LoraTarget::EXPERT_DOWN, false),
              "base_model.model.model.layers.5.mlp.experts.w2.lora_A.weight");
    EXPECT_EQ(peft_key(-1, LoraTarget::LM_HEAD, false), "base_model.model.lm_head.lora_A.weight");
}

TEST(LoraLayout, DenseLayersOfAnMoeModelKeepTheDenseMlp) {
    ModelConfig c = real_config("Qwen3-30B-A3B");
    c.n_layers = 3;
    c.sparse_layers = {true, false, true};  // as mlp_only_layers = [1]
    const auto pairs = lora_pairs(c, {false, true, false}, 4);
    ASSERT_EQ(pairs.size(), 9u);
    EXPECT_EQ(pairs[3].target, LoraTarget::GATE);
    EXPECT_EQ(pairs[3].layer, 1);
    EXPECT_EQ(pairs[3].a_shape, (std::vector<int64_t>{4, 2048}));
    EXPECT_EQ(pairs[3].b_shape, (std::vector<int64_t>{6144, 4}));
    EXPECT_EQ(pairs[6].target, LoraTarget::EXPERT_GATE);
}

TEST(LoraLayout, Qwen35TrainsTheDeltaNetProjectionsAndTheGatedQuery) {
    const ModelConfig c = real_config("Qwen3.5-4B");
    ASSERT_EQ(c.family, ArchFamily::QWEN3_5);
    ASSERT_TRUE(c.is_linear_attention_layer(0));
    ASSERT_FALSE(c.is_linear_attention_layer(3));
    const auto pairs = lora_pairs(c, {true, false, false}, 1);
    // Layer 0 (linear attention): in_proj_q, in_proj_k, in_proj_v (three LoRAs over the fused in_proj_qkv),
    // in_proj_z, out_proj; layer 3 (full attention): q_proj over query and gate, k, v, o.
    ASSERT_GE(pairs.size(), 5u);
    EXPECT_EQ(pairs[0].target, LoraTarget::LINEAR_Q);
    EXPECT_EQ(pairs[0].b_shape, (std::vector<int64_t>{2048, 1}));
    EXPECT_EQ(pairs[2].target, LoraTarget::LINEAR_V);
    EXPECT_EQ(pairs[2].b_shape, (std::vector<int64_t>{4096, 1}));
    EXPECT_EQ(pairs[4].target, LoraTarget::LINEAR_OUT);
    EXPECT_EQ(peft_key(0, LoraTarget::LINEAR_Q, false),
              "base_model.model.model.layers.0.linear_attn.in_proj_q.lora_A.weight");
    const auto full = std::find_if(pairs.begin(), pairs.end(), [](const LoraPair & p) { return p.layer == 3; });
    ASSERT_NE(full, pairs.end());
    EXPECT_EQ(full->target, LoraTarget::Q);
    EXPECT_EQ(full->b_shape, (std::vector<int64_t>{2 * 16 * 256, 1})) << "query and gate";
    EXPECT_TRUE(c.tie_word_embeddings);
    EXPECT_EQ(lora_parameter_count(c, {false, false, true}, 1), 2560 + 248'320) << "unembed LoRA even when tied";
}

TEST(LoraLayout, Qwen35MoeHasASharedExpertBesideTheRoutedOnes) {
    const ModelConfig c = real_config("Qwen3.5-35B-A3B");
    ASSERT_EQ(c.family, ArchFamily::QWEN3_5_MOE);
    EXPECT_EQ(c.n_experts, 256);
    EXPECT_EQ(c.shared_expert_intermediate_size, 512);
    EXPECT_DOUBLE_EQ(c.partial_rotary_factor, 0.25);
    const auto pairs = lora_pairs(c, {false, true, false}, 1);
    ASSERT_EQ(pairs.size(), static_cast<size_t>(6 * c.n_layers));
    EXPECT_EQ(pairs[3].target, LoraTarget::SHARED_GATE);
    EXPECT_EQ(peft_key(0, LoraTarget::SHARED_DOWN, true),
              "base_model.model.model.layers.0.mlp.shared_expert.down_proj.lora_B.weight");
}

// adapter_config.json's target_modules come from the layout's own targets, per family: every module name
// the adapter file holds a key for, once each, and nothing it does not train.
TEST(LoraLayout, TargetModulesNameEachFamilysRealModules) {
    using Names = std::vector<std::string>;
    const LoraSelection all{true, true, true};
    EXPECT_EQ(lora_target_modules(real_config("Qwen3-8B"), all),
              (Names{"q_proj", "k_proj", "v_proj", "o_proj", "gate_proj", "up_proj", "down_proj", "lm_head"}));
    EXPECT_EQ(lora_target_modules(real_config("Qwen3-30B-A3B"), all),
              (Names{"q_proj", "k_proj", "v_proj", "o_proj", "experts.w1", "experts.w3", "experts.w2", "lm_head"}));
    EXPECT_EQ(lora_target_modules(real_config("Qwen3.5-4B"), all),
              (Names{"gate_proj", "up_proj", "down_proj", "in_proj_q", "in_proj_k", "in_proj_v", "in_proj_z",
                     "out_proj", "q_proj", "k_proj", "v_proj", "o_proj", "lm_head"}));
    EXPECT_EQ(lora_target_modules(real_config("Qwen3.5-35B-A3B"), {false, true, false}),
              (Names{"experts.w1", "experts.w3", "experts.w2", "shared_expert.gate_proj", "shared_expert.up_proj",
                     "shared_expert.down_proj"}));
    EXPECT_EQ(lora_target_modules(real_config("Qwen3.5-35B-A3B"), {true, false, false}),
              (Names{"in_proj_q", "in_proj_k", "in_proj_v", "in_proj_z", "out_proj", "q_proj", "k_proj", "v_proj",
                     "o_proj"}));
    ModelConfig mixed = real_config("Qwen3-30B-A3B");
    mixed.sparse_layers[0] = false;  // one dense layer: its gate/up/down_proj join the experts
    EXPECT_EQ(lora_target_modules(mixed, {false, true, false}),
              (Names{"gate_proj", "up_proj", "down_proj", "experts.w1", "experts.w3", "experts.w2"}));
}

}  // namespace
}  // namespace tinkerd::model
