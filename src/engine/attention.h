// Rotary position embeddings (incl. llama3 frequency scaling) and causal attention over packed
// sequences: each sequence attends only to itself, with no padding and no FLOPs spent across rows.
#pragma once

#include <map>
#include <vector>

#include <torch/torch.h>

#include "model/model_config.h"

namespace tinkerd::engine {

// Where each sequence sits in the packed batch of T tokens.
struct SequenceLayout {
    std::vector<int64_t> offsets;  // first row of each sequence
    std::vector<int64_t> lengths;  // tokens in each sequence
    int64_t n_tokens() const;
};

// cos/sin tables for positions 0..n-1, [n, D] in dtype; built in float64 and cast.
class RopeTables {
  public:
    RopeTables(const model::ModelConfig & config, torch::ScalarType dtype, torch::Device device);
    // Tables for the given positions [T] -> cos, sin [T, 1, D] (broadcast over heads).
    std::pair<torch::Tensor, torch::Tensor> lookup(const torch::Tensor & positions);

  private:
    void grow(int64_t n_positions);
    torch::Tensor inv_freq_;   // [D/2] float64
    torch::Tensor cos_, sin_;  // [n, D]
    torch::ScalarType dtype_;
    torch::Device device_;
};

// Inverse frequencies [D/2] (float64), with llama3 scaling when the config asks for it.
torch::Tensor rope_inv_freq(const model::ModelConfig & config);

// x [T, heads, D] rotated with rotate_half convention: x·cos + rotate_half(x)·sin.
torch::Tensor apply_rope(const torch::Tensor & x, const torch::Tensor & cos, const torch::Tensor & sin);

// Causal GQA attention per sequence. q [T, H, D], k and v [T, KV, D]; returns [T, H*D].
// Query head h uses key/value head h / (H / KV). Sequences of equal length are batched together.
// Runs in q's dtype (the act dtype: in bf16 the batched matmuls cost stories260K's LoRA gradients 5x accuracy).
torch::Tensor packed_causal_attention(const torch::Tensor & q, const torch::Tensor & k, const torch::Tensor & v,
                                      const SequenceLayout & layout);

}  // namespace tinkerd::engine
