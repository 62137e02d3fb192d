// Unit tests for parse_model_config and load_model_config: the supported architectures, defaults,
// rope_scaling, the named errors for unsupported or invalid configs, and the real stories260K config.
#include "model/model_config.h"

#include <cstdlib>
#include <filesystem>
#include <string>

#include <gtest/gtest.h>
#include <nlohmann/json.hpp>

namespace tinkerd::model {
namespace {

namespace fs = std::filesystem;
using nlohmann::json;

// A minimal valid Llama config; tests modify it.
json base_config() {
    return json{{"architectures", {"LlamaForCausalLM"}},
                {"vocab_size", 1000},
                {"hidden_size", 256},
                {"intermediate_size", 688},
                {"num_hidden_layers", 4},
                {"num_attention_heads", 8}};
}

Error parse_error(const json & config) {
    auto result = parse_model_config(config.dump());
    EXPECT_FALSE(result.ok()) << config.dump();
    return result.ok() ? Error{} : result.error();
}

TEST(ModelConfig, AppliesDefaults) {
    auto config = parse_model_config(base_config().dump());
    ASSERT_TRUE(config.ok()) << config.error().message;
    EXPECT_EQ(config->architecture, "LlamaForCausalLM");
    EXPECT_EQ(config->family, ArchFamily::LLAMA);
    EXPECT_EQ(config->n_kv_heads, 8);
    EXPECT_EQ(config->head_dim, 32);
    EXPECT_EQ(config->max_position_embeddings, 2048);
    EXPECT_DOUBLE_EQ(config->rms_norm_eps, 1e-6);
    EXPECT_DOUBLE_EQ(config->rope_theta, 10000.0);
    EXPECT_EQ(config->rope_scaling.type, "");
    EXPECT_FALSE(config->tie_word_embeddings);
    EXPECT_FALSE(config->attention_bias);
    EXPECT_FALSE(config->qk_norm);
    EXPECT_EQ(config->torch_dtype, "");
    EXPECT_EQ(config->bos_token_id, -1);
    EXPECT_EQ(config->eos_token_id, -1);
}

// transformers 5 saves rope_theta and the scaling inside "rope_parameters" (no top-level rope_theta).
TEST(ModelConfig, ReadsTransformers5RopeParameters) {
    json j = base_config();
    j["rope_parameters"] = {{"rope_type", "llama3"},   {"rope_theta", 500000.0},
                            {"factor", 8.0},           {"low_freq_factor", 1.0},
                            {"high_freq_factor", 4.0}, {"original_max_position_embeddings", 8192}};
    auto config = parse_model_config(j.dump());
    ASSERT_TRUE(config.ok()) << config.error().message;
    EXPECT_DOUBLE_EQ(config->rope_theta, 500000.0);
    EXPECT_EQ(config->rope_scaling.type, "llama3");
    EXPECT_DOUBLE_EQ(config->rope_scaling.factor, 8.0);

    json qwen = base_config();
    qwen["rope_parameters"] = {{"rope_type", "default"}, {"rope_theta", 1000000.0}};
    auto plain = parse_model_config(qwen.dump());
    ASSERT_TRUE(plain.ok()) << plain.error().message;
    EXPECT_DOUBLE_EQ(plain->rope_theta, 1000000.0);
    EXPECT_TRUE(plain->rope_scaling.type.empty() || plain->rope_scaling.type == "default");

    qwen["rope_parameters"] = {{"rope_type", "yarn"}, {"rope_theta", 1000000.0}};
    auto yarn = parse_model_config(qwen.dump());
    ASSERT_FALSE(yarn.ok());
    EXPECT_NE(yarn.error().message.find("rope_parameters type 'yarn'"), std::string::npos) << yarn.error().message;
}

TEST(ModelConfig, ParsesLlamaWithLlama3RopeScaling) {
    json j = base_config();
    j["num_key_value_heads"] = 2;
    j["rope_theta"] = 500000.0;
    j["rms_norm_eps"] = 1e-5;
    j["max_position_embeddings"] = 131072;
    j["torch_dtype"] = "bfloat16";
    j["bos_token_id"] = 128000;
    j["eos_token_id"] = 128001;
    j["hidden_act"] = "silu";
    j["rope_scaling"] = {{"rope_type", "llama3"},
                         {"factor", 32.0},
                         {"low_freq_factor", 1.0},
                         {"high_freq_factor", 4.0},
                         {"original_max_position_embeddings", 8192}};
    auto config = parse_model_config(j.dump());
    ASSERT_TRUE(config.ok()) << config.error().message;
    EXPECT_EQ(config->n_kv_heads, 2);
    EXPECT_DOUBLE_EQ(config->rope_theta, 500000.0);
    EXPECT_EQ(config->rope_scaling.type, "llama3");
    EXPECT_DOUBLE_EQ(config->rope_scaling.factor, 32.0);
    EXPECT_DOUBLE_EQ(config->rope_scaling.low_freq_factor, 1.0);
    EXPECT_DOUBLE_EQ(config->rope_scaling.high_freq_factor, 4.0);
    EXPECT_EQ(config->rope_scaling.original_max_position_embeddings, 8192);
    EXPECT_EQ(config->torch_dtype, "bfloat16");
    EXPECT_EQ(config->bos_token_id, 128000);
    EXPECT_EQ(config->eos_token_id, 128001);
}

TEST(ModelConfig, RopeScalingTypeKeyAndDefault) {
    json j = base_config();
    j["rope_scaling"] = {{"type", "llama3"},
                         {"factor", 8.0},
                         {"low_freq_factor", 1.0},
                         {"high_freq_factor", 4.0},
                         {"original_max_position_embeddings", 8192}};
    EXPECT_EQ(parse_model_config(j.dump())->rope_scaling.type, "llama3");
    j["rope_scaling"] = {{"rope_type", "default"}};
    EXPECT_EQ(parse_model_config(j.dump())->rope_scaling.type, "");
    j["rope_scaling"] = nullptr;
    EXPECT_EQ(parse_model_config(j.dump())->rope_scaling.type, "");
}

TEST(ModelConfig, RejectsUnsupportedRopeScaling) {
    json j = base_config();
    j["rope_scaling"] = {{"type", "yarn"}, {"factor", 4.0}};
    Error error = parse_error(j);
    EXPECT_EQ(error.kind, ErrorKind::UNSUPPORTED);
    EXPECT_NE(error.message.find("'yarn'"), std::string::npos) << error.message;

    j["rope_scaling"] = {{"rope_type", "llama3"}, {"factor", 8.0}};
    error = parse_error(j);
    EXPECT_EQ(error.kind, ErrorKind::INVALID_ARGUMENT);
    EXPECT_NE(error.message.find("rope_scaling.low_freq_factor"), std::string::npos) << error.message;
}

TEST(ModelConfig, ParsesQwen2) {
    json j = base_config();
    j["architectures"] = {"Qwen2ForCausalLM"};
    j["num_key_value_heads"] = 4;
    j["tie_word_embeddings"] = true;
    j["attention_bias"] = false;  // ignored: Qwen2 always has q/k/v biases
    auto config = parse_model_config(j.dump());
    ASSERT_TRUE(config.ok()) << config.error().message;
    EXPECT_EQ(config->family, ArchFamily::QWEN2);
    EXPECT_TRUE(config->attention_bias);
    EXPECT_FALSE(config->qk_norm);
    EXPECT_TRUE(config->tie_word_embeddings);
}

TEST(ModelConfig, ParsesQwen3WithExplicitHeadDim) {
    json j = base_config();
    j["architectures"] = {"Qwen3ForCausalLM"};
    j["hidden_size"] = 1024;
    j["num_attention_heads"] = 16;
    j["num_key_value_heads"] = 8;
    j["head_dim"] = 128;
    j["eos_token_id"] = {151645, 151643};
    auto config = parse_model_config(j.dump());
    ASSERT_TRUE(config.ok()) << config.error().message;
    EXPECT_EQ(config->family, ArchFamily::QWEN3);
    EXPECT_EQ(config->head_dim, 128);
    EXPECT_TRUE(config->qk_norm);
    EXPECT_FALSE(config->attention_bias);
    EXPECT_EQ(config->eos_token_id, 151645);

    j["attention_bias"] = true;
    EXPECT_TRUE(parse_model_config(j.dump())->attention_bias);
}

TEST(ModelConfig, Qwen3MoeExpertsAndWhichLayersAreSparse) {
    json j = base_config();
    j["architectures"] = {"Qwen3MoeForCausalLM"};
    j["num_hidden_layers"] = 6;
    j["num_local_experts"] = 16;  // transformers 5 writes this name; the Hub's configs say num_experts
    j["num_experts_per_tok"] = 4;
    j["moe_intermediate_size"] = 48;
    j["norm_topk_prob"] = true;
    j["decoder_sparse_step"] = 2;
    j["mlp_only_layers"] = {3};
    auto config = parse_model_config(j.dump());
    ASSERT_TRUE(config.ok()) << config.error().message;
    EXPECT_EQ(config->family, ArchFamily::QWEN3_MOE);
    EXPECT_TRUE(config->qk_norm);
    EXPECT_EQ(config->n_experts, 16);
    EXPECT_EQ(config->n_experts_per_token, 4);
    EXPECT_EQ(config->moe_intermediate_size, 48);
    EXPECT_TRUE(config->norm_topk_prob);
    // (l + 1) % 2 == 0 and l not in mlp_only_layers: layers 1 and 5 (3 is forced dense).
    EXPECT_EQ(config->sparse_layers, (std::vector<bool>{false, true, false, false, false, true}));

    j["num_experts"] = 8;  // the Hub's name wins when both are present
    j["num_experts_per_tok"] = 9;
    auto too_many = parse_model_config(j.dump());
    ASSERT_FALSE(too_many.ok());
    EXPECT_NE(too_many.error().message.find("num_experts_per_tok (9) exceeds the number of experts (8)"),
              std::string::npos)
        << too_many.error().message;
    j["num_experts_per_tok"] = 2;
    j["mlp_only_layers"] = "all";
    auto bad = parse_model_config(j.dump());
    ASSERT_FALSE(bad.ok());
    EXPECT_NE(bad.error().message.find("mlp_only_layers"), std::string::npos) << bad.error().message;
    j.erase("mlp_only_layers");
    j.erase("decoder_sparse_step");
    EXPECT_EQ(parse_model_config(j.dump())->sparse_layers, std::vector<bool>(6, true)) << "defaults: every layer";
}

TEST(ModelConfig, Qwen35TextConfigIsReadFromTheNestedTextConfig) {
    json text = base_config();
    text.erase("architectures");
    text["num_hidden_layers"] = 4;
    text["head_dim"] = 64;
    text["linear_num_key_heads"] = 2;
    text["linear_num_value_heads"] = 4;
    text["linear_key_head_dim"] = 16;
    text["linear_value_head_dim"] = 8;
    text["rope_parameters"] = {{"rope_type", "default"},
                               {"rope_theta", 1e7},
                               {"partial_rotary_factor", 0.25},
                               {"mrope_section", {11, 11, 10}}};
    json j = {
        {"architectures", {"Qwen3_5ForConditionalGeneration"}}, {"text_config", text}, {"tie_word_embeddings", true}};
    auto config = parse_model_config(j.dump());
    ASSERT_TRUE(config.ok()) << config.error().message;
    EXPECT_EQ(config->family, ArchFamily::QWEN3_5);
    EXPECT_EQ(config->hidden_size, 256);
    EXPECT_TRUE(config->tie_word_embeddings) << "from the top level when text_config has none";
    EXPECT_EQ(config->linear_attention_layers, (std::vector<bool>{true, true, true, false})) << "interval 4";
    EXPECT_DOUBLE_EQ(config->partial_rotary_factor, 0.25);
    EXPECT_TRUE(config->attn_output_gate);
    EXPECT_DOUBLE_EQ(config->rope_theta, 1e7);

    j["text_config"]["layer_types"] = {"full_attention", "linear_attention", "full_attention", "sliding_attention"};
    auto bad = parse_model_config(j.dump());
    ASSERT_FALSE(bad.ok());
    EXPECT_NE(bad.error().message.find("layer_types[3]"), std::string::npos) << bad.error().message;
    j["text_config"]["layer_types"][3] = "linear_attention";
    EXPECT_EQ(parse_model_config(j.dump())->linear_attention_layers, (std::vector<bool>{false, true, false, true}));
}

// Qwen3.5-MoE: every layer sparse with a shared expert, transformers' family defaults (256 experts of 512, a
// 512-wide shared expert), top-k always renormalised (Qwen3_5MoeTopKRouter has no norm_topk_prob switch), and a
// non-empty mlp_only_layers refused by name (transformers ignores it for this family).
TEST(ModelConfig, Qwen35MoeExpertsDefaultsAndRenormalisedRouting) {
    json text = base_config();
    text.erase("architectures");
    text.erase("intermediate_size");  // no dense MLP anywhere
    text["num_hidden_layers"] = 4;
    text["norm_topk_prob"] = false;
    json j = {{"architectures", {"Qwen3_5MoeForConditionalGeneration"}}, {"text_config", text}};
    auto config = parse_model_config(j.dump());
    ASSERT_TRUE(config.ok()) << config.error().message;
    EXPECT_EQ(config->family, ArchFamily::QWEN3_5_MOE);
    EXPECT_EQ(config->n_experts, 256);
    EXPECT_EQ(config->n_experts_per_token, 8);
    EXPECT_EQ(config->moe_intermediate_size, 512);
    EXPECT_EQ(config->shared_expert_intermediate_size, 512);
    EXPECT_TRUE(config->norm_topk_prob) << "Qwen3.5-MoE always renormalises its top-k";
    EXPECT_EQ(config->sparse_layers, std::vector<bool>(4, true));

    j["text_config"]["mlp_only_layers"] = json::array();
    EXPECT_TRUE(parse_model_config(j.dump()).ok()) << "[] as the real configs have it";
    j["text_config"]["mlp_only_layers"] = {1};
    const Error bad = parse_error(j);
    EXPECT_EQ(bad.kind, ErrorKind::UNSUPPORTED);
    EXPECT_NE(bad.message.find("mlp_only_layers"), std::string::npos) << bad.message;
}

TEST(ModelConfig, EosTokenIdForms) {
    json j = base_config();
    j["eos_token_id"] = {7, 9};
    EXPECT_EQ(parse_model_config(j.dump())->eos_token_id, 7);
    j["eos_token_id"] = nullptr;
    EXPECT_EQ(parse_model_config(j.dump())->eos_token_id, -1);
    j["eos_token_id"] = json::array();
    EXPECT_EQ(parse_model_config(j.dump())->eos_token_id, -1);
}

TEST(ModelConfig, RejectsUnsupportedArchitecture) {
    json j = base_config();
    j["architectures"] = {"MistralForCausalLM"};
    Error error = parse_error(j);
    EXPECT_EQ(error.kind, ErrorKind::UNSUPPORTED);
    EXPECT_EQ(error.message,
              "config.json: unsupported architecture 'MistralForCausalLM' (supported: LlamaForCausalLM, "
              "Qwen2ForCausalLM, Qwen3ForCausalLM, Qwen3MoeForCausalLM, Qwen3_5ForCausalLM, Qwen3_5MoeForCausalLM and "
              "their ForConditionalGeneration models, Qwen3VLForConditionalGeneration, "
              "Qwen3VLMoeForConditionalGeneration)");
}

TEST(ModelConfig, NamesMissingField) {
    for (const char * field : {"architectures", "vocab_size", "hidden_size", "intermediate_size", "num_hidden_layers",
                               "num_attention_heads"}) {
        json j = base_config();
        j.erase(field);
        Error error = parse_error(j);
        EXPECT_EQ(error.kind, ErrorKind::INVALID_ARGUMENT);
        EXPECT_EQ(error.message, std::string("config.json: missing field '") + field + "'");
    }
}

TEST(ModelConfig, RejectsKvHeadsNotDividingHeads) {
    json j = base_config();
    j["num_key_value_heads"] = 3;
    Error error = parse_error(j);
    EXPECT_EQ(error.kind, ErrorKind::INVALID_ARGUMENT);
    EXPECT_NE(error.message.find("num_key_value_heads (3)"), std::string::npos) << error.message;
}

TEST(ModelConfig, RejectsInvalidValues) {
    const std::pair<const char *, json> cases[] = {
        {"hidden_size", 0},    {"num_hidden_layers", -2},  {"vocab_size", "big"},      {"head_dim", 0},
        {"rms_norm_eps", 0.0}, {"tie_word_embeddings", 1}, {"num_key_value_heads", 0},
    };
    for (const auto & [field, value] : cases) {
        json j = base_config();
        j[field] = value;
        Error error = parse_error(j);
        EXPECT_EQ(error.kind, ErrorKind::INVALID_ARGUMENT) << field;
        EXPECT_NE(error.message.find(field), std::string::npos) << error.message;
    }
    EXPECT_EQ(parse_error(json::parse("[1]")).kind, ErrorKind::INVALID_ARGUMENT);
    auto bad_json = parse_model_config("{\"vocab_size\": ");
    ASSERT_FALSE(bad_json.ok());
    EXPECT_EQ(bad_json.error().kind, ErrorKind::INVALID_ARGUMENT);
}

TEST(ModelConfig, RejectsUnsupportedActivation) {
    json j = base_config();
    j["hidden_act"] = "gelu";
    Error error = parse_error(j);
    EXPECT_EQ(error.kind, ErrorKind::UNSUPPORTED);
    EXPECT_NE(error.message.find("'gelu'"), std::string::npos) << error.message;
}

TEST(ModelConfig, LoadNamesMissingPath) {
    std::string dir = (fs::path(testing::TempDir()) / "model_config_test_no_such_dir").string();
    auto result = load_model_config(dir);
    ASSERT_FALSE(result.ok());
    EXPECT_EQ(result.error().kind, ErrorKind::NOT_FOUND);
    EXPECT_NE(result.error().message.find(dir + "/config.json"), std::string::npos) << result.error().message;
}

void check_stories_config(const std::string & variant, const std::string & torch_dtype) {
    const char * source_dir = std::getenv("TINKERD_SOURCE_DIR");
    fs::path dir = fs::path(source_dir ? source_dir : "") / ".." / "shared" / "models" / "stories260K" / variant;
    if (source_dir == nullptr || !fs::exists(dir / "config.json")) {
        GTEST_SKIP() << "stories260K/" << variant << " not found under $TINKERD_SOURCE_DIR/../shared/models";
    }
    auto config = load_model_config(dir.string());
    ASSERT_TRUE(config.ok()) << config.error().message;
    EXPECT_EQ(config->family, ArchFamily::LLAMA);
    EXPECT_EQ(config->vocab_size, 512);
    EXPECT_EQ(config->hidden_size, 64);
    EXPECT_EQ(config->n_layers, 5);
    EXPECT_EQ(config->n_heads, 8);
    EXPECT_EQ(config->n_kv_heads, 4);
    EXPECT_EQ(config->head_dim, 8);
    EXPECT_TRUE(config->tie_word_embeddings);
    EXPECT_EQ(config->torch_dtype, torch_dtype);
    EXPECT_EQ(config->bos_token_id, 1);
    EXPECT_EQ(config->eos_token_id, 2);
}

TEST(ModelConfigStories, LoadsF32Config) {
    check_stories_config("hf-f32", "float32");
}

TEST(ModelConfigStories, LoadsBF16Config) {
    check_stories_config("hf-bf16", "bfloat16");
}

}  // namespace
}  // namespace tinkerd::model
