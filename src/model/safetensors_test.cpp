// Unit tests for SafetensorsFile and write_safetensors: round trips for every dtype, sharded model
// directories, the named errors for malformed files, and the real stories260K checkpoints.
#include "model/safetensors.h"

#include <cstdlib>
#include <cstring>
#include <filesystem>
#include <fstream>
#include <string>

#include <gtest/gtest.h>

namespace tinkerd::model {
namespace {

namespace fs = std::filesystem;

constexpr DType all_dtypes[] = {DType::F32, DType::F16, DType::BF16, DType::F64, DType::I64, DType::I32};

// A fresh directory under the gtest temp dir, removed at the end of each test.
class SafetensorsTest : public testing::Test {
  protected:
    void SetUp() override {
        std::string pattern = (fs::path(testing::TempDir()) / "safetensors_test_XXXXXX").string();
        ASSERT_NE(mkdtemp(pattern.data()), nullptr);
        dir_ = pattern;
    }
    void TearDown() override { fs::remove_all(dir_); }
    std::string path(const std::string & name) const { return (dir_ / name).string(); }

    fs::path dir_;
};

// A tensor whose byte i is (seed + i) mod 256.
OwnedTensor make_tensor(DType dtype, std::vector<int64_t> shape, int seed) {
    OwnedTensor t;
    t.dtype = dtype;
    t.shape = std::move(shape);
    size_t numel = 1;
    for (int64_t d : t.shape) {
        numel *= static_cast<size_t>(d);
    }
    t.bytes.resize(numel * dtype_size(dtype));
    for (size_t i = 0; i < t.bytes.size(); ++i) {
        t.bytes[i] = static_cast<uint8_t>(seed + i);
    }
    return t;
}

// Writes a file from raw parts: an explicit header length, header text and data bytes.
void write_raw(const std::string & file, uint64_t header_len, const std::string & header, size_t data_bytes) {
    std::ofstream out(file, std::ios::binary);
    for (int i = 0; i < 8; ++i) {
        out.put(static_cast<char>(header_len >> (8 * i)));
    }
    out << header << std::string(data_bytes, '\0');
}

void write_raw(const std::string & file, const std::string & header, size_t data_bytes) {
    write_raw(file, header.size(), header, data_bytes);
}

void expect_same(const TensorView & view, const OwnedTensor & tensor) {
    EXPECT_EQ(view.dtype, tensor.dtype);
    EXPECT_EQ(view.shape, tensor.shape);
    ASSERT_EQ(view.n_bytes, tensor.bytes.size());
    if (view.n_bytes > 0) {  // memcmp must not see the null data() of an empty vector
        EXPECT_EQ(std::memcmp(view.data, tensor.bytes.data(), view.n_bytes), 0);
    }
}

TEST_F(SafetensorsTest, RoundTripsEveryDType) {
    std::map<std::string, OwnedTensor> tensors;
    int seed = 0;
    for (DType dtype : all_dtypes) {
        tensors[std::string("t_") + dtype_name(dtype)] = make_tensor(dtype, {3, 5}, seed++);
    }
    tensors["scalar"] = make_tensor(DType::F32, {}, 7);
    tensors["empty"] = make_tensor(DType::I64, {0, 4}, 9);
    ASSERT_TRUE(write_safetensors(path("a.safetensors"), tensors, {{"format", "pt"}}).ok());
    EXPECT_FALSE(fs::exists(path("a.safetensors.tmp")));

    auto file = SafetensorsFile::open(path("a.safetensors"));
    ASSERT_TRUE(file.ok()) << file.error().message;
    EXPECT_EQ((*file)->names().size(), tensors.size());
    EXPECT_EQ((*file)->metadata().at("format"), "pt");
    for (const auto & [name, tensor] : tensors) {
        auto view = (*file)->get(name);
        ASSERT_TRUE(view.ok()) << name;
        EXPECT_EQ(view->name, name);
        expect_same(view.value(), tensor);
    }
    EXPECT_EQ((*file)->get("scalar")->numel(), 1);
    EXPECT_EQ((*file)->get("empty")->numel(), 0);
}

TEST_F(SafetensorsTest, DataSectionIsEightByteAligned) {
    for (int name_len = 1; name_len <= 8; ++name_len) {
        std::string file = path("align.safetensors");
        ASSERT_TRUE(write_safetensors(file, {{std::string(name_len, 'x'), make_tensor(DType::F16, {3}, 1)}}).ok());
        std::ifstream in(file, std::ios::binary);
        uint64_t header_len = 0;
        for (int i = 0; i < 8; ++i) {
            header_len |= static_cast<uint64_t>(static_cast<uint8_t>(in.get())) << (8 * i);
        }
        EXPECT_EQ((8 + header_len) % 8, 0u) << "name length " << name_len;
        EXPECT_TRUE(SafetensorsFile::open(file).ok());
    }
}

TEST_F(SafetensorsTest, WriteRejectsWrongByteCount) {
    OwnedTensor bad = make_tensor(DType::F32, {4}, 0);
    bad.bytes.pop_back();
    auto result = write_safetensors(path("bad.safetensors"), {{"w", bad}});
    ASSERT_FALSE(result.ok());
    EXPECT_EQ(result.error().kind, ErrorKind::INVALID_ARGUMENT);
    EXPECT_NE(result.error().message.find("tensor 'w' needs 16 bytes but has 15"), std::string::npos);
    EXPECT_FALSE(fs::exists(path("bad.safetensors")));
}

TEST_F(SafetensorsTest, OpensShardedModelDir) {
    OwnedTensor a = make_tensor(DType::F32, {2, 2}, 1), b = make_tensor(DType::BF16, {3}, 2);
    OwnedTensor c = make_tensor(DType::I32, {5}, 3);
    ASSERT_TRUE(write_safetensors(path("model-00001-of-00002.safetensors"), {{"a", a}, {"b", b}}).ok());
    ASSERT_TRUE(write_safetensors(path("model-00002-of-00002.safetensors"), {{"c", c}}).ok());
    std::ofstream(path("model.safetensors.index.json")) << R"({"metadata": {"total_size": 42}, "weight_map": {
        "a": "model-00001-of-00002.safetensors", "b": "model-00001-of-00002.safetensors",
        "c": "model-00002-of-00002.safetensors"}})";

    auto file = SafetensorsFile::open_model_dir(dir_.string());
    ASSERT_TRUE(file.ok()) << file.error().message;
    EXPECT_EQ((*file)->names(), (std::vector<std::string>{"a", "b", "c"}));
    expect_same((*file)->get("a").value(), a);
    expect_same((*file)->get("b").value(), b);
    expect_same((*file)->get("c").value(), c);
}

