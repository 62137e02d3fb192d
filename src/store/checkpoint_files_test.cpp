// Unit tests for checkpoint files: write/read round trips with the adapter/optimizer split, overwrite
// rules, missing and incomplete directories, no leftover temp dirs, and tar archives checked by
// extracting them with the system `tar`.
#include "store/checkpoint_files.h"

#include <cstring>
#include <filesystem>
#include <fstream>
#include <iterator>
#include <set>
#include <stdlib.h>

#include <gtest/gtest.h>
#include <nlohmann/json.hpp>

namespace tinkerd::store {
namespace {

namespace fs = std::filesystem;
using model::DType;
using model::OwnedTensor;

class CheckpointFilesTest : public testing::Test {
  protected:
    void SetUp() override {
        std::string pattern = (fs::path(testing::TempDir()) / "checkpoint_files_test_XXXXXX").string();
        ASSERT_NE(mkdtemp(pattern.data()), nullptr);
        data_dir_ = pattern;
        dir_ = checkpoint_dir(data_dir_.string(), "sess-1:train:0", "weights", "step1");
    }
    void TearDown() override { fs::remove_all(data_dir_); }

    // Every entry under the run's "weights" folder.
    std::set<std::string> weights_entries() const {
        std::set<std::string> names;
        for (const auto & entry : fs::directory_iterator(fs::path(dir_).parent_path())) {
            names.insert(entry.path().filename().string());
        }
        return names;
    }

