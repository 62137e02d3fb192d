// Qwen2 family: Llama layout plus biases on the q, k and v projections (config.attention_bias is
// forced on by the config parser).
#include "engine/arch/family.h"

namespace tinkerd::engine {
namespace {

class Qwen2Family final : public DecoderFamily {
  public:
    const char * name() const override { return "qwen2"; }
    bool runs_decode_layers() const override { return true; }
};

}  // namespace

std::unique_ptr<DecoderFamily> make_qwen2_family() {
    return std::make_unique<Qwen2Family>();
}

}  // namespace tinkerd::engine
