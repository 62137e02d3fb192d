// Transformer's image inputs (docs/vision.md): the vision tower's features in place of the image tokens'
// embeddings, Qwen3-VL's deepstack additions after the first layers, and the multimodal RoPE rows of a
// cached forward (prefill with images, then decode from the cache's position offset).
#include <algorithm>

#include "engine/image_layout.h"
#include "engine/transformer.h"

namespace tinkerd::engine {

torch::Tensor Transformer::input_embeddings(const torch::Tensor & tokens, const BatchImages & images,
                                            VisionFeatures & features) const {
    torch::Tensor x = embed_tokens(tokens);  // [T, C]
    if (images.empty()) {
        return x;
    }
    TORCH_CHECK(vision_, "input_embeddings: images given to a model without a vision tower");
    features = vision_->encode(images.images);  // [Nv, C]
    TORCH_CHECK(features.embeds.size(0) == images.rows.size(0), "input_embeddings: ", features.embeds.size(0),
                " image features for ", images.rows.size(0), " image tokens");
    return x.index_copy(0, images.rows, features.embeds.to(x.scalar_type()));
}

torch::Tensor Transformer::add_deepstack(const torch::Tensor & x, const VisionFeatures & features,
                                         const BatchImages & images, int64_t layer) {
    if (layer >= static_cast<int64_t>(features.deepstack.size())) {
        return x;
    }
    return x.index_add(0, images.rows, features.deepstack[layer].to(x.scalar_type()));  // [T, C]
}

std::pair<torch::Tensor, torch::Tensor> Transformer::cached_rope(const CachedBatch & batch, BatchImages & images) {
    std::vector<int64_t> temporal, height, width, image_rows;
    bool three_d = false;
    int64_t row = 0;
    for (size_t s = 0; s < batch.caches.size(); ++s) {
        SequenceCache & cache = *batch.caches[s];
        const int64_t n = batch.lengths[s];
        const std::vector<ImageInput> * seq_images = s < batch.images.size() ? batch.images[s] : nullptr;
        if (seq_images && !seq_images->empty()) {
            TORCH_CHECK(cache.length() == 0, "cached_rope: images need a prefill from position 0");
            MropePositions p = mrope_positions(n, *seq_images, config_.vision.spatial_merge_size);
            temporal.insert(temporal.end(), p.temporal.begin(), p.temporal.end());
            height.insert(height.end(), p.height.begin(), p.height.end());
            width.insert(width.end(), p.width.begin(), p.width.end());
            cache.set_position_offset(p.next - n);
            for (const ImageInput & image : *seq_images) {
                images.images.push_back(&image);
                for (int64_t k = 0; k < image_token_count(image, config_); ++k) {
                    image_rows.push_back(row + image.token_offset + k);
                }
            }
            three_d = true;
        } else {
            const int64_t start = cache.length() + cache.position_offset();
            three_d |= cache.position_offset() != 0;
            for (int64_t t = 0; t < n; ++t) {
                temporal.push_back(start + t);
            }
            height.insert(height.end(), temporal.end() - n, temporal.end());
            width.insert(width.end(), temporal.end() - n, temporal.end());
        }
        row += n;
    }
    if (!image_rows.empty()) {
        images.rows = torch::tensor(image_rows, torch::kInt64).to(device_);
    }
    const int64_t max_position = temporal.empty() ? 0 : *std::max_element(temporal.begin(), temporal.end());
    const int64_t max_all =
        std::max({max_position, height.empty() ? 0 : *std::max_element(height.begin(), height.end()),
                  width.empty() ? 0 : *std::max_element(width.begin(), width.end())});
    if (!three_d || !config_.has_vision()) {
        return rope_.lookup(torch::tensor(temporal, torch::kInt64).to(device_), max_position);  // [T, 1, D]
    }
    torch::Tensor positions =
        torch::stack({torch::tensor(temporal, torch::kInt64), torch::tensor(height, torch::kInt64),
                      torch::tensor(width, torch::kInt64)});  // [3, T]
    return rope_.lookup_mrope(positions.to(device_), max_all);
}

}  // namespace tinkerd::engine
