// Qwen3-MoE family: Qwen3's attention; the MLP of each sparse layer (config.sparse_layers) is the routed
// mixture of experts of moe_block.h, the others keep the dense SwiGLU. The router's auxiliary loss is not
// computed: like the official service, the training loss is the Tinker loss alone.
#include "engine/arch/moe_block.h"
#include "engine/arch/qwen3.h"

namespace tinkerd::engine {
namespace {

class Qwen3MoeFamily final : public Qwen3Family {
  public:
    const char * name() const override { return "qwen3_moe"; }

    Result<void> load_mlp(const WeightLoader & loader, const model::ModelConfig & c, int64_t layer,
                          LayerWeights & w) const override {
        if (!c.is_sparse_layer(layer)) {
            return DecoderFamily::load_mlp(loader, c, layer, w);
        }
        return load_moe_weights(loader, c, layer, w);
    }

    torch::Tensor mlp(const LayerWeights & w, const model::ModelConfig & c, const torch::Tensor & x,
                      const std::vector<RowSegment> & segments, int64_t layer) const override {
        if (!c.is_sparse_layer(layer)) {
            return DecoderFamily::mlp(w, c, x, segments, layer);
        }
        return moe_forward(w, c, x, segments, layer);
    }
};

}  // namespace

std::unique_ptr<DecoderFamily> make_qwen3_moe_family() {
    return std::make_unique<Qwen3MoeFamily>();
}

}  // namespace tinkerd::engine
