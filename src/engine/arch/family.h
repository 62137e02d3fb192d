// DecoderFamily: what differs between model families (tensor names, q/k normalisation, the MLP).
// One file per family: llama.cpp (the base behaviour), qwen2.cpp, qwen3.cpp, qwen3_moe.cpp. A new family
// subclasses and overrides only what differs, then registers itself in registry.cpp.
#pragma once

#include <memory>
#include <vector>

#include <torch/torch.h>

#include "engine/lora.h"
#include "engine/weights.h"
#include "model/model_config.h"

namespace tinkerd::engine {

class DecoderFamily {
  public:
    virtual ~DecoderFamily() = default;
    virtual const char * name() const = 0;

    // Loads one decoder layer's tensors by their Hugging Face names, shape-checked: attention, norms,
    // then load_mlp.
    virtual Result<LayerWeights> load_layer(const WeightLoader & loader, const model::ModelConfig & config,
                                            int64_t layer) const;
    // The feed-forward tensors of one layer. Default: the dense SwiGLU's gate/up/down.
    virtual Result<void> load_mlp(const WeightLoader & loader, const model::ModelConfig & config, int64_t layer,
                                  LayerWeights & out) const;
    // Per-head transform of q [T, H, D] and k [T, KV, D] before RoPE. Default: none.
    virtual void prepare_qk(const LayerWeights & weights, const model::ModelConfig & config, torch::Tensor & q,
                            torch::Tensor & k) const {}
    // The feed-forward block on x [T, C] -> [T, C]. Default: SwiGLU down(silu(gate(x)) * up(x)).
    virtual torch::Tensor mlp(const LayerWeights & weights, const model::ModelConfig & config, const torch::Tensor & x,
                              const std::vector<RowSegment> & segments, int64_t layer) const;

  protected:
    // The attention tensors shared by every family; biases only when with_bias.
    Result<void> load_attention(const WeightLoader & loader, const model::ModelConfig & config, int64_t layer,
                                bool with_bias, LayerWeights & out) const;
};

std::unique_ptr<DecoderFamily> make_llama_family();
std::unique_ptr<DecoderFamily> make_qwen2_family();
std::unique_ptr<DecoderFamily> make_qwen3_family();
std::unique_ptr<DecoderFamily> make_qwen3_moe_family();
// The family for a parsed config; nullptr for a family tinkerd parses but cannot run yet (Qwen3.5).
std::unique_ptr<DecoderFamily> make_family(model::ArchFamily family);

// x * rsqrt(mean(x², last dim) + eps) * weight, computed in x's dtype.
torch::Tensor rms_norm(const torch::Tensor & x, const torch::Tensor & weight, double eps);

}  // namespace tinkerd::engine
