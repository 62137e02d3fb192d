// Qwen3-MoE family: Qwen3's attention; the MLP of each sparse layer (config.sparse_layers) is the routed
// mixture of experts of moe_block.h (DecoderFamily does that for every family), the others keep the dense
// SwiGLU. The router's auxiliary loss is not computed: the training loss is the Tinker loss alone.
#include "engine/arch/qwen3.h"

namespace tinkerd::engine {
namespace {

// Only the name differs from Qwen3: DecoderFamily's load_mlp / mlp give every sparse layer the MoE block.
class Qwen3MoeFamily final : public Qwen3Family {
  public:
    const char * name() const override { return "qwen3_moe"; }
    bool runs_decode_layers() const override { return false; }
};

}  // namespace

std::unique_ptr<DecoderFamily> make_qwen3_moe_family() {
    return std::make_unique<Qwen3MoeFamily>();
}

}  // namespace tinkerd::engine
