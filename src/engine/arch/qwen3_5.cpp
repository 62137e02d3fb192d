// Qwen3.5 (dense) family: Gated DeltaNet linear-attention layers (config.linear_attention_layers; the mixer
// of delta_rule.h) between gated full-attention layers (q_proj emits per head [query ‖ gate], the attention
// output is multiplied by sigmoid(gate); q/k norm; RoPE on the first rotary_dim dims), every RMSNorm scaled by
// (1 + weight). The cached forward (sampling) keeps K/V for the attention layers and each linear-attention
// layer's conv + delta-rule state per sequence (SequenceCache; deltanet_mix_cached).
#include "engine/arch/delta_rule.h"
#include "engine/arch/qwen3.h"
#include "engine/kernels/matmul.h"
#include "gguf/qwen35.h"

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

// parts with each run of consecutive stackable ones (same type) concatenated along the rows, in order: a
// GGUF's [qkv ‖ z] (Q4_K) and [b ‖ a] (F32) become two products instead of four.
std::vector<torch::Tensor> stacked_runs(const WeightLoader & loader, const std::vector<torch::Tensor> & parts) {
    std::vector<std::vector<torch::Tensor>> runs;
    for (const torch::Tensor & t : parts) {
        if (runs.empty() || !can_stack({runs.back().front(), t})) {
            runs.emplace_back();
        }
        runs.back().push_back(t);
    }
    std::vector<torch::Tensor> out;
    for (const std::vector<torch::Tensor> & run : runs) {
        if (run.size() == 1) {
            out.push_back(run.front());
            continue;
        }
        out.push_back(torch::cat(run, 0));  // [Σ rows, ...]
        for (const torch::Tensor & t : run) {
            loader.release(t);  // copied into the run's stack
        }
    }
    return out;
}

// The linear_attn.* tensors of one layer: the four input projections fused into w_lin_in (one GEMM) when they
// form one run of stackable parts.
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
    const std::string out = p + "out_proj.weight", tiled_out = out + gguf::kTiledColumnsSuffix;
    w.lin_out_v_tiled = loader.contains(tiled_out);  // a GGUF's Q4_K-like out_proj kept as it lies
    TRY_STATUS(assign(w.w_lin_out, loader.matrix(w.lin_out_v_tiled ? tiled_out : out, {C, Vd})));
    TRY_STATUS(assign(conv, loader.act_matrix(p + "conv1d.weight", {Cc, 1, d.conv_kernel})));
    TRY_STATUS(assign(w.dt_bias, loader.vector(p + "dt_bias", HV)));
    TRY_STATUS(assign(w.A_log, loader.vector(p + "A_log", HV)));
    TRY_STATUS(assign(w.lin_norm, loader.vector(p + "norm.weight", d.v_head_dim)));
    std::vector<torch::Tensor> runs = stacked_runs(loader, {qkv, z, b, a});
    if (runs.size() == 1) {
        w.w_lin_in = std::move(runs.front());  // [Cc + Vd + 2·HV, C]
    } else {  // e.g. a GGUF's kept Q4_K qkv / z beside F32 alpha / beta: one product per run
        w.lin_in_parts = std::move(runs);
    }
    w.conv1d = conv.reshape({Cc, d.conv_kernel});  // [Cc, K]
    return {};
}

