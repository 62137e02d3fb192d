// Maps a config's architecture family to the code that runs it. Register new families here.
#include "engine/arch/family.h"

namespace tinkerd::engine {

std::unique_ptr<DecoderFamily> make_family(model::ArchFamily family) {
    switch (family) {
        case model::ArchFamily::LLAMA:
            return make_llama_family();
        case model::ArchFamily::QWEN2:
            return make_qwen2_family();
        case model::ArchFamily::QWEN3:
            return make_qwen3_family();
        case model::ArchFamily::QWEN3_MOE:
            return make_qwen3_moe_family();
        case model::ArchFamily::QWEN3_5:
        case model::ArchFamily::QWEN3_5_MOE:  // the same mixers; every layer's MLP is the MoE block
            return make_qwen3_5_family();
    }
    return nullptr;
}

}  // namespace tinkerd::engine
