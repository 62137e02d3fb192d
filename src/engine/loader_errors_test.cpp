// Engine::load on tiny generated model directories: every family loads in F32 and BF16 (control), and
// broken checkpoints fail cleanly with a message naming the problem: truncated file, a tensor stored
// as I64 or F8, a missing tensor, a mis-shaped tensor, an unsupported architecture, a missing
// config.json or safetensors file.
#include <cmath>
#include <cstdlib>
#include <cstring>
#include <filesystem>
#include <fstream>

#include <gtest/gtest.h>
#include <nlohmann/json.hpp>

#include "engine/engine.h"
#include "test_models.h"

namespace tinkerd::testing {
namespace {

namespace fs = std::filesystem;
using engine::ComputeDType;
using engine::Engine;
using Tensors = std::map<std::string, model::OwnedTensor>;

// Loads dir and returns the error message; fails the test when loading succeeds.
std::string load_error(const std::string & dir, ComputeDType dtype = ComputeDType::AUTO) {
    auto loaded = Engine::load(dir, {dtype, 1});
    if (loaded.ok()) {
        ADD_FAILURE() << "loading " << dir << " succeeded";
        return "";
    }
    return loaded.error().message;
}

// Writes a safetensors file by hand so that a tensor can carry any dtype string (e.g. "F8_E4M3").
void write_raw_safetensors(const std::string & path, const Tensors & tensors,
                           const std::map<std::string, std::pair<std::string, size_t>> & dtype_overrides) {
    nlohmann::json header = nlohmann::json::object();
    std::string data;
    for (const auto & [name, t] : tensors) {
        std::string dtype = model::dtype_name(t.dtype);
        std::string bytes(t.bytes.begin(), t.bytes.end());
        if (auto it = dtype_overrides.find(name); it != dtype_overrides.end()) {
            dtype = it->second.first;
            int64_t numel = 1;
            for (int64_t d : t.shape)
                numel *= d;
            bytes.assign(static_cast<size_t>(numel) * it->second.second, '\x3c');
        }
        header[name] = {
            {"dtype", dtype}, {"shape", t.shape}, {"data_offsets", {data.size(), data.size() + bytes.size()}}};
        data += bytes;
    }
    std::string text = header.dump();
    text.append((8 - text.size() % 8) % 8, ' ');
    std::ofstream out(path, std::ios::binary);
    const uint64_t n = text.size();
    for (int i = 0; i < 8; ++i)
        out.put(static_cast<char>(n >> (8 * i)));
    out << text << data;
}

bool contains(const std::string & text, const std::string & word) {
    return text.find(word) != std::string::npos;
}

class LoaderErrorsTest : public ::testing::Test {
  protected:
    Tensors tensors() const { return tiny_model_tensors(TinyFamily::LLAMA, model::DType::F32, 17); }
    std::string config() const { return tiny_config_json(TinyFamily::LLAMA); }
    ScopedTempDir dir_{"loader_errors"};
};

TEST_F(LoaderErrorsTest, EveryTinyFamilyLoadsInF32AndBf16) {
    const std::pair<TinyFamily, const char *> families[] = {{TinyFamily::LLAMA, "LlamaForCausalLM"},
                                                            {TinyFamily::QWEN3, "Qwen3ForCausalLM"},
                                                            {TinyFamily::QWEN2, "Qwen2ForCausalLM"},
                                                            {TinyFamily::QWEN3_MOE, "Qwen3MoeForCausalLM"},
                                                            {TinyFamily::QWEN3_5, "Qwen3_5ForCausalLM"}};
    for (const auto & [family, arch] : families) {
        for (model::DType dtype : {model::DType::F32, model::DType::BF16}) {
            ScopedTempDir dir("loader_ok");
            write_tiny_model(dir.path(), family, dtype, 5);
            auto loaded = Engine::load(dir.path(), {ComputeDType::AUTO, 1});
            ASSERT_TRUE(loaded.ok()) << arch << ": " << loaded.error().message;
            Engine & e = **loaded;
            EXPECT_EQ(e.config().architecture, arch);
            EXPECT_EQ(e.compute_dtype_name(), dtype == model::DType::BF16 ? "bf16" : "fp32") << arch;
            auto logits = e.last_logits(engine::BASE_MODEL, {1, 5, 9, 2});
            ASSERT_TRUE(logits.ok()) << logits.error().message;
            ASSERT_EQ(static_cast<int64_t>(logits->size()), e.config().vocab_size);
            double spread = 0;
            for (float x : *logits) {
                ASSERT_TRUE(std::isfinite(x)) << arch;
                spread = std::max(spread, std::abs(static_cast<double>(x - (*logits)[0])));
            }
            EXPECT_GT(spread, 1e-3) << arch << ": logits are constant";
        }
    }
}

TEST_F(LoaderErrorsTest, TruncatedSafetensorsNamesTheTruncatedTensor) {
    write_model_dir(dir_.path(), config(), tensors());
    const std::string file = dir_.file("model.safetensors");
    fs::resize_file(file, fs::file_size(file) - 100);
    // Sorted key order puts layer 1's v_proj then model.norm (64 bytes) at the end of the data.
    for (ComputeDType dtype : {ComputeDType::AUTO, ComputeDType::FP32}) {
        const std::string msg = load_error(dir_.path(), dtype);
        EXPECT_TRUE(contains(msg, "truncated")) << msg;
        EXPECT_TRUE(contains(msg, "model.layers.1.self_attn.v_proj.weight") || contains(msg, "model.norm.weight"))
            << msg;
    }
}

TEST_F(LoaderErrorsTest, TensorStoredAsI64NamesTensorAndDtype) {
    Tensors t = tensors();
    auto & gate = t["model.layers.0.mlp.gate_proj.weight"];
    gate.dtype = model::DType::I64;
    gate.bytes.assign(gate.bytes.size() * 2, 0);
    write_model_dir(dir_.path(), config(), t);
    const std::string msg = load_error(dir_.path());
    EXPECT_TRUE(contains(msg, "model.layers.0.mlp.gate_proj.weight")) << msg;
    EXPECT_TRUE(contains(msg, "I64")) << msg;
}

TEST_F(LoaderErrorsTest, TensorStoredAsF8NamesTensorAndDtype) {
    write_model_dir(dir_.path(), config(), tensors());  // config.json
    write_raw_safetensors(dir_.file("model.safetensors"), tensors(),
                          {{"model.layers.1.self_attn.o_proj.weight", {"F8_E4M3", 1}}});
    const std::string msg = load_error(dir_.path());
    EXPECT_TRUE(contains(msg, "model.layers.1.self_attn.o_proj.weight")) << msg;
    EXPECT_TRUE(contains(msg, "F8_E4M3")) << msg;
}

TEST_F(LoaderErrorsTest, RawWriterControlLoads) {  // the hand-written format itself is valid
    write_model_dir(dir_.path(), config(), tensors());
    write_raw_safetensors(dir_.file("model.safetensors"), tensors(), {});
    auto loaded = Engine::load(dir_.path(), {ComputeDType::AUTO, 1});
    EXPECT_TRUE(loaded.ok()) << loaded.error().message;
}

TEST_F(LoaderErrorsTest, MissingTensorIsNamed) {
    for (const char * name : {"model.layers.1.mlp.up_proj.weight", "lm_head.weight", "model.norm.weight"}) {
        Tensors t = tensors();
        ASSERT_EQ(t.erase(name), 1u) << name;
        write_model_dir(dir_.path(), config(), t);
        const std::string msg = load_error(dir_.path());
        EXPECT_TRUE(contains(msg, std::string("'") + name + "'")) << msg;
    }
}

TEST_F(LoaderErrorsTest, MisShapedTensorNamesItAndBothShapes) {
    Tensors t = tensors();
    auto & k = t["model.layers.0.self_attn.k_proj.weight"];  // [kv heads · head_dim, hidden] = [8,16]
    ASSERT_EQ(k.shape, (std::vector<int64_t>{8, 16}));
    k.shape = {16, 8};
    write_model_dir(dir_.path(), config(), t);
    std::string msg = load_error(dir_.path());
    EXPECT_TRUE(contains(msg, "model.layers.0.self_attn.k_proj.weight")) << msg;
    EXPECT_TRUE(contains(msg, "[16,8]") && contains(msg, "[8,16]")) << msg;

    t = tensors();
    auto & norm = t["model.layers.1.post_attention_layernorm.weight"];
    norm.shape = {4, 4};
    write_model_dir(dir_.path(), config(), t);
    msg = load_error(dir_.path());
    EXPECT_TRUE(contains(msg, "model.layers.1.post_attention_layernorm.weight")) << msg;
    EXPECT_TRUE(contains(msg, "[4,4]") && contains(msg, "[16]")) << msg;
}

TEST_F(LoaderErrorsTest, UnsupportedArchitectureIsNamed) {
    auto c = nlohmann::json::parse(config());
    c["architectures"] = {"GPT2LMHeadModel"};
    write_model_dir(dir_.path(), c.dump(), tensors());
    const std::string msg = load_error(dir_.path());
    EXPECT_TRUE(contains(msg, "GPT2LMHeadModel")) << msg;
    EXPECT_TRUE(contains(msg, "architecture")) << msg;
}

std::string read_model_config(const std::string & file) {
    const char * source_dir = std::getenv("TINKERD_SOURCE_DIR");
    EXPECT_NE(source_dir, nullptr) << "ctest sets TINKERD_SOURCE_DIR";
    std::ifstream in(std::string(source_dir ? source_dir : ".") + "/tests/data/model_configs/" + file);
    EXPECT_TRUE(in.good()) << file;
    return std::string((std::istreambuf_iterator<char>(in)), std::istreambuf_iterator<char>());
}

// The real Qwen3.5-35B-A3B config.json parses (LoRA layout, counts) but the MoE hybrid cannot run yet: a
// clear refusal by name, before any tensor is read.
TEST_F(LoaderErrorsTest, Qwen35MoeIsRefusedByName) {
    write_model_dir(dir_.path(), read_model_config("Qwen3.5-35B-A3B.json"), tensors());
    const std::string msg = load_error(dir_.path());
    EXPECT_TRUE(contains(msg, "Qwen3_5MoeForConditionalGeneration")) << msg;
    EXPECT_TRUE(contains(msg, "not supported yet")) << msg;
}

// The real Qwen3.5-4B config.json (a ForConditionalGeneration) now loads: with llama tensors the first
// tensor it asks for is named under "model.language_model." (its text model's prefix), not misread.
TEST_F(LoaderErrorsTest, Qwen35ConditionalGenerationNamesItsTextModelTensors) {
    Tensors t = tensors();
    t["model.language_model.embed_tokens.weight"] = t.at("model.embed_tokens.weight");
    write_model_dir(dir_.path(), read_model_config("Qwen3.5-4B.json"), t);
    const std::string msg = load_error(dir_.path(), ComputeDType::FP32);
    EXPECT_TRUE(contains(msg, "model.language_model.")) << msg;
}

// A Qwen3.5 model samples too (it was refused before its cached decode existed): tokens in the vocabulary,
// logprobs of a distribution. Exactness is sampler_test's and qwen3_5_sample_test's.
TEST_F(LoaderErrorsTest, Qwen35Samples) {
    write_tiny_model(dir_.path(), TinyFamily::QWEN3_5, model::DType::F32, 5);
    auto loaded = Engine::load(dir_.path(), {ComputeDType::AUTO, 1});
    ASSERT_TRUE(loaded.ok()) << loaded.error().message;
    engine::SampleRequest request;
    request.prompt = {1, 5, 9};
    request.params.max_tokens = 3;
    request.params.stop_at_eos = false;
    request.params.seed = 7;
    auto out = (*loaded)->sample({request});
    ASSERT_EQ(out.size(), 1u);
    ASSERT_TRUE(out[0].ok()) << out[0].error().message;
    ASSERT_EQ(out[0]->sequences.size(), 1u);
    const auto & seq = out[0]->sequences[0];
    ASSERT_EQ(seq.tokens.size(), 3u);
    for (size_t i = 0; i < seq.tokens.size(); ++i) {
        EXPECT_GE(seq.tokens[i], 0);
        EXPECT_LT(seq.tokens[i], (*loaded)->config().vocab_size);
        EXPECT_LE(seq.logprobs[i], 0.0f);
        EXPECT_TRUE(std::isfinite(seq.logprobs[i]));
    }
}

TEST_F(LoaderErrorsTest, MissingConfigJsonNamesThePath) {
    write_model_dir(dir_.path(), config(), tensors());
    fs::remove(dir_.file("config.json"));
    for (ComputeDType dtype : {ComputeDType::AUTO, ComputeDType::BF16}) {
        const std::string msg = load_error(dir_.path(), dtype);
        EXPECT_TRUE(contains(msg, "config.json")) << msg;
        EXPECT_TRUE(contains(msg, dir_.path())) << msg;
    }
}

TEST_F(LoaderErrorsTest, MissingSafetensorsNamesTheDirectory) {
    write_model_dir(dir_.path(), config(), tensors());
    fs::remove(dir_.file("model.safetensors"));
    for (ComputeDType dtype : {ComputeDType::AUTO, ComputeDType::FP32}) {
        const std::string msg = load_error(dir_.path(), dtype);
        EXPECT_TRUE(contains(msg, "model.safetensors")) << msg;
        EXPECT_TRUE(contains(msg, dir_.path())) << msg;
    }
}

}  // namespace
}  // namespace tinkerd::testing
