// Qwen3.5 (dense) family: Gated DeltaNet linear-attention layers (config.linear_attention_layers; the mixer
// of delta_rule.h) between gated full-attention layers (q_proj emits per head [query ‖ gate], the attention
// output is multiplied by sigmoid(gate); q/k norm; RoPE on the first rotary_dim dims), every RMSNorm scaled by
// (1 + weight). Training forward only: the KV-cached decode (sampling) is not implemented for it yet.
#include "engine/arch/delta_rule.h"
#include "engine/arch/qwen3.h"
#include "engine/kernels/matmul.h"

namespace tinkerd::engine {
namespace {

DeltaNetDims deltanet_dims(const model::ModelConfig & c) {
    DeltaNetDims d;
    d.k_heads = c.linear_k_heads;
    d.v_heads = c.linear_v_heads;
    d.k_head_dim = c.linear_k_head_dim;
    d.v_head_dim = c.linear_v_head_dim;
    d.conv_kernel = c.linear_conv_kernel;
    d.rms_eps = c.rms_norm_eps;
    return d;
}

// Stores a loaded tensor into dst, or returns the loader's error.
Result<void> assign(torch::Tensor & dst, Result<torch::Tensor> src) {
    if (!src.ok()) {
        return src.error();
    }
    dst = std::move(src).value();
    return {};
}

// The linear_attn.* tensors of one layer: the four input projections fused into w_lin_in (one GEMM).
Result<void> load_linear_attention(const WeightLoader & loader, const model::ModelConfig & c, int64_t layer,
                                   LayerWeights & w) {
    const std::string p = "model.layers." + std::to_string(layer) + ".linear_attn.";
    const DeltaNetDims d = deltanet_dims(c);
    const int64_t C = c.hidden_size, Cc = d.conv_dim(), Vd = d.value_dim(), HV = d.v_heads;
    torch::Tensor qkv, z, b, a, conv;
    TRY_STATUS(assign(qkv, loader.matrix(p + "in_proj_qkv.weight", {Cc, C})));
    TRY_STATUS(assign(z, loader.matrix(p + "in_proj_z.weight", {Vd, C})));
    TRY_STATUS(assign(b, loader.matrix(p + "in_proj_b.weight", {HV, C})));
    TRY_STATUS(assign(a, loader.matrix(p + "in_proj_a.weight", {HV, C})));
    TRY_STATUS(assign(w.w_lin_out, loader.matrix(p + "out_proj.weight", {C, Vd})));
    TRY_STATUS(assign(conv, loader.act_matrix(p + "conv1d.weight", {Cc, 1, d.conv_kernel})));
    TRY_STATUS(assign(w.dt_bias, loader.vector(p + "dt_bias", HV)));
    TRY_STATUS(assign(w.A_log, loader.vector(p + "A_log", HV)));
    TRY_STATUS(assign(w.lin_norm, loader.vector(p + "norm.weight", d.v_head_dim)));
    w.w_lin_in = torch::cat({qkv, z, b, a}, 0);  // [Cc + Vd + 2·HV, C]
    for (const torch::Tensor & t : {qkv, z, b, a}) {
        loader.release(t);  // copied into w_lin_in
    }
    w.conv1d = conv.reshape({Cc, d.conv_kernel});  // [Cc, K]
    return {};
}

class Qwen35Family final : public Qwen3Family {
  public:
    const char * name() const override { return "qwen3_5"; }
    double norm_weight_offset() const override { return 1.0; }
    bool supports_cached_decode() const override { return false; }

    Result<LayerWeights> load_layer(const WeightLoader & loader, const model::ModelConfig & c,
                                    int64_t layer) const override {
        Result<LayerWeights> w = LayerWeights{};
        if (c.is_linear_attention_layer(layer)) {
            TRY_STATUS(load_linear_attention(loader, c, layer, *w));
            TRY_STATUS(load_norms(loader, c, layer, *w));
            TRY_STATUS(load_mlp(loader, c, layer, *w));
        } else {
            w = Qwen3Family::load_layer(loader, c, layer);
            TRY_STATUS(w);
        }
        // Qwen3_5RMSNorm multiplies by (1 + weight); the gated norm of the mixer (lin_norm) does not.
        for (torch::Tensor * norm : {&w->input_norm, &w->post_norm, &w->q_norm, &w->k_norm}) {
            if (norm->defined()) {
                *norm = *norm + norm_weight_offset();  // not in place: the tensor may alias the mapping
            }
        }
        return w;
    }

