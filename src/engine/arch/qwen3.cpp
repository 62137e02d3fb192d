// Qwen3 family: Llama layout plus a per-head RMSNorm on q and k (q_norm / k_norm over head_dim),
// applied before RoPE. head_dim comes from config and may differ from hidden / heads.
#include "engine/arch/qwen3.h"

namespace tinkerd::engine {

Result<LayerWeights> Qwen3Family::load_layer(const WeightLoader & loader, const model::ModelConfig & c,
                                             int64_t layer) const {
    auto w = DecoderFamily::load_layer(loader, c, layer);
    if (!w.ok()) {
        return w;
    }
    const std::string p = "model.layers." + std::to_string(layer) + ".self_attn.";
    auto q_norm = loader.vector(p + "q_norm.weight", c.head_dim);
    if (!q_norm.ok()) {
        return q_norm.error();
    }
    auto k_norm = loader.vector(p + "k_norm.weight", c.head_dim);
    if (!k_norm.ok()) {
        return k_norm.error();
    }
    w->q_norm = std::move(q_norm).value();
    w->k_norm = std::move(k_norm).value();
    return w;
}

void Qwen3Family::prepare_qk(const LayerWeights & w, const model::ModelConfig & c, torch::Tensor & q,
                             torch::Tensor & k) const {
    q = rms_norm(q, w.q_norm, c.rms_norm_eps);  // [T, H, D]
    k = rms_norm(k, w.k_norm, c.rms_norm_eps);  // [T, KV, D]
}

std::unique_ptr<DecoderFamily> make_qwen3_family() {
    return std::make_unique<Qwen3Family>();
}

}  // namespace tinkerd::engine
