// Test-only helpers: tiny randomly initialised Hugging Face model directories (config.json + model.safetensors)
// for the llama, qwen3, qwen2, qwen3_moe, qwen3_5 and qwen3_5_moe families, written by the tests themselves,
// and a self-removing temporary directory. Torch-free; failures throw std::runtime_error.
#pragma once

#include <cstdint>
#include <map>
#include <string>

#include "model/safetensors.h"

namespace tinkerd::testing {

enum class TinyFamily { LLAMA, QWEN3, QWEN2, QWEN3_MOE, QWEN3_5, QWEN3_5_MOE };

// A unique directory under the system temp dir, removed (with its contents) on destruction.
class ScopedTempDir {
  public:
    explicit ScopedTempDir(const std::string & prefix = "tinkerd_test");
    ~ScopedTempDir();
    ScopedTempDir(const ScopedTempDir &) = delete;
    ScopedTempDir & operator=(const ScopedTempDir &) = delete;
    const std::string & path() const { return path_; }
    std::string file(const std::string & name) const { return path_ + "/" + name; }

  private:
    std::string path_;
};

// config.json text of the family's tiny model. llama: vocab 61, hidden 16, 2 layers, 4 heads / 2 kv
// heads, untied; qwen3: vocab 53, head_dim 8 != hidden / heads, tied embeddings, q/k norms;
// qwen2: vocab 47, hidden 12, 3 heads / 1 kv head, q/k/v biases, untied; qwen3_moe: qwen3's attention,
// untied, layer 0 sparse (4 experts of F 12, top 2, norm_topk_prob) and layer 1 dense (mlp_only_layers);
// qwen3_5 (Qwen3_5ForCausalLM): layer 0 Gated DeltaNet (HK 2, HV 4, Dk = Dv = 4, conv 4), layer 1 gated
// full attention (4 heads / 2 kv heads, head_dim 8, partial_rotary_factor 0.5), tied, (1 + w) norms;
// qwen3_5_moe (Qwen3_5MoeForCausalLM): qwen3_5's mixers, untied, both layers sparse (4 experts of F 12 in the
// fused gate_up_proj / down_proj layout, top 2) with a shared expert of 10 and its sigmoid gate.
// wide: hidden, intermediate and expert sizes 256 and head_dim 64 (every product's input a whole number of
// K-quant blocks), for the quantised-weight tests.
std::string tiny_config_json(TinyFamily family, bool wide = false);

// Every checkpoint tensor of the family's tiny model, random from a seeded std::mt19937, stored in
// dtype (F32 or BF16; BF16 rounds to nearest even).
std::map<std::string, model::OwnedTensor> tiny_model_tensors(TinyFamily family, model::DType dtype, uint32_t seed,
                                                             bool wide = false);

// Writes config_json and tensors as <dir>/config.json and <dir>/model.safetensors (dir must exist).
void write_model_dir(const std::string & dir, const std::string & config_json,
                     const std::map<std::string, model::OwnedTensor> & tensors);

// write_model_dir(dir, tiny_config_json(family), tiny_model_tensors(family, dtype, seed)).
void write_tiny_model(const std::string & dir, TinyFamily family, model::DType dtype, uint32_t seed);

}  // namespace tinkerd::testing
