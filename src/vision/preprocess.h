// Qwen-VL image preprocessing (Qwen2-VL / Qwen3-VL / Qwen3.5 processors): the model's processor settings
// read from its preprocessor_config.json and config.json, the aspect-preserving resize to a multiple of
// patch * merge pixels ("smart resize"), rescale + normalise, and the cut into flattened patches in the
// order the vision tower expects; then an image chunk's token count and the `expected_tokens` check.
#pragma once

#include <cstdint>
#include <filesystem>
#include <memory>
#include <string>

#include "common/status.h"
#include "engine/engine.h"
#include "vision/image_decode.h"

namespace tinkerd::vision {

// One image may become at most this many patches (pixel_values of 65536 x 1536 floats = 400 MB, a
// full-resolution Qwen3-VL image of 16384 tokens).
inline constexpr int64_t kMaxImagePatches = 65536;

struct ProcessorConfig {
    int64_t patch_size = 16;
    int64_t temporal_patch_size = 2;
    int64_t merge_size = 2;         // spatial merge: merge_size^2 patches make one token
    int64_t min_pixels = 65536;     // size.shortest_edge
    int64_t max_pixels = 16777216;  // size.longest_edge
    double rescale_factor = 1.0 / 255.0;
    double mean[3] = {0.5, 0.5, 0.5};
    double std[3] = {0.5, 0.5, 0.5};
    int64_t image_token_id = -1;         // config.json image_token_id: the id every image position carries
    int64_t vision_start_token_id = -1;  // config.json vision_start_token_id (informational)

    int64_t patch_features() const { return 3 * temporal_patch_size * patch_size * patch_size; }
};

// The processor of the model in `model_dir`: null when its config.json has no vision_config (a text-only
// model). preprocessor_config.json is optional (defaults: Qwen3-VL's); an unsupported setting (a resample
// other than bicubic, do_resize false, ...) is an error naming the file and key.
Result<std::shared_ptr<const ProcessorConfig>> load_processor_config(const std::filesystem::path & model_dir);

struct ResizedSize {
    int64_t height = 0, width = 0;
};

// Height and width, each a multiple of `factor`, with the area within [min_pixels, max_pixels] and the
// aspect ratio kept as closely as possible. An aspect ratio over 200 is refused.
Result<ResizedSize> smart_resize(int64_t height, int64_t width, int64_t factor, int64_t min_pixels, int64_t max_pixels);

// Tokens an image of this size becomes (what a renderer puts in expected_tokens).
Result<int64_t> image_token_count(int64_t height, int64_t width, const ProcessorConfig & config);

// Fills image.grid_{t,h,w} and image.pixel_values from the decoded pixels; returns the token count.
Result<int64_t> preprocess(const RgbImage & pixels, const ProcessorConfig & config, engine::ImageInput & image);

// Decodes image.data (image.format; the bytes are freed once decoded), optionally resized first to override_width x
// override_height (SDK 0.38's ImageChunk.override_dimensions; 0 = none), preprocesses it, and checks
// image.expected_tokens (when > 0) against the count: "expected_tokens is 64 but the image (640x480, resized to
// 640x480) gives 300 tokens". Returns the token count. `where` names the chunk in errors ("data[0].model_input[1]").
Result<int64_t> prepare_image(engine::ImageInput & image, const ProcessorConfig & config, const std::string & where,
                              int64_t override_width = 0, int64_t override_height = 0);

}  // namespace tinkerd::vision
