// model_weight_bytes: quantised (U8) blocks count at their size, other tensors at the stored element size
// asked for; check_model_fits accepts a small model; an external_weights.json manifest adds its tensors.
#include "model/memory_check.h"

#include <filesystem>
#include <fstream>

#include <gtest/gtest.h>

#include "model/safetensors.h"

namespace tinkerd::model {
namespace {

class MemoryCheckTest : public ::testing::Test {
  protected:
    void SetUp() override {
        dir_ = std::filesystem::temp_directory_path() / ("memory_check_" + std::to_string(::getpid()));
        std::filesystem::create_directories(dir_);
        std::map<std::string, OwnedTensor> tensors;
        tensors["w"] = {DType::F32, {4, 4}, std::vector<uint8_t>(64)};
        tensors["q"] = {DType::U8, {2, 3, 34}, std::vector<uint8_t>(204)};
        ASSERT_TRUE(write_safetensors((dir_ / "model.safetensors").string(), tensors).ok());
    }
    void TearDown() override { std::filesystem::remove_all(dir_); }
    std::filesystem::path dir_;
};

TEST_F(MemoryCheckTest, CountsBlocksAtTheirSizeAndOtherTensorsInTheStoredDtype) {
    EXPECT_EQ(model_weight_bytes(dir_.string(), 0).value(), 64u + 204u);
    EXPECT_EQ(model_weight_bytes(dir_.string(), 2).value(), 32u + 204u);
    EXPECT_TRUE(check_model_fits("tiny", dir_.string(), 4).ok());
}

TEST_F(MemoryCheckTest, ExternalManifestAddsItsRangesAndIsChecked) {
    const auto blob = dir_ / "blob.bin";
    std::ofstream(blob, std::ios::binary) << std::string(100, 'x');
    std::ofstream(dir_ / EXTERNAL_WEIGHTS)
        << R"({"file": ")" << blob.string() << R"(", "size": 100, "tensors": {"e": {"dtype": "U8", "shape": [2, 1, 34],
                                              "offset": 10, "n_bytes": 68}}})";
    EXPECT_EQ(model_weight_bytes(dir_.string(), 0).value(), 64u + 204u + 68u);
    auto file = SafetensorsFile::open_model_dir(dir_.string());
    ASSERT_TRUE(file.ok()) << file.error().message;
    EXPECT_EQ((*file)->get("e").value().shape, (std::vector<int64_t>{2, 1, 34}));
    // A range outside the file, or a file of another size, is refused by name.
    std::ofstream(dir_ / EXTERNAL_WEIGHTS)
        << R"({"file": ")" << blob.string() << R"(", "size": 100, "tensors": {"e": {"dtype": "U8", "shape": [2, 1, 34],
                                              "offset": 40, "n_bytes": 68}}})";
    auto bad = SafetensorsFile::open_model_dir(dir_.string());
    ASSERT_FALSE(bad.ok());
    EXPECT_NE(bad.error().message.find("tensor 'e'"), std::string::npos) << bad.error().message;
    std::ofstream(dir_ / EXTERNAL_WEIGHTS) << R"({"file": ")" << blob.string() << R"(", "size": 101, "tensors": {}})";
    auto moved = SafetensorsFile::open_model_dir(dir_.string());
    ASSERT_FALSE(moved.ok());
    EXPECT_NE(moved.error().message.find("no longer 101 bytes"), std::string::npos) << moved.error().message;
}

}  // namespace
}  // namespace tinkerd::model
