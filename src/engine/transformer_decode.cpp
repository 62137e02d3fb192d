// Transformer::run_fused_decode: whether a cached forward is a decode step run_decode_layers (decode_layers.h)
// computes — one new token per sequence, no images, a dense family that opts in, bf16 weights and fp32 activations
// on the CPU, the few-row product kernels for every projection, adapters whose factors the torch path would apply
// row-wise (lora_rows.h) — and its raw pointers.
#include <algorithm>

#include "engine/arch/family.h"
#include "engine/decode_layers.h"
#include "engine/host_access.h"
#include "engine/lora_rows.h"
#include "engine/transformer.h"

namespace tinkerd::engine {

namespace {

bool cpu_contiguous(const torch::Tensor & t, torch::ScalarType dtype) {
    return t.defined() && t.device().is_cpu() && t.scalar_type() == dtype && t.is_contiguous();
}

// A 2-D bf16 weight of [rows, cols].
bool bf16_matrix(const torch::Tensor & t, int64_t rows, int64_t cols) {
    return cpu_contiguous(t, torch::kBFloat16) && t.dim() == 2 && t.size(0) == rows && t.size(1) == cols;
}

bool f32_vector(const torch::Tensor & t, int64_t n) {
    return cpu_contiguous(t, torch::kFloat) && t.numel() == n;
}

const float * f32_or_null(const torch::Tensor & t) {
    return t.defined() ? host_data<const float>(t, "decode_layers") : nullptr;
}

const uint16_t * bf16_bits(const torch::Tensor & t) {
    return reinterpret_cast<const uint16_t *>(host_data<const c10::BFloat16>(t, "decode_layers"));
}

// Layer w as run_decode_layers reads it; false when one of its tensors is not what it takes.
bool decode_layer(const LayerWeights & w, const DecodeShape & s, DecodeLayerWeights & out) {
    const int64_t HD = s.H * s.D, QKV = HD + 2 * s.KV * s.D;
    const bool qk_norm = w.q_norm.defined() || w.k_norm.defined();
    if (!f32_vector(w.input_norm, s.C) || !f32_vector(w.post_norm, s.C) || !bf16_matrix(w.w_qkv, QKV, s.C) ||
        !bf16_matrix(w.wo, s.C, HD) || !bf16_matrix(w.w_gate_up, 2 * s.F, s.C) || !bf16_matrix(w.w_down, s.C, s.F) ||
        (w.b_qkv.defined() && !f32_vector(w.b_qkv, QKV)) ||
        (qk_norm && !(f32_vector(w.q_norm, s.D) && f32_vector(w.k_norm, s.D)))) {
        return false;
    }
    out = {f32_or_null(w.input_norm), f32_or_null(w.post_norm),
           bf16_bits(w.w_qkv),        f32_or_null(w.b_qkv),
           f32_or_null(w.q_norm),     f32_or_null(w.k_norm),
           bf16_bits(w.wo),           bf16_bits(w.w_gate_up),
           bf16_bits(w.w_down),       {}};
    return true;
}

// Sequence cache c as run_decode_layers reads it (its slabs fp32 [KV, capacity, D], room for the new token).
bool decode_sequence(const SequenceCache & c, const DecodeShape & s, int64_t n_layers, DecodeSequence & out) {
    out.capacity = c.capacity();
    out.length = c.length();
    if (out.length + 1 > out.capacity) {
        return false;
    }
    for (int64_t layer = 0; layer < n_layers; ++layer) {
        const torch::Tensor &k = c.key_slab(layer), &v = c.value_slab(layer);
        for (const torch::Tensor * t : {&k, &v}) {
            if (!cpu_contiguous(*t, torch::kFloat) || t->dim() != 3 || t->size(0) != s.KV || t->size(2) != s.D ||
                t->size(1) != out.capacity) {
                return false;
            }
        }
        out.keys.push_back(host_data<float>(k, "decode_layers"));
        out.values.push_back(host_data<float>(v, "decode_layers"));
    }
    return true;
}

// One new token per sequence, no image; with adapter rows, no segment longer than the torch path's row-wise
// LoRA takes (add_lora_shared_input: longer segments take matmuls, other bits).
bool plain_decode_batch(const CachedBatch & batch) {
    const auto one = [](int64_t n) { return n == 1; };
    const auto no_images = [](const std::vector<ImageInput> * images) { return !images || images->empty(); };
    const auto adapter = [](const RowSegment & s) { return s.adapter != nullptr; };
    const auto long_segment = [](const RowSegment & s) { return s.end - s.begin > LORA_ROWS_MAX_SEGMENT; };
    const bool adapters = std::any_of(batch.segments.begin(), batch.segments.end(), adapter);
    return !batch.caches.empty() && std::all_of(batch.lengths.begin(), batch.lengths.end(), one) &&
           !(adapters && std::any_of(batch.segments.begin(), batch.segments.end(), long_segment)) &&
           std::all_of(batch.images.begin(), batch.images.end(), no_images);
}

// Row b's factors for (layer, target) as run_decode_layers reads them; false when they are not fp32 contiguous
// [rank, in] and [out, rank] (the torch path's add_lora_rows refuses those too).
bool decode_lora(const Adapter * adapter, int64_t layer, LoraTarget target, const model::ModelConfig & c,
                 DecodeLora & out) {
    const torch::Tensor * a = adapter ? adapter->lora_a(layer, target) : nullptr;  // [R, in]
    if (a == nullptr) {
        return true;  // no delta
    }
    const torch::Tensor & b = *adapter->lora_b(layer, target);  // [out, R]
    const model::ProjectionShape shape = model::projection_shape(c, target);
    if (!cpu_contiguous(*a, torch::kFloat) || !cpu_contiguous(b, torch::kFloat) || a->dim() != 2 || b.dim() != 2 ||
        a->size(1) != shape.in || b.size(0) != shape.out || b.size(1) != a->size(0)) {
        return false;
    }
    out = {host_data<const float>(*a, "decode_layers"), host_data<const float>(b, "decode_layers"), a->size(0),
           static_cast<float>(adapter->scale)};
    return true;
}

// Every layer's LoRA table ([7 targets x B rows], decode_layers.h) when some row has an adapter; false when a
// factor is not what run_decode_layers takes. Each segment's factors are checked once and filled into its rows.
bool decode_loras(const CachedBatch & batch, const model::ModelConfig & c, std::vector<DecodeLayerWeights> & layers) {
    const int64_t B = static_cast<int64_t>(batch.caches.size());
    const auto bad = [B](const RowSegment & s) { return s.begin < 0 || s.end < s.begin || s.end > B; };
    const auto adapted = [](const RowSegment & s) { return s.adapter != nullptr && s.end > s.begin; };
    if (std::any_of(batch.segments.begin(), batch.segments.end(), bad)) {
        return false;
    }
    if (std::none_of(batch.segments.begin(), batch.segments.end(), adapted)) {
        return true;
    }
    if (torch::GradMode::is_enabled()) {
        return false;  // the torch path applies adapters with autograd (matmuls) then
    }
    for (int64_t layer = 0; layer < c.n_layers; ++layer) {
        std::vector<DecodeLora> & table = layers[layer].lora;
        table.assign(static_cast<size_t>(DECODE_LORA_TARGETS * B), DecodeLora{});
        for (int t = 0; t < DECODE_LORA_TARGETS; ++t) {
            for (const RowSegment & s : batch.segments) {
                DecodeLora f;
                if (!decode_lora(s.adapter, layer, static_cast<LoraTarget>(t), c, f)) {
                    return false;
                }
                std::fill(table.begin() + t * B + s.begin, table.begin() + t * B + s.end, f);
            }
        }
    }
    return true;
}

}  // namespace

bool Transformer::run_fused_decode(const CachedBatch & batch, const torch::Tensor & cos, const torch::Tensor & sin,
                                   torch::Tensor & x) const {
    const model::ModelConfig & c = config_;
    const DecodeShape shape{c.hidden_size, c.n_heads, c.n_kv_heads, c.head_dim, c.intermediate_size, c.rms_norm_eps};
    const int64_t B = static_cast<int64_t>(batch.caches.size());
    if (!decode_layers_enabled() || !device_.is_cpu() || act_ != torch::kFloat || !family_->runs_decode_layers() ||
        !plain_decode_batch(batch) || rotary_dim(c) != c.head_dim || !decode_layers_shape_ok(shape) ||
        !cpu_contiguous(x, torch::kFloat) || x.sizes() != torch::IntArrayRef{B, c.hidden_size} ||
        !cpu_contiguous(cos, torch::kFloat) || !cpu_contiguous(sin, torch::kFloat) || cos.numel() != B * c.head_dim ||
        sin.numel() != B * c.head_dim) {
        return false;
    }
    std::vector<DecodeLayerWeights> layers(static_cast<size_t>(c.n_layers));
    for (int64_t layer = 0; layer < c.n_layers; ++layer) {
        if (c.is_sparse_layer(layer) || cache_shape_->is_recurrent(layer) ||
            !decode_layer(weights_.layers[layer], shape, layers[layer])) {
            return false;
        }
    }
    const LayerWeights & w0 = weights_.layers[0];  // every layer's matrices have its shapes and dtype (checked above)
    const DecodeProducts products{kernels::row_range_product(B, w0.w_qkv), kernels::row_range_product(B, w0.wo),
                                  kernels::row_range_product(B, w0.w_gate_up),
                                  kernels::row_range_product(B, w0.w_down)};
    for (const kernels::RowRangeProduct * p : {&products.qkv, &products.o, &products.gate_up, &products.down}) {
        if (p->kind == kernels::RowRangeProduct::Kind::none) {
            return false;
        }
    }
    if (!decode_loras(batch, c, layers)) {
        return false;
    }
    std::vector<DecodeSequence> seqs(static_cast<size_t>(B));
    for (int64_t b = 0; b < B; ++b) {
        if (!decode_sequence(*batch.caches[b], shape, c.n_layers, seqs[b])) {
            return false;
        }
    }
    run_decode_layers(shape, layers, products, seqs, host_data<const float>(cos, "decode_layers"),
                      host_data<const float>(sin, "decode_layers"), host_data<float>(x, "decode_layers"));
    return true;
}

}  // namespace tinkerd::engine