TEST_F(SafetensorsTest, ShardedIndexNamingWrongShardFails) {
    ASSERT_TRUE(write_safetensors(path("s1.safetensors"), {{"a", make_tensor(DType::F32, {1}, 0)}}).ok());
    ASSERT_TRUE(write_safetensors(path("s2.safetensors"), {{"b", make_tensor(DType::F32, {1}, 0)}}).ok());
    std::ofstream(path("model.safetensors.index.json"))
        << R"({"weight_map": {"a": "s1.safetensors", "b": "s1.safetensors"}})";
    auto file = SafetensorsFile::open_model_dir(dir_.string());
    ASSERT_FALSE(file.ok());
    EXPECT_NE(file.error().message.find("tensor 'b' is mapped to shard 's1.safetensors'"), std::string::npos)
        << file.error().message;
}

TEST_F(SafetensorsTest, TruncatedFileFails) {
    std::string file = path("model.safetensors");
    ASSERT_TRUE(write_safetensors(file, {{"x", make_tensor(DType::F32, {100}, 0)}}).ok());
    fs::resize_file(file, fs::file_size(file) - 4);
    auto result = SafetensorsFile::open(file);
    ASSERT_FALSE(result.ok());
    EXPECT_EQ(result.error().kind, ErrorKind::INVALID_ARGUMENT);
    EXPECT_NE(result.error().message.find("file is truncated: tensor 'x' ends at byte 400 but the data section has "
                                          "396 bytes"),
              std::string::npos)
        << result.error().message;
}

