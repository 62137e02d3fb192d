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

// cos/sin tables for positions 0..n-1, [n, Dr] in dtype (Dr = rotary_dim(config)); built in float64 and cast.
class RopeTables {
  public:
    RopeTables(const model::ModelConfig & config, torch::ScalarType dtype, torch::Device device);
    // Tables for the given positions [T] -> cos, sin [T, 1, Dr] (broadcast over heads). max_position: the largest
    // of them, known on the host (the tables grow to it without reading positions back from the device).
    std::pair<torch::Tensor, torch::Tensor> lookup(const torch::Tensor & positions, int64_t max_position);
    // Interleaved multimodal RoPE (Qwen3-VL; config.mrope_section non-empty): positions [3, T] (temporal,
    // height, width); rotary frequency j takes its angle from the height position where j % 3 == 1 and
    // j < 3·section[1], from the width position where j % 3 == 2 and j < 3·section[2], else the temporal one.
    std::pair<torch::Tensor, torch::Tensor> lookup_mrope(const torch::Tensor & positions, int64_t max_position);

  private:
    void grow(int64_t n_positions);
    torch::Tensor inv_freq_;                        // [Dr/2] float64
    torch::Tensor cos_, sin_;                       // [n, Dr]
    torch::Tensor height_columns_, width_columns_;  // [Dr] bool: the mrope columns (undefined without mrope)
    torch::ScalarType dtype_;
    torch::Device device_;
};

// The rotated dims of each head: int(head_dim · partial_rotary_factor) (Qwen3.5: a quarter; others: all).
int64_t rotary_dim(const model::ModelConfig & config);

// Inverse frequencies [Dr/2] (float64), with llama3 scaling when the config asks for it.
torch::Tensor rope_inv_freq(const model::ModelConfig & config);

// x [T, heads, D] rotated with rotate_half convention: x·cos + rotate_half(x)·sin (cos, sin [T, 1, D]).
torch::Tensor apply_rope(const torch::Tensor & x, const torch::Tensor & cos, const torch::Tensor & sin);

// Partial rotary embedding (transformers' apply_rotary_pos_emb when cos is narrower than the head): the first
// Dr dims of x [T, heads, D] rotated as apply_rope, the other D - Dr passed through; cos, sin [T, 1, Dr].
torch::Tensor apply_partial_rope(const torch::Tensor & x, const torch::Tensor & cos, const torch::Tensor & sin);

// Causal GQA attention per sequence. q [T, H, D], k and v [T, KV, D]; returns [T, H*D].
// Query head h uses key/value head h / (H / KV). Sequences of equal length are batched together.
// Runs in q's dtype (the act dtype: in bf16 the batched matmuls cost stories260K's LoRA gradients 5x accuracy).
torch::Tensor packed_causal_attention(const torch::Tensor & q, const torch::Tensor & k, const torch::Tensor & v,
                                      const SequenceLayout & layout);

}  // namespace tinkerd::engine
