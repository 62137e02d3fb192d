// Image placement checks and multimodal RoPE positions (image_layout.h), following transformers'
// Qwen3VLModel.get_rope_index for images (temporal merge 1, time interval 1).
#include "engine/image_layout.h"

#include <algorithm>

namespace tinkerd::engine {

int64_t image_token_count(const ImageInput & image, const model::ModelConfig & config) {
    const int64_t m = config.vision.spatial_merge_size;
    return image.grid_t * image.grid_h * image.grid_w / (m * m);
}

namespace {

// The grid and pixel values of one image, alone.
Result<void> check_image_shape(const ImageInput & image, const model::ModelConfig & config, const std::string & name) {
    const int64_t m = config.vision.spatial_merge_size;
    if (image.grid_t < 1 || image.grid_h < 1 || image.grid_w < 1 || image.grid_h % m != 0 || image.grid_w % m != 0) {
        return invalid_argument(name + " has patch grid " + std::to_string(image.grid_t) + "x" +
                                std::to_string(image.grid_h) + "x" + std::to_string(image.grid_w) +
                                "; it must be positive with height and width multiples of " + std::to_string(m));
    }
    const int64_t patches = image.grid_t * image.grid_h * image.grid_w;
    const int64_t expected = patches * config.vision.patch_dim();
    if (static_cast<int64_t>(image.pixel_values.size()) != expected) {
        return invalid_argument(name + " has " + std::to_string(image.pixel_values.size()) +
                                " pixel values; its grid needs " + std::to_string(patches) + " patches of " +
                                std::to_string(config.vision.patch_dim()) + " = " + std::to_string(expected));
    }
    return {};
}

}  // namespace

Result<void> check_images(const std::vector<int64_t> & tokens, const std::vector<ImageInput> & images,
                          const model::ModelConfig & config, const std::string & where) {
    if (images.empty()) {
        return {};
    }
    if (!config.has_vision()) {
        return invalid_argument(where + "holds images, but model " + config.architecture +
                                " has no vision tower (it takes text only)");
    }
    const auto n = static_cast<int64_t>(tokens.size());
    int64_t previous_end = 0, image_tokens = 0;
    for (size_t i = 0; i < images.size(); ++i) {
        const ImageInput & image = images[i];
        const std::string name = where + "image " + std::to_string(i);
        TRY_STATUS(check_image_shape(image, config, name));
        const int64_t count = image_token_count(image, config);
        if (image.token_offset < previous_end || image.token_offset + count > n) {
            return invalid_argument(name + " takes tokens [" + std::to_string(image.token_offset) + ", " +
                                    std::to_string(image.token_offset + count) + ") but must lie within the " +
                                    std::to_string(n) + " tokens after the previous image's (from " +
                                    std::to_string(previous_end) + ")");
        }
        for (int64_t t = image.token_offset; t < image.token_offset + count; ++t) {
            if (tokens[t] != config.image_token_id) {
                return invalid_argument(name + ": token " + std::to_string(t) + " is " + std::to_string(tokens[t]) +
                                        ", not the image token " + std::to_string(config.image_token_id));
            }
        }
        previous_end = image.token_offset + count;
        image_tokens += count;
    }
    const int64_t placeholders = std::count(tokens.begin(), tokens.end(), config.image_token_id);
    if (placeholders != image_tokens) {
        return invalid_argument(where + std::to_string(placeholders) + " image tokens (id " +
                                std::to_string(config.image_token_id) + ") but its images take " +
                                std::to_string(image_tokens));
    }
    return {};
}

MropePositions mrope_positions(int64_t n_tokens, const std::vector<ImageInput> & images, int64_t merge_size) {
    MropePositions out;
    out.temporal.reserve(n_tokens);
    out.height.reserve(n_tokens);
    out.width.reserve(n_tokens);
    int64_t p = 0, token = 0;
    const auto add_text_until = [&](int64_t end) {
        for (; token < end; ++token, ++p) {
            out.temporal.push_back(p);
            out.height.push_back(p);
            out.width.push_back(p);
        }
    };
    for (const ImageInput & image : images) {
        add_text_until(image.token_offset);
        const int64_t t = image.grid_t, h = image.grid_h / merge_size, w = image.grid_w / merge_size;
        for (int64_t k = 0; k < t * h * w; ++k) {
            out.temporal.push_back(p);
            out.height.push_back(p + k / (w * t));
            out.width.push_back(p + k % w);
        }
        token += t * h * w;
        p += std::max(h, w);
    }
    add_text_until(n_tokens);
    out.next = p;
    return out;
}

}  // namespace tinkerd::engine