TEST_F(SafetensorsTest, HeaderLengthBeyondFileFails) {
    write_raw(path("h.safetensors"), 1000, "{}", 0);
    auto result = SafetensorsFile::open(path("h.safetensors"));
    ASSERT_FALSE(result.ok());
    EXPECT_EQ(result.error().kind, ErrorKind::INVALID_ARGUMENT);
    EXPECT_NE(result.error().message.find("header length 1000 exceeds the file size 10"), std::string::npos)
        << result.error().message;
}

TEST_F(SafetensorsTest, TinyFileFails) {
    std::ofstream(path("tiny.safetensors")) << "abc";
    auto result = SafetensorsFile::open(path("tiny.safetensors"));
    ASSERT_FALSE(result.ok());
    EXPECT_EQ(result.error().kind, ErrorKind::INVALID_ARGUMENT);
}

TEST_F(SafetensorsTest, UnknownDTypeFails) {
    for (const char * dtype : {"F8_E4M3", "I8"}) {
        write_raw(path("d.safetensors"),
                  std::string(R"({"x": {"dtype": ")") + dtype + R"(", "shape": [4], "data_offsets": [0, 4]}})", 4);
        auto result = SafetensorsFile::open(path("d.safetensors"));
        ASSERT_FALSE(result.ok());
        EXPECT_EQ(result.error().kind, ErrorKind::UNSUPPORTED);
        EXPECT_NE(result.error().message.find(std::string("tensor 'x' has unsupported dtype '") + dtype + "'"),
                  std::string::npos)
            << result.error().message;
    }
}

TEST_F(SafetensorsTest, BadJsonHeaderFails) {
    write_raw(path("j.safetensors"), R"({"x": {"dtype": "F32",)", 0);
    auto result = SafetensorsFile::open(path("j.safetensors"));
    ASSERT_FALSE(result.ok());
    EXPECT_EQ(result.error().kind, ErrorKind::INVALID_ARGUMENT);
    EXPECT_NE(result.error().message.find("header is not valid JSON"), std::string::npos) << result.error().message;

    write_raw(path("j.safetensors"), "[1, 2]", 0);
    result = SafetensorsFile::open(path("j.safetensors"));
    ASSERT_FALSE(result.ok());
    EXPECT_NE(result.error().message.find("header JSON is not an object"), std::string::npos);
}

TEST_F(SafetensorsTest, OffsetsInconsistentWithShapeFail) {
    write_raw(path("model.safetensors"), R"({"x": {"dtype": "F32", "shape": [10, 10], "data_offsets": [0, 396]}})",
              400);
    auto result = SafetensorsFile::open(path("model.safetensors"));
    ASSERT_FALSE(result.ok());
    EXPECT_EQ(result.error().kind, ErrorKind::INVALID_ARGUMENT);
    EXPECT_NE(result.error().message.find("model.safetensors: tensor 'x' needs 400 bytes but data_offsets give 396"),
              std::string::npos)
        << result.error().message;
}

TEST_F(SafetensorsTest, MalformedEntriesFail) {
    const char * headers[] = {
        R"({"x": {"dtype": "F32", "shape": [-1], "data_offsets": [0, 4]}})",
        R"({"x": {"dtype": "F32", "shape": [1], "data_offsets": [4, 0]}})",
        R"({"x": {"dtype": "F32", "shape": [1]}})",
        R"({"x": {"shape": [1], "data_offsets": [0, 4]}})",
        R"({"__metadata__": {"n": 1}})",
    };
    for (const char * header : headers) {
        write_raw(path("m.safetensors"), header, 4);
        auto result = SafetensorsFile::open(path("m.safetensors"));
        ASSERT_FALSE(result.ok()) << header;
        EXPECT_EQ(result.error().kind, ErrorKind::INVALID_ARGUMENT) << header;
    }
}

TEST_F(SafetensorsTest, MissingTensorIsNotFound) {
    ASSERT_TRUE(write_safetensors(path("a.safetensors"), {{"a", make_tensor(DType::F32, {1}, 0)}}).ok());
    auto file = SafetensorsFile::open(path("a.safetensors"));
    ASSERT_TRUE(file.ok());
    EXPECT_TRUE((*file)->contains("a"));
    EXPECT_FALSE((*file)->contains("nope"));
    auto view = (*file)->get("nope");
    ASSERT_FALSE(view.ok());
    EXPECT_EQ(view.error().kind, ErrorKind::NOT_FOUND);
    EXPECT_EQ(view.error().message, "tensor 'nope' not found");
}

TEST_F(SafetensorsTest, MissingFilesAreNotFound) {
    auto dir_result = SafetensorsFile::open_model_dir(dir_.string());
    ASSERT_FALSE(dir_result.ok());
    EXPECT_EQ(dir_result.error().kind, ErrorKind::NOT_FOUND);
    EXPECT_EQ(dir_result.error().message, "no model.safetensors or model.safetensors.index.json in " + dir_.string());

    auto file_result = SafetensorsFile::open(path("absent.safetensors"));
    ASSERT_FALSE(file_result.ok());
    EXPECT_EQ(file_result.error().kind, ErrorKind::NOT_FOUND);
}

// The shared stories260K checkpoints, or "" (with the test skipped) when they are not checked out.
std::string stories_dir(const std::string & variant) {
    const char * source_dir = std::getenv("TINKERD_SOURCE_DIR");
    if (source_dir == nullptr) {
        return "";
    }
    fs::path dir = fs::path(source_dir) / ".." / "shared" / "models" / "stories260K" / variant;
    return fs::exists(dir / "model.safetensors") ? dir.string() : "";
}

void check_stories(const std::string & variant, DType dtype) {
    std::string dir = stories_dir(variant);
    if (dir.empty()) {
        GTEST_SKIP() << "stories260K/" << variant << " not found under $TINKERD_SOURCE_DIR/../shared/models";
    }
    auto file = SafetensorsFile::open_model_dir(dir);
    ASSERT_TRUE(file.ok()) << file.error().message;
    EXPECT_EQ((*file)->names().size(), 47u);
    auto embed = (*file)->get("model.embed_tokens.weight");
    ASSERT_TRUE(embed.ok());
    EXPECT_EQ(embed->shape, (std::vector<int64_t>{512, 64}));
    EXPECT_EQ(embed->dtype, dtype);
    EXPECT_EQ(embed->n_bytes, 512u * 64u * dtype_size(dtype));
}

TEST(SafetensorsStories, OpensF32Checkpoint) {
    check_stories("hf-f32", DType::F32);
}

TEST(SafetensorsStories, OpensBF16Checkpoint) {
    check_stories("hf-bf16", DType::BF16);
}

TEST(SafetensorsRelease, DropsOnlyMappedRangesAndKeepsTheDataReadable) {
    const std::string dir = ::testing::TempDir() + "/release_pages";
    std::filesystem::create_directories(dir);
    std::vector<float> values(1 << 16);
    for (size_t i = 0; i < values.size(); ++i) {
        values[i] = static_cast<float>(i) * 0.5f;
    }
    OwnedTensor t{DType::F32, {static_cast<int64_t>(values.size())}, {}};
    t.bytes.resize(values.size() * sizeof(float));
    std::memcpy(t.bytes.data(), values.data(), t.bytes.size());
    ASSERT_TRUE(write_safetensors(dir + "/big.safetensors", {{"w", t}}).ok());
    auto file = SafetensorsFile::open(dir + "/big.safetensors");
    ASSERT_TRUE(file.ok()) << file.error().message;
    TensorView view = (*file)->get("w").value();
    EXPECT_TRUE((*file)->release_pages(view.data, view.n_bytes));
    EXPECT_FALSE((*file)->release_pages(values.data(), t.bytes.size()));  // not in the mapping: untouched
    EXPECT_EQ(std::memcmp(view.data, values.data(), view.n_bytes), 0);    // faulted back in from the file
    EXPECT_EQ(values[12345], 12345 * 0.5f);
}

}  // namespace
}  // namespace tinkerd::model
