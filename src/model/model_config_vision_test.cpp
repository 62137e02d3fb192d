// Image-text configs (model_config_vision.cpp): Qwen3-VL's vision_config, image token ids and mrope_section as
// transformers 5 saves them, and the refusals (an mrope_section that does not fit the rotary dims, a missing
// image_token_id, deepstack layers past the tower); a text-only config ignores its mrope_section.
#include <cstdlib>
#include <fstream>
#include <sstream>

#include <gtest/gtest.h>
#include <nlohmann/json.hpp>

#include "model/model_config.h"

namespace tinkerd::model {
namespace {

using nlohmann::json;

// A tiny Qwen3VLForConditionalGeneration config.json as transformers 5.5 writes it.
json qwen3_vl() {
    return json::parse(R"({
      "architectures": ["Qwen3VLForConditionalGeneration"], "image_token_id": 100, "vision_start_token_id": 102,
      "tie_word_embeddings": false,
      "text_config": {"head_dim": 16, "hidden_size": 32, "intermediate_size": 40, "num_attention_heads": 4,
        "num_hidden_layers": 3, "num_key_value_heads": 2, "vocab_size": 120, "hidden_act": "silu",
        "rope_parameters": {"mrope_interleaved": true, "mrope_section": [4, 2, 2], "rope_theta": 10000.0,
                            "rope_type": "default"}},
      "vision_config": {"deepstack_visual_indexes": [0, 2], "depth": 3, "hidden_act": "gelu_pytorch_tanh",
        "hidden_size": 16, "in_channels": 3, "intermediate_size": 24, "num_heads": 2, "num_position_embeddings": 16,
        "out_hidden_size": 32, "patch_size": 4, "spatial_merge_size": 2, "temporal_patch_size": 2}})");
}

std::string error_of(const json & config) {
    auto parsed = parse_model_config(config.dump());
    EXPECT_FALSE(parsed.ok());
    return parsed.ok() ? std::string() : parsed.error().message;
}

TEST(VisionConfig, ParsesQwen3VL) {
    auto c = parse_model_config(qwen3_vl().dump());
    ASSERT_TRUE(c.ok()) << c.error().message;
    EXPECT_EQ(c->family, ArchFamily::QWEN3);
    EXPECT_TRUE(c->qk_norm);
    EXPECT_EQ(c->hidden_size, 32);
    EXPECT_TRUE(c->has_vision());
    EXPECT_EQ(c->vision.depth, 3);
    EXPECT_EQ(c->vision.hidden_size, 16);
    EXPECT_EQ(c->vision.patch_dim(), 3 * 2 * 4 * 4);
    EXPECT_EQ(c->vision.deepstack_layers, (std::vector<int64_t>{0, 2}));
    EXPECT_EQ(c->image_token_id, 100);
    EXPECT_EQ(c->vision_start_token_id, 102);
    EXPECT_EQ(c->mrope_section, (std::vector<int64_t>{4, 2, 2}));
}

TEST(VisionConfig, MoeIsTheQwen3MoeFamily) {
    json j = qwen3_vl();
    j["architectures"] = {"Qwen3VLMoeForConditionalGeneration"};
    j["text_config"]["num_local_experts"] = 4;
    j["text_config"]["num_experts_per_tok"] = 2;
    j["text_config"]["moe_intermediate_size"] = 24;
    auto c = parse_model_config(j.dump());
    ASSERT_TRUE(c.ok()) << c.error().message;
    EXPECT_EQ(c->family, ArchFamily::QWEN3_MOE);
    EXPECT_TRUE(c->norm_topk_prob);  // its router always renormalises
    EXPECT_TRUE(c->has_vision());
}

TEST(VisionConfig, RefusesWhatTheEngineCannotRun) {
    json j = qwen3_vl();
    j["text_config"]["rope_parameters"]["mrope_section"] = {4, 2, 1};
    EXPECT_NE(error_of(j).find("mrope_section must be 3 counts summing to 8"), std::string::npos);
    j = qwen3_vl();
    j.erase("image_token_id");
    EXPECT_NE(error_of(j).find("image_token_id"), std::string::npos);
    j = qwen3_vl();
    j["vision_config"]["deepstack_visual_indexes"] = {3};
    EXPECT_NE(error_of(j).find("deepstack_visual_indexes holds 3"), std::string::npos);
    j = qwen3_vl();
    j["vision_config"]["out_hidden_size"] = 48;
    EXPECT_NE(error_of(j).find("out_hidden_size (48)"), std::string::npos);
    j = qwen3_vl();
    j["vision_config"]["hidden_act"] = "quick_gelu";
    EXPECT_NE(error_of(j).find("quick_gelu"), std::string::npos);
}

TEST(VisionConfig, TextOnlyConfigIgnoresMropeSection) {
    json j = qwen3_vl();
    j.erase("vision_config");
    j["text_config"]["rope_parameters"]["mrope_section"] = {11, 11, 10};  // transformers' default, not these dims
    auto c = parse_model_config(j.dump());
    ASSERT_TRUE(c.ok()) << c.error().message;
    EXPECT_FALSE(c->has_vision());
    EXPECT_TRUE(c->mrope_section.empty());
}

// The published Qwen3.5 checkpoints' config.json files (tests/data/model_configs) carry their vision towers.
TEST(VisionConfig, PublishedQwen35ConfigsHaveTheirVisionTowers) {
    const char * source_dir = std::getenv("TINKERD_SOURCE_DIR");
    ASSERT_NE(source_dir, nullptr) << "TINKERD_SOURCE_DIR is not set (ctest sets it)";
    struct Expected {
        const char * file;
        int64_t depth, width, out;
    };
    for (const Expected & e :
         {Expected{"Qwen3.5-4B.json", 24, 1024, 2560}, Expected{"Qwen3.5-27B.json", 27, 1152, 5120},
          Expected{"Qwen3.5-35B-A3B.json", 27, 1152, 2048}}) {
        std::ifstream in(std::string(source_dir) + "/tests/data/model_configs/" + e.file);
        ASSERT_TRUE(in.good()) << e.file;
        std::stringstream text;
        text << in.rdbuf();
        auto c = parse_model_config(text.str());
        ASSERT_TRUE(c.ok()) << e.file << ": " << c.error().message;
        EXPECT_TRUE(c->has_vision()) << e.file;
        EXPECT_EQ(c->vision.depth, e.depth) << e.file;
        EXPECT_EQ(c->vision.hidden_size, e.width) << e.file;
        EXPECT_EQ(c->vision.out_hidden_size, e.out) << e.file;
        EXPECT_TRUE(c->vision.deepstack_layers.empty()) << e.file;
        EXPECT_EQ(c->image_token_id, 248056) << e.file;
        EXPECT_EQ(c->mrope_section, (std::vector<int64_t>{11, 11, 10})) << e.file;
    }
}

}  // namespace
}  // namespace tinkerd::model
