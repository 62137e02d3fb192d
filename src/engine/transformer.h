// Transformer: the frozen base model of one checkpoint and its forward pass over a packed batch,
// with per-row LoRA adapters. Autograd provides the backward (only LoRA parameters require grad).
#pragma once

#include <array>
#include <memory>
#include <optional>
#include <string>
#include <vector>

#include <torch/torch.h>

#include "engine/arch/family.h"
#include "engine/attention.h"
#include "engine/kv_cache.h"
#include "engine/lora.h"
#include "engine/vision_tower.h"
#include "engine/weights.h"

namespace tinkerd::engine {

// The images of a batch: their features replace the embeddings of their image tokens (docs/vision.md).
struct BatchImages {
    std::vector<const ImageInput *> images;  // in row order, each checked (image_layout.h)
    torch::Tensor rows;                      // [Nv] int64: the rows of their tokens, in the same order
    bool empty() const { return images.empty(); }
};

// Token rows of one engine call: sequences back to back, adapters in contiguous segments.
struct PackedBatch {
    torch::Tensor tokens;           // [T] int64
    torch::Tensor positions;        // [T] int64, restarting at 0 for each sequence
    torch::Tensor mrope_positions;  // [3, T] int64 when the batch holds images (image_layout.h), else undefined
    SequenceLayout layout;
    std::vector<RowSegment> segments;
    BatchImages images;
};

// New tokens of several sequences for an incremental (KV-cached) forward: sequence s owns rows
// [sum(lengths[..s]), + lengths[s]) and its positions continue from caches[s]->length().
struct CachedBatch {
    torch::Tensor tokens;                 // [T] int64
    std::vector<int64_t> lengths;         // new tokens per sequence (prefill: the prompt; decode: 1)
    std::vector<SequenceCache *> caches;  // one per sequence; the new K/V are appended
    std::vector<RowSegment> segments;     // adapters of the rows, contiguous
    // Per sequence: its images when its new rows are a whole context from position 0 (a prefill), else nullptr.
    // A sequence with images gets mrope positions, and its cache the offset its later positions continue from.
    std::vector<const std::vector<ImageInput> *> images;
};

class Transformer {
  public:
    // requested: dtype of the big matrices (bf16, fp32 or fp64); nullopt = the checkpoint's own (BF16 ->
    // bf16, else fp32). Activations are fp32 (fp64 when the matrices are fp64). quantise: the matrices
    // become GGUF blocks at load (CPU only; LoadQuant in engine.h).
    static Result<std::unique_ptr<Transformer>> load(const std::string & model_dir,
                                                     std::optional<torch::ScalarType> requested, torch::Device device,
                                                     LoadQuant quantise = LoadQuant::NONE);

    const model::ModelConfig & config() const { return config_; }
    const DecoderFamily & family() const { return *family_; }
    torch::ScalarType compute_dtype() const { return compute_; }
    torch::ScalarType act_dtype() const { return act_; }
    torch::Device device() const { return device_; }

    // The GGUF block types of the weights kept quantised ("Q4_K/Q6_K"), "" when none.
    std::string quantised_types() const;
    // Final-norm hidden states [T, C] in the act dtype.
    torch::Tensor hidden_states(const PackedBatch & batch);
    // Incremental forward without autograd: runs the new rows against each sequence's cache (the attention
    // layers' K/V, the linear-attention layers' state: prefill from empty caches, or one row per sequence),
    // appends / updates it, and returns their final-norm hidden states [T, C] in the act dtype.
    torch::Tensor hidden_states_cached(const CachedBatch & batch);
    // An empty cache shaped for this model, and that shape (what a sequence's cache holds per layer).
    SequenceCache make_cache() const { return SequenceCache(cache_shape_); }
    const CacheShape & cache_shape() const { return *cache_shape_; }
    // Logits [n, V] in the act dtype for hidden rows h [n, C]; segments index rows of h.
    torch::Tensor logits(const torch::Tensor & h, const std::vector<RowSegment> & segments) const;
    // Target logprobs [T, Kmax] = log_softmax(logits)[t, index[t, k]] of hidden rows h [T, C] (segments
    // index rows of h; index [T, Kmax] int64), chunked so [T, V] logits never exist (transformer_head.cpp).
    torch::Tensor target_logprobs(const torch::Tensor & h, const std::vector<RowSegment> & segments,
                                  const torch::Tensor & index) const;

  private:
    Transformer(model::ModelConfig config, std::unique_ptr<DecoderFamily> family, torch::ScalarType compute,
                torch::ScalarType act, torch::Device device);
    Result<void> load_weights(const std::shared_ptr<model::SafetensorsFile> & file,
                              LoadQuant quantise = LoadQuant::NONE);
    torch::Tensor layer_forward(int64_t layer, const torch::Tensor & x, const PackedBatch & batch,
                                const torch::Tensor & cos, const torch::Tensor & sin) const;
    // A rough upper bound of the activation bytes a training forward keeps per token (every layer), to decide
    // activation checkpointing (layer_checkpoint.h).
    int64_t activation_bytes_per_token() const;
    // The embedding rows of tokens [T] in the activation dtype: [T, C] (dequantised when the table is quantised).
    torch::Tensor embed_tokens(const torch::Tensor & tokens) const;
    // The residual stream after adding the token mixer's output mixed [T, C], then the MLP.
    torch::Tensor layer_output(int64_t layer, const torch::Tensor & x, const torch::Tensor & mixed,
                               const std::vector<RowSegment> & segments) const;
    // The input rows [T, C]: token embeddings, with the images' features in their tokens' rows; features gets
    // the deepstack features the first layers add (empty without images).
    torch::Tensor input_embeddings(const torch::Tensor & tokens, const BatchImages & images,
                                   VisionFeatures & features) const;
    // x after layer's deepstack addition: x + the layer's features at the image rows (x itself past them).
    static torch::Tensor add_deepstack(const torch::Tensor & x, const VisionFeatures & features,
                                       const BatchImages & images, int64_t layer);
    // The rope tables of a cached forward's rows (mrope where a sequence holds images or its cache an offset)
    // and its image rows; sets the caches' position offsets after an image prefill.
    std::pair<torch::Tensor, torch::Tensor> cached_rope(const CachedBatch & batch, BatchImages & images);
    // A decode step's layers through run_decode_layers (decode_layers.h) when it applies (transformer_decode.cpp):
    // x [B, C] the embeddings, cos / sin [B, 1, D]; returns false, x untouched, when it does not apply.
    bool run_fused_decode(const CachedBatch & batch, const torch::Tensor & cos, const torch::Tensor & sin,
                          torch::Tensor & x) const;

    model::ModelConfig config_;
    std::unique_ptr<DecoderFamily> family_;
    torch::ScalarType compute_;
    torch::ScalarType act_;
    torch::Device device_;
    std::shared_ptr<model::SafetensorsFile> file_;  // keeps memory-mapped weights alive
    BaseWeights weights_;
    torch::Tensor lm_head_exact_;  // [V, C] fp32 copy of a bf16 lm_head: GPUs under TINKERD_GPU_PATHS=reference only
    // The lm_head the logits take: the stored one (exact products on every device), or lm_head_exact_.
    const torch::Tensor & lm_head_weight() const;
    RopeTables rope_;
    std::shared_ptr<const CacheShape> cache_shape_;
    std::unique_ptr<VisionTower> vision_;  // image-text checkpoints only
};

}  // namespace tinkerd::engine
