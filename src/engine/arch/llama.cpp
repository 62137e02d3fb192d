// Llama family (Llama 2 and 3): the base decoder behaviour every other family builds on —
// HF tensor names, no q/k/v biases, SwiGLU MLP.
#include "engine/arch/family.h"
#include "engine/arch/moe_block.h"
#include "engine/fused_ops.h"
#include "engine/kernels/matmul.h"

namespace tinkerd::engine {

torch::Tensor rms_norm(const torch::Tensor & x, const torch::Tensor & weight, double eps) {
    return fused_rms_norm(x, weight, eps);
}

Result<void> DecoderFamily::load_attention(const WeightLoader & loader, const model::ModelConfig & c, int64_t layer,
                                           bool with_bias, LayerWeights & out) const {
    const std::string p = "model.layers." + std::to_string(layer) + ".";
    const int64_t q_dim = c.n_heads * c.head_dim;
    const int64_t q_rows = model::projection_shape(c, LoraTarget::Q).out;  // 2·q_dim with an output gate
    const int64_t kv_dim = c.n_kv_heads * c.head_dim;
    TRY_STATUS(assign(out.wq, loader.matrix(p + "self_attn.q_proj.weight", {q_rows, c.hidden_size})));
    TRY_STATUS(assign(out.wk, loader.matrix(p + "self_attn.k_proj.weight", {kv_dim, c.hidden_size})));
    TRY_STATUS(assign(out.wv, loader.matrix(p + "self_attn.v_proj.weight", {kv_dim, c.hidden_size})));
    TRY_STATUS(assign(out.wo, loader.matrix(p + "self_attn.o_proj.weight", {c.hidden_size, q_dim})));
    if (with_bias) {
        TRY_STATUS(assign(out.bq, loader.vector(p + "self_attn.q_proj.bias", q_rows)));
        TRY_STATUS(assign(out.bk, loader.vector(p + "self_attn.k_proj.bias", kv_dim)));
        TRY_STATUS(assign(out.bv, loader.vector(p + "self_attn.v_proj.bias", kv_dim)));
    }
    return {};
}

Result<LayerWeights> DecoderFamily::load_layer(const WeightLoader & loader, const model::ModelConfig & c,
                                               int64_t layer) const {
    LayerWeights w;
    TRY_STATUS(load_attention(loader, c, layer, c.attention_bias, w));
    TRY_STATUS(load_norms(loader, c, layer, w));
    TRY_STATUS(load_mlp(loader, c, layer, w));
    return w;
}

Result<void> DecoderFamily::load_norms(const WeightLoader & loader, const model::ModelConfig & c, int64_t layer,
                                       LayerWeights & w) const {
    const std::string p = "model.layers." + std::to_string(layer) + ".";
    auto input_norm = loader.vector(p + "input_layernorm.weight", c.hidden_size);
    TRY_STATUS(input_norm);
    auto post_norm = loader.vector(p + "post_attention_layernorm.weight", c.hidden_size);
    TRY_STATUS(post_norm);
    w.input_norm = std::move(input_norm).value();
    w.post_norm = std::move(post_norm).value();
    return {};
}

Result<void> load_swiglu_weights(const WeightLoader & loader, const std::string & prefix, int64_t hidden,
                                 int64_t intermediate, LayerWeights & w) {
    struct Item {
        torch::Tensor * dst;
        Result<torch::Tensor> src;
    };
    Item items[] = {
        {&w.w_gate, loader.matrix(prefix + "gate_proj.weight", {intermediate, hidden})},
        {&w.w_up, loader.matrix(prefix + "up_proj.weight", {intermediate, hidden})},
        {&w.w_down, loader.matrix(prefix + "down_proj.weight", {hidden, intermediate})},
    };
    for (Item & item : items) {
        if (!item.src.ok()) {
            return item.src.error();
        }
        *item.dst = std::move(item.src).value();
    }
    return {};
}

Result<void> DecoderFamily::load_mlp(const WeightLoader & loader, const model::ModelConfig & c, int64_t layer,
                                     LayerWeights & w) const {
    if (c.is_sparse_layer(layer)) {
        return load_moe_weights(loader, c, layer, w);
    }
    return load_swiglu_weights(loader, "model.layers." + std::to_string(layer) + ".mlp.", c.hidden_size,
                               c.intermediate_size, w);
}

torch::Tensor swiglu_mlp(const torch::Tensor & x, const LayerWeights & w, const std::vector<RowSegment> & segments,
                         int64_t layer, const std::array<LoraTarget, 3> & targets) {
    torch::Tensor gate_up = fused_linear(x, w.w_gate_up, {w.w_gate, w.w_up});  // [T, 2F]
    const int64_t F = gate_up.size(1) / 2;
    auto parts = gate_up.split(F, 1);  // split: one cat in the backward, no zero-filled slices
    auto adapted = add_lora_shared_input({parts[0], parts[1]}, x, segments, layer, {targets[0], targets[1]});
    return lora_linear(fused_swiglu(adapted[0], adapted[1]), w.w_down, {}, segments, layer, targets[2]);  // [T, C]
}

torch::Tensor DecoderFamily::mlp(const LayerWeights & w, const model::ModelConfig & c, const torch::Tensor & x,
                                 const std::vector<RowSegment> & segments, int64_t layer) const {
    if (c.is_sparse_layer(layer)) {
        return moe_forward(w, c, x, segments, layer);
    }
    return swiglu_mlp(x, w, segments, layer, {LoraTarget::GATE, LoraTarget::UP, LoraTarget::DOWN});
}

std::array<torch::Tensor, 3> project_qkv(const LayerWeights & w, const model::ModelConfig & c, const torch::Tensor & h,
                                         const std::vector<RowSegment> & seg, int64_t layer) {
    const int64_t q_rows = model::projection_shape(c, LoraTarget::Q).out, kv_dim = c.n_kv_heads * c.head_dim;
    torch::Tensor qkv = fused_linear(h, w.w_qkv, {w.wq, w.wk, w.wv});  // [T, q_rows + 2 kv_dim]
    if (w.b_qkv.defined()) {
        qkv = qkv + w.b_qkv;
    }
    // split (not narrow): its backward is one cat instead of a zero-filled [T, q_rows + 2 kv_dim] per part.
    auto parts = qkv.split_with_sizes({q_rows, kv_dim, kv_dim}, 1);
    auto adapted = add_lora_shared_input({parts[0], parts[1], parts[2]}, h, seg, layer,
                                         {LoraTarget::Q, LoraTarget::K, LoraTarget::V});
    return {adapted[0], adapted[1], adapted[2]};
}

std::array<torch::Tensor, 3> DecoderFamily::attention_inputs(const LayerWeights & w, const model::ModelConfig & c,
                                                             const torch::Tensor & h,
                                                             const std::vector<RowSegment> & seg,
                                                             const torch::Tensor & cos, const torch::Tensor & sin,
                                                             int64_t layer) const {
    const int64_t T = h.size(0);
    auto [q_rows, k_rows, v_rows] = project_qkv(w, c, h, seg, layer);
    torch::Tensor q = q_rows.reshape({T, c.n_heads, c.head_dim});
    torch::Tensor k = k_rows.reshape({T, c.n_kv_heads, c.head_dim});
    torch::Tensor v = v_rows.reshape({T, c.n_kv_heads, c.head_dim});
    prepare_qk(w, c, q, k);
    return {apply_rope(q, cos, sin), apply_rope(k, cos, sin), v};
}

torch::Tensor DecoderFamily::token_mixer(const LayerWeights & w, const model::ModelConfig & c, const torch::Tensor & h,
                                         const MixerContext & ctx, int64_t layer) const {
    auto [q, k, v] = attention_inputs(w, c, h, ctx.segments, ctx.cos, ctx.sin, layer);
    torch::Tensor attn = packed_causal_attention(q, k, v, ctx.layout);  // [T, H*D]
    return lora_linear(attn, w.wo, {}, ctx.segments, layer, LoraTarget::O);
}

torch::Tensor DecoderFamily::cached_token_mixer(const LayerWeights & w, const model::ModelConfig & c,
                                                const torch::Tensor & h, const CachedMixerContext & ctx,
                                                int64_t layer) const {
    auto [q, k, v] = attention_inputs(w, c, h, ctx.segments, ctx.cos, ctx.sin, layer);
    torch::Tensor attn = ctx.attention.run(layer, q, k, v);  // [T, H*D]
    return lora_linear(attn, w.wo, {}, ctx.segments, layer, LoraTarget::O);
}

namespace {
class LlamaFamily final : public DecoderFamily {
  public:
    const char * name() const override { return "llama"; }
    bool runs_decode_layers() const override { return true; }
};
}  // namespace

std::unique_ptr<DecoderFamily> make_llama_family() {
    return std::make_unique<LlamaFamily>();
}

}  // namespace tinkerd::engine
