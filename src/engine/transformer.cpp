// Transformer: loading the base weights through the family code, and the packed forward pass.
#include "engine/transformer.h"

#include <algorithm>
#include <set>

#include "common/log.h"
#include "engine/kernels/gpu_matmul.h"
#include "engine/kernels/matmul.h"
#include "engine/kernels/quant_matmul.h"
#include "engine/layer_checkpoint.h"

namespace tinkerd::engine {
namespace {

CacheShape cache_shape_of(const model::ModelConfig & c, torch::ScalarType act, torch::Device device) {
    CacheShape shape;
    shape.n_layers = c.n_layers;
    shape.n_kv_heads = c.n_kv_heads;
    shape.head_dim = c.head_dim;
    for (int64_t layer = 0; layer < c.n_layers; ++layer) {
        shape.recurrent.push_back(c.is_linear_attention_layer(layer));
    }
    shape.conv_dim = 2 * c.linear_k_heads * c.linear_k_head_dim + c.linear_v_heads * c.linear_v_head_dim;
    shape.conv_width = std::max<int64_t>(c.linear_conv_kernel - 1, 0);
    shape.v_heads = c.linear_v_heads;
    shape.k_head_dim = c.linear_k_head_dim;
    shape.v_head_dim = c.linear_v_head_dim;
    shape.dtype = act;
    shape.device = device;
    return shape;
}

}  // namespace

Transformer::Transformer(model::ModelConfig config, std::unique_ptr<DecoderFamily> family, torch::ScalarType compute,
                         torch::ScalarType act, torch::Device device)
    : config_(std::move(config)),
      family_(std::move(family)),
      compute_(compute),
      act_(act),
      device_(device),
      rope_(config_, act, device),
      cache_shape_(std::make_shared<const CacheShape>(cache_shape_of(config_, act, device))) {}

Result<std::unique_ptr<Transformer>> Transformer::load(const std::string & model_dir,
                                                       std::optional<torch::ScalarType> requested, torch::Device device,
                                                       LoadQuant quantise) {
    auto config = model::load_model_config(model_dir);
    if (!config.ok()) {
        return config.error();
    }
    auto family = make_family(config->family);
    if (!family) {
        return unsupported("config.json: architecture '" + config->architecture + "' is not supported");
    }
    auto file = model::SafetensorsFile::open_model_dir(model_dir);
    if (!file.ok()) {
        return file.error();
    }
    WeightLoader names(*file, torch::kFloat32, torch::kFloat32, device);
    names.choose_model_prefix();
    const std::string embed_name = names.resolve("model.embed_tokens.weight");
    auto embed = (*file)->get(embed_name);
    if (!requested && !embed.ok()) {
        return not_found("missing tensor '" + embed_name + "' in the checkpoint");
    }
    // AUTO: a BF16 checkpoint runs in bf16, anything else in exact fp32.
    const torch::ScalarType compute =
        requested ? *requested : (embed->dtype == model::DType::BF16 ? torch::kBFloat16 : torch::kFloat32);
    const torch::ScalarType act = compute == torch::kFloat64 ? torch::kFloat64 : torch::kFloat32;
    std::unique_ptr<Transformer> t(new Transformer(*config, std::move(family), compute, act, device));
    if (quantise != LoadQuant::NONE && !device.is_cpu()) {
        return unsupported("--base-quant q8_0 / q4_k run on the CPU only, not on " + device.str());
    }
    TRY_STATUS(t->load_weights(*file, quantise));
    return t;
}

Result<void> Transformer::load_weights(const std::shared_ptr<model::SafetensorsFile> & file, LoadQuant quantise) {
    file_ = file;
    WeightLoader loader(file, compute_, act_, device_);
    loader.choose_model_prefix();
    loader.quantise_at_load(quantise);
    const auto & c = config_;
    auto embed = loader.matrix("model.embed_tokens.weight", {c.vocab_size, c.hidden_size});
    if (!embed.ok()) {
        return embed.error();
    }
    weights_.embed = std::move(embed).value();
    for (int64_t layer = 0; layer < c.n_layers; ++layer) {
        auto lw = family_->load_layer(loader, c, layer);
        if (!lw.ok()) {
            return lw.error();
        }
        fuse_projections(*lw, *file);
        weights_.layers.push_back(std::move(lw).value());
        // A long load shows progress at each quarter (a 30B model's layers take minutes); small ones stay quiet.
        const int64_t quarter = std::max<int64_t>(1, c.n_layers / 4);
        if (c.n_layers >= 16 && ((layer + 1) % quarter == 0 || layer + 1 == c.n_layers)) {
            LOG_INF("engine", "loaded layer %lld/%lld", static_cast<long long>(layer + 1),
                    static_cast<long long>(c.n_layers));
        }
    }
    auto norm = loader.vector("model.norm.weight", c.hidden_size);
    if (!norm.ok()) {
        return norm.error();
    }
    weights_.final_norm = std::move(norm).value();
    if (c.has_vision() && !file->contains("model.visual.patch_embed.proj.weight") &&
        !file->contains("model.language_model.visual.patch_embed.proj.weight")) {
        // A text-only export of an image-text model (vision_config kept, no tower): it serves text; images get a 400.
        LOG_WRN("engine", "config.json has a vision_config but the checkpoint has no vision tower: text only");
        config_.vision = model::VisionConfig{};
    }
    if (config_.has_vision()) {
        auto vision = VisionTower::load(loader, c, act_, device_);
        if (!vision.ok()) {
            return vision.error();
        }
        vision_ = std::move(vision).value();
    }
    if (family_->norm_weight_offset() != 0.0) {
        weights_.final_norm = weights_.final_norm + family_->norm_weight_offset();  // not in place: may be mapped
    }
    if (c.tie_word_embeddings && !loader.contains("lm_head.weight")) {
        weights_.lm_head = weights_.embed;
    } else {
        auto head = loader.matrix("lm_head.weight", {c.vocab_size, c.hidden_size});
        if (!head.ok()) {
            return head.error();
        }
        weights_.lm_head = std::move(head).value();
    }
    // GPUs take the stored lm_head through kernels::split_bf16_product; only for an A/B against the reference
    // paths (TINKERD_GPU_PATHS=reference at load) an fp32 copy, multiplied in fp32.
    if (!device_.is_cpu() && weights_.lm_head.scalar_type() != act_ && !kernels::gpu_fast_paths()) {
        lm_head_exact_ = weights_.lm_head.to(act_);
    }
    return {};
}

std::string Transformer::quantised_types() const {
    std::set<std::string> names;
    const auto note = [&](const torch::Tensor & t) {
        if (kernels::is_quantised(t)) {
            names.insert(gguf::ggml_type_name(static_cast<uint32_t>(kernels::quantised_type(t))));
        }
    };
    note(weights_.embed);
    note(weights_.lm_head);
    for (const LayerWeights & w : weights_.layers) {
        for (const torch::Tensor * t : {&w.w_qkv, &w.wq, &w.wk, &w.wv, &w.wo, &w.w_gate_up, &w.w_gate, &w.w_up,
                                        &w.w_down, &w.experts_gate, &w.experts_up, &w.experts_down}) {
            note(*t);
        }
    }
    std::string out;
    for (const std::string & name : names) {
        out += (out.empty() ? "" : "/") + name;
    }
    return out;
}

torch::Tensor Transformer::embed_tokens(const torch::Tensor & tokens) const {
    if (kernels::is_quantised(weights_.embed)) {
        return kernels::quantised_rows(weights_.embed, tokens).to(act_);  // [T, C]
    }
    return weights_.embed.index_select(0, tokens).to(act_);  // [T, C]
}

torch::Tensor Transformer::layer_output(int64_t layer, const torch::Tensor & x, const torch::Tensor & mixed,
                                        const std::vector<RowSegment> & seg) const {
    const LayerWeights & w = weights_.layers[layer];
    torch::Tensor x2 = x + mixed;
    return x2 + family_->mlp(w, config_, rms_norm(x2, w.post_norm, config_.rms_norm_eps), seg, layer);
}

torch::Tensor Transformer::layer_forward(int64_t layer, const torch::Tensor & x, const PackedBatch & batch,
                                         const torch::Tensor & cos, const torch::Tensor & sin) const {
    const LayerWeights & w = weights_.layers[layer];
    torch::Tensor h = rms_norm(x, w.input_norm, config_.rms_norm_eps);  // [T, C]
    const MixerContext ctx{batch.segments, batch.layout, cos, sin};
    return layer_output(layer, x, family_->token_mixer(w, config_, h, ctx, layer), batch.segments);
}

namespace {

// The trainable tensors the segments' adapters use in one layer (each targeted projection's A and B).
std::vector<torch::Tensor> layer_params(const std::vector<RowSegment> & segments, int64_t layer) {
    std::vector<torch::Tensor> params;
    std::vector<const Adapter *> seen;
    for (const RowSegment & s : segments) {
        if (s.adapter == nullptr || std::find(seen.begin(), seen.end(), s.adapter) != seen.end()) {
            continue;
        }
        seen.push_back(s.adapter);
        for (int index : s.adapter->layer_index[layer]) {
            if (index >= 0) {
                params.push_back(s.adapter->params[index]);
                params.push_back(s.adapter->params[index + 1]);
            }
        }
    }
    return params;
}

}  // namespace

int64_t Transformer::activation_bytes_per_token() const {
    const model::ModelConfig & c = config_;
    const int64_t mlp = c.n_experts > 0 ? c.n_experts_per_token * (c.hidden_size + 4 * c.moe_intermediate_size)
                                        : 4 * c.intermediate_size;
    return 4 * c.n_layers * (12 * c.hidden_size + 3 * c.n_heads * c.head_dim + mlp);  // fp32, a rough upper bound
}

torch::Tensor Transformer::hidden_states(const PackedBatch & batch) {
    VisionFeatures features;
    torch::Tensor x = input_embeddings(batch.tokens, batch.images, features);  // [T, C]
    const auto & lengths = batch.layout.lengths;  // positions restart at 0 in each sequence (mrope: never past it)
    const int64_t max_position = lengths.empty() ? 0 : *std::max_element(lengths.begin(), lengths.end()) - 1;
    auto [cos, sin] = batch.mrope_positions.defined() ? rope_.lookup_mrope(batch.mrope_positions, max_position)
                                                      : rope_.lookup(batch.positions, max_position);  // [T, 1, D]
    const bool training = torch::GradMode::is_enabled() && !layer_params(batch.segments, 0).empty();
    const bool checkpoint = training && should_checkpoint(batch.tokens.size(0), activation_bytes_per_token());
    for (int64_t layer = 0; layer < config_.n_layers; ++layer) {
        if (!checkpoint) {
            x = add_deepstack(layer_forward(layer, x, batch, cos, sin), features, batch.images, layer);
            continue;
        }
        auto run = [this, layer, batch, cos, sin](const torch::Tensor & in) {
            return layer_forward(layer, in, batch, cos, sin);  // [T, C]
        };
        x = add_deepstack(checkpointed(run, x, layer_params(batch.segments, layer)), features, batch.images, layer);
    }
    return rms_norm(x, weights_.final_norm, config_.rms_norm_eps);
}

torch::Tensor Transformer::hidden_states_cached(const CachedBatch & batch) {
    torch::NoGradGuard no_grad;  // sampling never needs a graph
    for (size_t s = 0; s < batch.caches.size(); ++s) {
        batch.caches[s]->reserve(batch.caches[s]->length() + batch.lengths[s]);
    }
    const CachedAttention attention(batch.lengths, batch.caches, device_);
    BatchImages images;
    auto [cos, sin] = cached_rope(batch, images);  // [T, 1, D]
    VisionFeatures features;
    torch::Tensor x = input_embeddings(batch.tokens, images, features);  // [T, C]
    const CachedMixerContext ctx{batch.segments, batch.lengths, batch.caches, attention, cos, sin};
    const bool fused = run_fused_decode(batch, cos, sin, x);  // every layer in one parallel region, or none
    for (int64_t layer = fused ? config_.n_layers : 0; layer < config_.n_layers; ++layer) {
        const LayerWeights & w = weights_.layers[layer];
        torch::Tensor h = rms_norm(x, w.input_norm, config_.rms_norm_eps);  // [T, C]
        x = layer_output(layer, x, family_->cached_token_mixer(w, config_, h, ctx, layer), batch.segments);
        x = add_deepstack(x, features, images, layer);
    }
    for (size_t s = 0; s < batch.caches.size(); ++s) {
        batch.caches[s]->advance(batch.lengths[s]);
    }
    return rms_norm(x, weights_.final_norm, config_.rms_norm_eps);
}

torch::Tensor Transformer::logits(const torch::Tensor & h, const std::vector<RowSegment> & segments) const {
    // fp32 sums on the stored lm_head (bf16 included); under --matmul bf16 the input h is rounded to bf16 like
    // every other product's (kernels/matmul.h), so the logits are exact only for that rounded input.
    torch::Tensor y = kernels::exact_linear(h, lm_head_weight());  // [n, V]
    return add_lora(y, h, segments, -1, LoraTarget::LM_HEAD);
}

}  // namespace tinkerd::engine