class Qwen35Family final : public Qwen3Family {
  public:
    const char * name() const override { return "qwen3_5"; }
    bool runs_decode_layers() const override { return false; }
    double norm_weight_offset() const override { return 1.0; }

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
        if (c.is_linear_attention_layer(layer)) {
            const DeltaNetInputs in = deltanet_inputs(w, c, h, ctx.segments, layer);
            const torch::Tensor mixed = deltanet_mix(deltanet_weights(w), deltanet_dims(c), in, ctx.layout);
            return linear_out(w, c, mixed, ctx.segments, layer);
        }
        GatedQkv g = gated_qkv(w, c, h, ctx.segments, ctx.cos, ctx.sin, layer);
        const torch::Tensor attn = packed_causal_attention(g.q, g.k, g.v, ctx.layout);  // [T, H*D]
        return lora_linear(attn * torch::sigmoid(g.gate), w.wo, {}, ctx.segments, layer, LoraTarget::O);
    }

    // The same mixers over the sequences' caches: the linear-attention state continued (prefill or one
    // decode step), the attention's K/V appended.
    torch::Tensor cached_token_mixer(const LayerWeights & w, const model::ModelConfig & c, const torch::Tensor & h,
                                     const CachedMixerContext & ctx, int64_t layer) const override {
        if (c.is_linear_attention_layer(layer)) {
            const DeltaNetInputs in = deltanet_inputs(w, c, h, ctx.segments, layer);
            const torch::Tensor mixed =
                deltanet_mix_cached(deltanet_weights(w), deltanet_dims(c), in, ctx.lengths, ctx.caches, layer);
            return linear_out(w, c, mixed, ctx.segments, layer);
        }
        GatedQkv g = gated_qkv(w, c, h, ctx.segments, ctx.cos, ctx.sin, layer);
        const torch::Tensor attn = ctx.attention.run(layer, g.q, g.k, g.v);  // [T, H*D]
        return lora_linear(attn * torch::sigmoid(g.gate), w.wo, {}, ctx.segments, layer, LoraTarget::O);
    }

  private:
    // out_proj with its LoRA (LINEAR_OUT) on mixed [T, HV·Dv] (grouped V heads). A w_lin_out kept in the file's
    // tiled order multiplies mixed's columns moved to that order (grouped head k·r + j at tiled slot j·HK + k);
    // the LoRA, in Hugging Face's order, takes mixed as it is.
    static torch::Tensor linear_out(const LayerWeights & w, const model::ModelConfig & c, const torch::Tensor & mixed,
                                    const std::vector<RowSegment> & segments, int64_t layer) {
        if (!w.lin_out_v_tiled) {
            return lora_linear(mixed, w.w_lin_out, {}, segments, layer, LoraTarget::LINEAR_OUT);
        }
        const DeltaNetDims d = deltanet_dims(c);
        const int64_t T = mixed.size(0), r = d.v_heads / d.k_heads;
        const torch::Tensor tiled = mixed.reshape({T, d.k_heads, r, d.v_head_dim}).transpose(1, 2).reshape({T, -1});
        return add_lora(kernels::base_linear(tiled, w.w_lin_out), mixed, segments, layer, LoraTarget::LINEAR_OUT);
    }

    static DeltaNetWeights deltanet_weights(const LayerWeights & w) {
        return {w.conv1d, w.dt_bias, w.A_log, w.lin_norm};
    }

    // Qwen3_5GatedDeltaNet's projections of h [T, C]. The fused in_proj_qkv's output gets three LoRAs
    // (LINEAR_Q/K/V, one per row slice), in_proj_z LINEAR_Z; in_proj_b / in_proj_a none (out_proj, LINEAR_OUT,
    // is the caller's).
    static DeltaNetInputs deltanet_inputs(const LayerWeights & w, const model::ModelConfig & c, const torch::Tensor & h,
                                          const std::vector<RowSegment> & segments, int64_t layer) {
        const DeltaNetDims d = deltanet_dims(c);
        const int64_t Kd = d.key_dim(), Vd = d.value_dim(), HV = d.v_heads;
        torch::Tensor in = fused_linear(h, w.w_lin_in, w.lin_in_parts);  // [T, 2Kd + 2Vd + 2HV]
        auto parts = in.split_with_sizes({Kd, Kd, Vd, Vd, HV, HV}, 1);
        auto adapted = add_lora_shared_input(
            {parts[0], parts[1], parts[2], parts[3]}, h, segments, layer,
            {LoraTarget::LINEAR_Q, LoraTarget::LINEAR_K, LoraTarget::LINEAR_V, LoraTarget::LINEAR_Z});
        return {torch::cat({adapted[0], adapted[1], adapted[2]}, 1), adapted[3], parts[4], parts[5]};
    }

    // Qwen3_5Attention's inputs from h [T, C]: one LoRA on q_proj covers query and gate (its per-head layout
    // [query ‖ gate]); q/k norm, then RoPE on the first rotary dims at each row's position (cos, sin).
    struct GatedQkv {
        torch::Tensor q;     // [T, H, D]
        torch::Tensor k, v;  // [T, KV, D]
        torch::Tensor gate;  // [T, H*D], before the sigmoid
    };
    GatedQkv gated_qkv(const LayerWeights & w, const model::ModelConfig & c, const torch::Tensor & h,
                       const std::vector<RowSegment> & segments, const torch::Tensor & cos, const torch::Tensor & sin,
                       int64_t layer) const {
        const int64_t T = h.size(0), H = c.n_heads, D = c.head_dim;
        auto [q_gate, k_rows, v_rows] = project_qkv(w, c, h, segments, layer);  // [T, 2HD], [T, KV·D] x2
        auto halves = q_gate.reshape({T, H, 2 * D}).split(D, -1);               // [T, H, D] each
        torch::Tensor q = halves[0];
        torch::Tensor k = k_rows.reshape({T, c.n_kv_heads, D});
        prepare_qk(w, c, q, k);  // q_norm, k_norm
        return {apply_partial_rope(q, cos, sin), apply_partial_rope(k, cos, sin), v_rows.reshape({T, c.n_kv_heads, D}),
                halves[1].reshape({T, H * D})};
    }
};

}  // namespace

std::unique_ptr<DecoderFamily> make_qwen3_5_family() {
    return std::make_unique<Qwen35Family>();
}

}  // namespace tinkerd::engine
