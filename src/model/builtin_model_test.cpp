// Tests for the built-in model generator: valid config and tensors, determinism, no rewrite when current.
#include "model/builtin_model.h"

#include <filesystem>
#include <fstream>
#include <sstream>

#include <gtest/gtest.h>

#include "model/model_config.h"
#include "model/safetensors.h"

namespace tinkerd::model {
namespace {

std::string read_all(const std::string & path) {
    std::ifstream in(path, std::ios::binary);
    std::stringstream ss;
    ss << in.rdbuf();
    return ss.str();
}

std::string temp_dir(const std::string & name) {
    auto dir = std::filesystem::path(::testing::TempDir()) / name;
    std::filesystem::remove_all(dir);
    return dir.string();
}

TEST(BuiltinModel, WritesALoadableLlamaCheckpoint) {
    const std::string dir = temp_dir("builtin_a");
    ASSERT_TRUE(ensure_builtin_model(dir).ok());
    auto config = load_model_config(dir);
    ASSERT_TRUE(config.ok()) << config.error().message;
    EXPECT_EQ(config->architecture, "LlamaForCausalLM");
    EXPECT_TRUE(config->tie_word_embeddings);
    auto file = SafetensorsFile::open_model_dir(dir);
    ASSERT_TRUE(file.ok()) << file.error().message;
    auto embed = (*file)->get("model.embed_tokens.weight");
    ASSERT_TRUE(embed.ok());
    EXPECT_EQ(embed->shape, (std::vector<int64_t>{config->vocab_size, config->hidden_size}));
    EXPECT_EQ(static_cast<int64_t>((*file)->names().size()), 2 + 9 * config->n_layers);
}

TEST(BuiltinModel, IsDeterministicAndSeedDependent) {
    const std::string a = temp_dir("builtin_b1"), b = temp_dir("builtin_b2"), c = temp_dir("builtin_b3");
    ASSERT_TRUE(ensure_builtin_model(a, 7).ok());
    ASSERT_TRUE(ensure_builtin_model(b, 7).ok());
    ASSERT_TRUE(ensure_builtin_model(c, 8).ok());
    EXPECT_EQ(read_all(a + "/model.safetensors"), read_all(b + "/model.safetensors"));
    EXPECT_NE(read_all(a + "/model.safetensors"), read_all(c + "/model.safetensors"));
}

TEST(BuiltinModel, LeavesACurrentModelAlone) {
    const std::string dir = temp_dir("builtin_c");
    ASSERT_TRUE(ensure_builtin_model(dir).ok());
    auto before = std::filesystem::last_write_time(dir + "/model.safetensors");
    ASSERT_TRUE(ensure_builtin_model(dir).ok());
    EXPECT_EQ(before, std::filesystem::last_write_time(dir + "/model.safetensors"));
}

}  // namespace
}  // namespace tinkerd::model