    fs::path data_dir_;
    std::string dir_;
};

OwnedTensor f32_tensor(std::vector<int64_t> shape, float start) {
    OwnedTensor t;
    t.dtype = DType::F32;
    t.shape = std::move(shape);
    size_t numel = 1;
    for (int64_t d : t.shape) {
        numel *= static_cast<size_t>(d);
    }
    t.bytes.resize(numel * sizeof(float));
    for (size_t i = 0; i < numel; ++i) {
        float value = start + static_cast<float>(i) * 0.5f;
        std::memcpy(t.bytes.data() + i * sizeof(float), &value, sizeof(float));
    }
    return t;
}

OwnedTensor i64_scalar(int64_t value) {
    OwnedTensor t;
    t.dtype = DType::I64;
    t.bytes.resize(sizeof(int64_t));
    std::memcpy(t.bytes.data(), &value, sizeof(value));
    return t;
}

AdapterConfig test_config() {
    AdapterConfig config;
    config.base_model = "Qwen/Qwen3-8B";
    config.rank = 4;
    config.alpha = 8.0;
    config.target_modules = {"q_proj", "v_proj", "lm_head"};
    config.train_attn = true;
    config.train_mlp = false;
    config.train_unembed = true;
    return config;
}

const std::string A_KEY = "base_model.model.model.layers.0.self_attn.q_proj.lora_A.weight";
const std::string B_KEY = "base_model.model.model.layers.0.self_attn.q_proj.lora_B.weight";

Tensors adapter_tensors() {
    Tensors tensors;
    tensors[A_KEY] = f32_tensor({4, 6}, 1.0f);
    tensors[B_KEY] = f32_tensor({6, 4}, -2.0f);
    return tensors;
}

Tensors training_tensors() {
    Tensors tensors = adapter_tensors();
    tensors[A_KEY + ".exp_avg"] = f32_tensor({4, 6}, 0.25f);
    tensors[A_KEY + ".exp_avg_sq"] = f32_tensor({4, 6}, 0.125f);
    tensors[B_KEY + ".exp_avg"] = f32_tensor({6, 4}, 3.0f);
    tensors[B_KEY + ".exp_avg_sq"] = f32_tensor({6, 4}, 4.0f);
    tensors["optimizer.step"] = i64_scalar(17);
    return tensors;
}

void expect_same_tensors(const Tensors & got, const Tensors & want) {
    ASSERT_EQ(got.size(), want.size());
    for (const auto & [name, tensor] : want) {
        auto it = got.find(name);
        ASSERT_NE(it, got.end()) << name;
        EXPECT_EQ(it->second.dtype, tensor.dtype) << name;
        EXPECT_EQ(it->second.shape, tensor.shape) << name;
        EXPECT_EQ(it->second.bytes, tensor.bytes) << name;
    }
}

std::string file_bytes(const fs::path & path) {
    std::ifstream in(path, std::ios::binary);
    return std::string((std::istreambuf_iterator<char>(in)), std::istreambuf_iterator<char>());
}

TEST_F(CheckpointFilesTest, DirectoryLayout) {
    EXPECT_EQ(checkpoint_dir("/data", "s:train:0", "sampler_weights", "final"),
              "/data/runs/s:train:0/sampler_weights/final");
}

TEST_F(CheckpointFilesTest, TrainingCheckpointRoundTripSplitsOptimizerState) {
    const Tensors tensors = training_tensors();
    auto written = write_checkpoint(dir_, test_config(), tensors, false);
    ASSERT_TRUE(written.ok()) << written.error().message;

    std::set<std::string> files;
    int64_t total = 0;
    for (const auto & entry : fs::directory_iterator(dir_)) {
        files.insert(entry.path().filename().string());
        total += static_cast<int64_t>(entry.file_size());
    }
    EXPECT_EQ(files, (std::set<std::string>{"adapter_config.json", "adapter_model.safetensors", "checkpoint_complete",
                                            "optimizer_state.safetensors"}));
    EXPECT_EQ(written.value(), total);
    EXPECT_EQ(fs::file_size(fs::path(dir_) / "checkpoint_complete"), 0u);

    auto adapter = model::SafetensorsFile::open((fs::path(dir_) / "adapter_model.safetensors").string());
    ASSERT_TRUE(adapter.ok());
    EXPECT_EQ(adapter.value()->names(), (std::vector<std::string>{A_KEY, B_KEY}));
    auto optimizer = model::SafetensorsFile::open((fs::path(dir_) / "optimizer_state.safetensors").string());
    ASSERT_TRUE(optimizer.ok());
    EXPECT_EQ(optimizer.value()->names().size(), 5u);
    EXPECT_TRUE(optimizer.value()->contains("optimizer.step"));

    auto config = nlohmann::json::parse(file_bytes(fs::path(dir_) / "adapter_config.json"));
    EXPECT_EQ(config["peft_type"], "LORA");
    EXPECT_EQ(config["task_type"], "CAUSAL_LM");
    EXPECT_EQ(config["r"], 4);
    EXPECT_EQ(config["lora_alpha"], 8.0);
    EXPECT_EQ(config["base_model_name_or_path"], "Qwen/Qwen3-8B");
    EXPECT_EQ(config["target_modules"], nlohmann::json({"q_proj", "v_proj", "lm_head"}));
    EXPECT_EQ(config["bias"], "none");
    EXPECT_EQ(config["inference_mode"], true);
    EXPECT_EQ(config["tinkerd"]["train_mlp"], false);

    auto full = read_checkpoint(dir_, true);
    ASSERT_TRUE(full.ok()) << full.error().message;
    EXPECT_TRUE(full->has_optimizer);
    expect_same_tensors(full->tensors, tensors);
    EXPECT_EQ(full->config.base_model, "Qwen/Qwen3-8B");
    EXPECT_EQ(full->config.rank, 4);
    EXPECT_DOUBLE_EQ(full->config.alpha, 8.0);
    EXPECT_EQ(full->config.target_modules, test_config().target_modules);
    EXPECT_TRUE(full->config.train_attn);
    EXPECT_FALSE(full->config.train_mlp);
    EXPECT_TRUE(full->config.train_unembed);

    auto weights_only = read_checkpoint(dir_, false);
    ASSERT_TRUE(weights_only.ok());
    EXPECT_FALSE(weights_only->has_optimizer);
    expect_same_tensors(weights_only->tensors, adapter_tensors());
}

TEST_F(CheckpointFilesTest, SamplerCheckpointHasNoOptimizerState) {
    ASSERT_TRUE(write_checkpoint(dir_, test_config(), adapter_tensors(), false).ok());
    EXPECT_FALSE(fs::exists(fs::path(dir_) / "optimizer_state.safetensors"));
    auto weights = read_checkpoint(dir_, false);
    ASSERT_TRUE(weights.ok());
    expect_same_tensors(weights->tensors, adapter_tensors());
    auto with_optimizer = read_checkpoint(dir_, true);
    ASSERT_FALSE(with_optimizer.ok());
    EXPECT_EQ(with_optimizer.error().kind, ErrorKind::INVALID_ARGUMENT);
    EXPECT_NE(with_optimizer.error().message.find("no optimizer state"), std::string::npos);
}

TEST_F(CheckpointFilesTest, OverwriteRules) {
    ASSERT_TRUE(write_checkpoint(dir_, test_config(), training_tensors(), false).ok());
    auto again = write_checkpoint(dir_, test_config(), adapter_tensors(), false);
    ASSERT_FALSE(again.ok());
    EXPECT_EQ(again.error().kind, ErrorKind::INVALID_ARGUMENT);
    EXPECT_NE(again.error().message.find("already exists"), std::string::npos) << again.error().message;
    EXPECT_TRUE(read_checkpoint(dir_, true).ok());  // the original is untouched

    Tensors replacement = adapter_tensors();
    replacement[A_KEY] = f32_tensor({4, 6}, 100.0f);
    ASSERT_TRUE(write_checkpoint(dir_, test_config(), replacement, true).ok());
    EXPECT_FALSE(fs::exists(fs::path(dir_) / "optimizer_state.safetensors"));  // old files are gone
    auto read = read_checkpoint(dir_, false);
    ASSERT_TRUE(read.ok());
    expect_same_tensors(read->tensors, replacement);
    EXPECT_EQ(weights_entries(), std::set<std::string>{"step1"});  // no temp or old dirs left
}

TEST_F(CheckpointFilesTest, NoTempDirsAfterFailedWrite) {
    Tensors bad;
    OwnedTensor wrong = f32_tensor({2, 2}, 0.0f);
    wrong.bytes.pop_back();  // size does not match the shape: write_safetensors refuses it
    bad["x"] = wrong;
    auto written = write_checkpoint(dir_, test_config(), bad, false);
    ASSERT_FALSE(written.ok());
    EXPECT_TRUE(weights_entries().empty());
    EXPECT_FALSE(fs::exists(dir_));
}

TEST_F(CheckpointFilesTest, MissingAndIncompleteCheckpoints) {
    auto missing = read_checkpoint(dir_, false);
    ASSERT_FALSE(missing.ok());
    EXPECT_EQ(missing.error().kind, ErrorKind::NOT_FOUND);
    EXPECT_NE(missing.error().message.find("checkpoint not found"), std::string::npos);

    ASSERT_TRUE(write_checkpoint(dir_, test_config(), adapter_tensors(), false).ok());
    fs::remove(fs::path(dir_) / "checkpoint_complete");
    auto incomplete = read_checkpoint(dir_, false);
    ASSERT_FALSE(incomplete.ok());
    EXPECT_EQ(incomplete.error().kind, ErrorKind::NOT_FOUND);
    EXPECT_NE(incomplete.error().message.find("incomplete checkpoint"), std::string::npos);
}

TEST_F(CheckpointFilesTest, ForeignAdapterConfigInfersTrainedParts) {
    ASSERT_TRUE(write_checkpoint(dir_, test_config(), adapter_tensors(), false).ok());
    std::ofstream(fs::path(dir_) / "adapter_config.json", std::ios::trunc)
        << R"({"r": 16, "lora_alpha": 32, "target_modules": ["gate_proj", "down_proj"],
              "base_model_name_or_path": "other"})";
    auto read = read_checkpoint(dir_, false);
    ASSERT_TRUE(read.ok()) << read.error().message;
    EXPECT_EQ(read->config.rank, 16);
    EXPECT_FALSE(read->config.train_attn);
    EXPECT_TRUE(read->config.train_mlp);
    EXPECT_FALSE(read->config.train_unembed);

