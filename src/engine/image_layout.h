// Where a sequence's images sit and what positions its tokens get (docs/vision.md): the consistency check of
// prepared ImageInputs against the tokens and the model (a clear invalid_argument otherwise), and Qwen3-VL's
// multimodal RoPE positions (3-D for image tokens, text continuing after the image). No tensors.
#pragma once

#include <cstdint>
#include <string>
#include <vector>

#include "common/status.h"
#include "engine/engine.h"
#include "model/model_config.h"

namespace tinkerd::engine {

// Tokens one prepared image occupies in the sequence: grid_t * grid_h * grid_w / spatial_merge_size².
int64_t image_token_count(const ImageInput & image, const model::ModelConfig & config);

// Checks images against tokens: the model has a vision tower; each image's grid is positive and divisible by the
// merge size, its pixel_values hold grid_t·grid_h·grid_w patches of patch_dim values, its tokens lie inside the
// sequence after the previous image's and are all image_token_id; no image_token_id outside an image.
// `where` prefixes the message ("data[2]: ", "prompt: ").
Result<void> check_images(const std::vector<int64_t> & tokens, const std::vector<ImageInput> & images,
                          const model::ModelConfig & config, const std::string & where);

// Multimodal RoPE positions of one sequence of n_tokens whose images passed check_images: text token i gets
// (p, p, p) and advances p by one; an image starting at p with merged grid (t, h', w') gives its k-th token
// (p, p + k / (w'·t), p + k mod w') and advances p by max(h', w'). next: the position of the token after them.
struct MropePositions {
    std::vector<int64_t> temporal, height, width;  // [n_tokens] each
    int64_t next = 0;
};
MropePositions mrope_positions(int64_t n_tokens, const std::vector<ImageInput> & images, int64_t merge_size);

}  // namespace tinkerd::engine
