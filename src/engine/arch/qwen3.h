// Qwen3Family: the Llama layout plus a per-head RMSNorm on q and k. Declared here so that the families
// built on Qwen3's attention (Qwen3-MoE) can derive from it.
#pragma once

#include "engine/arch/family.h"

namespace tinkerd::engine {

class Qwen3Family : public DecoderFamily {
  public:
    const char * name() const override { return "qwen3"; }
    bool runs_decode_layers() const override { return true; }
    Result<LayerWeights> load_layer(const WeightLoader & loader, const model::ModelConfig & c,
                                    int64_t layer) const override;
    void prepare_qk(const LayerWeights & w, const model::ModelConfig & c, torch::Tensor & q,
                    torch::Tensor & k) const override;
};

}  // namespace tinkerd::engine