    std::ofstream(fs::path(dir_) / "adapter_config.json", std::ios::trunc) << "{not json";
    auto broken = read_checkpoint(dir_, false);
    ASSERT_FALSE(broken.ok());
    EXPECT_EQ(broken.error().kind, ErrorKind::INTERNAL);
}

TEST_F(CheckpointFilesTest, RemoveCheckpoint) {
    ASSERT_TRUE(write_checkpoint(dir_, test_config(), training_tensors(), false).ok());
    ASSERT_TRUE(remove_checkpoint(dir_).ok());
    EXPECT_FALSE(fs::exists(dir_));
    EXPECT_TRUE(remove_checkpoint(dir_).ok());  // missing is fine
}

TEST_F(CheckpointFilesTest, TarExtractsToTheSameFiles) {
    ASSERT_TRUE(write_checkpoint(dir_, test_config(), training_tensors(), false).ok());
    // A file whose size is an exact multiple of 512 exercises the no-padding case.
    std::ofstream(fs::path(dir_) / "zz_block.bin", std::ios::binary) << std::string(1024, 'x');
    auto archive = tar_directory(dir_);
    ASSERT_TRUE(archive.ok()) << archive.error().message;
    EXPECT_EQ(archive->size() % 512, 0u);
    EXPECT_EQ(std::string(archive->data() + 257, 6), std::string("ustar\0", 6));
    EXPECT_EQ(std::string(archive->data(), 19), "adapter_config.json");  // sorted by name

    const fs::path tar_path = data_dir_ / "ckpt.tar";
    std::ofstream(tar_path, std::ios::binary) << archive.value();
    const fs::path out = data_dir_ / "extracted";
    fs::create_directories(out);
    const std::string command = "tar -xf '" + tar_path.string() + "' -C '" + out.string() + "'";
    ASSERT_EQ(std::system(command.c_str()), 0) << command;

    std::set<std::string> extracted;
    for (const auto & entry : fs::directory_iterator(out)) {
        const std::string name = entry.path().filename().string();
        extracted.insert(name);
        EXPECT_EQ(file_bytes(entry.path()), file_bytes(fs::path(dir_) / name)) << name;
        EXPECT_EQ((fs::status(entry.path()).permissions() & fs::perms::owner_write), fs::perms::owner_write);
    }
    EXPECT_EQ(extracted, (std::set<std::string>{"adapter_config.json", "adapter_model.safetensors",
                                                "checkpoint_complete", "optimizer_state.safetensors", "zz_block.bin"}));
}

TEST_F(CheckpointFilesTest, TarOfMissingDirectoryIsNotFound) {
    auto archive = tar_directory(dir_);
    ASSERT_FALSE(archive.ok());
    EXPECT_EQ(archive.error().kind, ErrorKind::NOT_FOUND);
}

}  // namespace
}  // namespace tinkerd::store
