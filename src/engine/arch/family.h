// DecoderFamily: what differs between model families (tensor names, q/k normalisation, the token mixer,
// the MLP). One file per family: llama.cpp (the base behaviour), qwen2.cpp, qwen3.cpp, qwen3_moe.cpp,
// qwen3_5.cpp. A new family subclasses and overrides only what differs, then registers itself in registry.cpp.
#pragma once

#include <array>
#include <memory>
#include <vector>

#include <torch/torch.h>

#include "engine/attention.h"
#include "engine/kv_cache.h"
#include "engine/lora.h"
#include "engine/weights.h"
#include "model/model_config.h"

namespace tinkerd::engine {

// What a layer's token mixer sees besides its weights: the packed rows' adapters, where the sequences
// lie, and the RoPE tables of the rows' positions.
struct MixerContext {
    const std::vector<RowSegment> & segments;
    const SequenceLayout & layout;
    const torch::Tensor & cos;  // [T, 1, Dr] (Dr = rotary_dim(config))
    const torch::Tensor & sin;  // [T, 1, Dr]
};

// The same for an incremental (cached) forward: sequence s owns rows [sum(lengths[..s]), + lengths[s]) and
// continues caches[s]; attention appends the attention layers' K/V.
struct CachedMixerContext {
    const std::vector<RowSegment> & segments;
    const std::vector<int64_t> & lengths;         // new rows per sequence
    const std::vector<SequenceCache *> & caches;  // one per sequence
    const CachedAttention & attention;
    const torch::Tensor & cos;  // [T, 1, Dr] at each row's position
    const torch::Tensor & sin;  // [T, 1, Dr]
};

class DecoderFamily {
  public:
    virtual ~DecoderFamily() = default;
    virtual const char * name() const = 0;

    // Loads one decoder layer's tensors by their Hugging Face names, shape-checked: attention, norms,
    // then load_mlp.
    virtual Result<LayerWeights> load_layer(const WeightLoader & loader, const model::ModelConfig & config,
                                            int64_t layer) const;
    // The feed-forward tensors of one layer: the routed experts (moe_block.h) where config.is_sparse_layer,
    // else the dense SwiGLU's gate/up/down.
    virtual Result<void> load_mlp(const WeightLoader & loader, const model::ModelConfig & config, int64_t layer,
                                  LayerWeights & out) const;
    // Per-head transform of q [T, H, D] and k [T, KV, D] before RoPE. Default: none.
    virtual void prepare_qk(const LayerWeights & weights, const model::ModelConfig & config, torch::Tensor & q,
                            torch::Tensor & k) const {}
    // The token mixer of one layer on its normed input h [T, C] -> [T, C] (added to the residual stream).
    // Default: causal self-attention (attention_inputs, packed attention, o_proj with LoRA).
    virtual torch::Tensor token_mixer(const LayerWeights & weights, const model::ModelConfig & config,
                                      const torch::Tensor & h, const MixerContext & ctx, int64_t layer) const;
    // token_mixer for the new rows of a cached forward (sampling), reading and extending each sequence's
    // cache. Default: attention_inputs, CachedAttention::run, o_proj with LoRA.
    virtual torch::Tensor cached_token_mixer(const LayerWeights & weights, const model::ModelConfig & config,
                                             const torch::Tensor & h, const CachedMixerContext & ctx,
                                             int64_t layer) const;
    // q [T, H, D] and k, v [T, KV, D] of one attention layer from h [T, C]: the fused q/k/v product with
    // LoRA, prepare_qk, RoPE. Also used by the KV-cached decode path.
    std::array<torch::Tensor, 3> attention_inputs(const LayerWeights & weights, const model::ModelConfig & config,
                                                  const torch::Tensor & h, const std::vector<RowSegment> & segments,
                                                  const torch::Tensor & cos, const torch::Tensor & sin,
                                                  int64_t layer) const;
    // Whether run_decode_layers (decode_layers.h) computes this family's layers in a decode step: the default
    // attention mixer (prepare_qk none, or Qwen3's per-head RMSNorm) and the dense SwiGLU MLP. Default: no.
    virtual bool runs_decode_layers() const { return false; }
    // Added to every RMSNorm weight when loading (Qwen3.5 multiplies by 1 + weight). Default: 0.
    virtual double norm_weight_offset() const { return 0.0; }
    // The feed-forward block on x [T, C] -> [T, C]: moe_forward on a sparse layer, else the dense SwiGLU
    // down(silu(gate(x)) * up(x)).
    virtual torch::Tensor mlp(const LayerWeights & weights, const model::ModelConfig & config, const torch::Tensor & x,
                              const std::vector<RowSegment> & segments, int64_t layer) const;

  protected:
    // The attention tensors shared by every family; biases only when with_bias. q_proj has
    // model::projection_shape(config, Q).out rows (twice H·D with Qwen3.5's output gate).
    Result<void> load_attention(const WeightLoader & loader, const model::ModelConfig & config, int64_t layer,
                                bool with_bias, LayerWeights & out) const;
    // input_layernorm and post_attention_layernorm.
    Result<void> load_norms(const WeightLoader & loader, const model::ModelConfig & config, int64_t layer,
                            LayerWeights & out) const;
};

std::unique_ptr<DecoderFamily> make_llama_family();
std::unique_ptr<DecoderFamily> make_qwen2_family();
std::unique_ptr<DecoderFamily> make_qwen3_family();
std::unique_ptr<DecoderFamily> make_qwen3_moe_family();
std::unique_ptr<DecoderFamily> make_qwen3_5_family();
// The family for a parsed config (Qwen3.5-MoE runs on the Qwen3.5 family: its sparse layers take the MoE
// block like every family's); nullptr for a family tinkerd parses but cannot run.
std::unique_ptr<DecoderFamily> make_family(model::ArchFamily family);

// The gate_proj / up_proj / down_proj of a dense SwiGLU under prefix ("model.layers.3.mlp.", or a shared
// expert's "….mlp.shared_expert.") into w.w_gate, w_up [F, C] and w_down [C, F].
Result<void> load_swiglu_weights(const WeightLoader & loader, const std::string & prefix, int64_t hidden,
                                 int64_t intermediate, LayerWeights & w);

// down(silu(gate(x)) * up(x)) with the LoRA of targets {gate, up, down}: x [T, C], w's w_gate_up [2F, C] (gate
// rows first; or w_gate and w_up when they could not be fused), w_down [C, F] -> [T, C]. The dense MLP (GATE,
// UP, DOWN) and Qwen3.5-MoE's shared expert (SHARED_GATE, SHARED_UP, SHARED_DOWN).
torch::Tensor swiglu_mlp(const torch::Tensor & x, const LayerWeights & w, const std::vector<RowSegment> & segments,
                         int64_t layer, const std::array<LoraTarget, 3> & targets);

// x * rsqrt(mean(x², last dim) + eps) * weight, computed in x's dtype.
torch::Tensor rms_norm(const torch::Tensor & x, const torch::Tensor & weight, double eps);

// The fused q/k/v product of an attention layer with its q/k/v LoRA: h [T, C] -> q [T, q_rows], k, v
// [T, KV·D] (q_rows = projection_shape(config, Q).out), before any reshape.
std::array<torch::Tensor, 3> project_qkv(const LayerWeights & weights, const model::ModelConfig & config,
                                         const torch::Tensor & h, const std::vector<RowSegment> & segments,
                                         int64_t layer);

}  // namespace tinkerd::engine