    torch::Tensor token_mixer(const LayerWeights & w, const model::ModelConfig & c, const torch::Tensor & h,
                              const MixerContext & ctx, int64_t layer) const override {
        return c.is_linear_attention_layer(layer) ? linear_attention(w, c, h, ctx, layer)
                                                  : gated_attention(w, c, h, ctx, layer);
    }

  private:
    // Qwen3_5GatedDeltaNet: h [T, C] -> [T, C]. The fused in_proj_qkv's output gets three LoRAs (LINEAR_Q/K/V,
    // one per row slice), in_proj_z LINEAR_Z, out_proj LINEAR_OUT; in_proj_b / in_proj_a none.
    static torch::Tensor linear_attention(const LayerWeights & w, const model::ModelConfig & c, const torch::Tensor & h,
                                          const MixerContext & ctx, int64_t layer) {
        const DeltaNetDims d = deltanet_dims(c);
        const int64_t Kd = d.key_dim(), Vd = d.value_dim(), HV = d.v_heads;
        torch::Tensor in = kernels::base_linear(h, w.w_lin_in);  // [T, 2Kd + 2Vd + 2HV]
        auto parts = in.split_with_sizes({Kd, Kd, Vd, Vd, HV, HV}, 1);
        auto adapted = add_lora_shared_input(
            {parts[0], parts[1], parts[2], parts[3]}, h, ctx.segments, layer,
            {LoraTarget::LINEAR_Q, LoraTarget::LINEAR_K, LoraTarget::LINEAR_V, LoraTarget::LINEAR_Z});
        const DeltaNetInputs inputs{torch::cat({adapted[0], adapted[1], adapted[2]}, 1), adapted[3], parts[4],
                                    parts[5]};
        const DeltaNetWeights weights{w.conv1d, w.dt_bias, w.A_log, w.lin_norm};
        torch::Tensor mixed = deltanet_mix(weights, d, inputs, ctx.layout);  // [T, Vd]
        return lora_linear(mixed, w.w_lin_out, {}, ctx.segments, layer, LoraTarget::LINEAR_OUT);
    }

    // Qwen3_5Attention: h [T, C] -> [T, C]. One LoRA on q_proj covers query and gate (its per-head layout).
    torch::Tensor gated_attention(const LayerWeights & w, const model::ModelConfig & c, const torch::Tensor & h,
                                  const MixerContext & ctx, int64_t layer) const {
        const int64_t T = h.size(0), H = c.n_heads, D = c.head_dim;
        auto [q_gate, k_rows, v_rows] = project_qkv(w, c, h, ctx.segments, layer);  // [T, 2HD], [T, KV·D] x2
        auto halves = q_gate.reshape({T, H, 2 * D}).split(D, -1);                   // [T, H, D] each
        torch::Tensor q = halves[0];
        torch::Tensor k = k_rows.reshape({T, c.n_kv_heads, D});
        torch::Tensor v = v_rows.reshape({T, c.n_kv_heads, D});
        prepare_qk(w, c, q, k);  // q_norm, k_norm
        q = apply_partial_rope(q, ctx.cos, ctx.sin);
        k = apply_partial_rope(k, ctx.cos, ctx.sin);
        torch::Tensor attn = packed_causal_attention(q, k, v, ctx.layout);  // [T, H*D]
        attn = attn * torch::sigmoid(halves[1].reshape({T, H * D}));
        return lora_linear(attn, w.wo, {}, ctx.segments, layer, LoraTarget::O);
    }
};

}  // namespace

std::unique_ptr<DecoderFamily> make_qwen3_5_family() {
    return std::make_unique<Qwen35Family>();
}

}  // namespace tinkerd::engine
