// Image chunks of a ModelInput (Tinker's ImageChunk, in forward_backward data and sampling prompts): their
// fields from JSON (base64 `data`) or protobuf, then, for a model with a vision processor, decoding and
// preprocessing (src/vision) into an engine::ImageInput plus `n` image_token_id placeholders in the tokens.
// A text-only model refuses them with the same 400 as before images were supported.
#pragma once

#include <cstdint>
#include <string>
#include <vector>

#include <nlohmann/json.hpp>

#include "common/status.h"
#include "engine/engine.h"
#include "vision/preprocess.h"

namespace tinkerd::wire {

struct ImageChunkFields {
    std::string data;             // encoded image bytes
    std::string format;           // "png" | "jpeg"
    int64_t expected_tokens = 0;  // 0 = not given
    int64_t override_width = 0;   // SDK 0.38 override_dimensions (0 = none)
    int64_t override_height = 0;
};

// {"type": "image", "data": "<base64>", "format": "png", "expected_tokens": 64,
//  "override_dimensions": {"width": 32, "height": 32}}; errors name the field ("prompt.chunks[1].data: ...").
Result<ImageChunkFields> image_chunk_from_json(const nlohmann::json & chunk, const std::string & where);

// Standard base64 (with padding, as Python's b64encode writes it) to bytes; "" on malformed input.
Result<std::string> decode_base64(const std::string & text, const std::string & where);

// Prepares one image chunk for the model: appends its ImageInput (token_offset = tokens.size()) to `images`
// and its token count of image_token_id to `tokens`. `vision` null (a text-only model): UNSUPPORTED
// "<where>: image chunks are not supported (text-only models)". `patch_budget` is decreased by the image's
// patches; going below zero is a 413 naming the request's image total.
Result<void> append_image_chunk(ImageChunkFields fields, const vision::ProcessorConfig * vision,
                                const std::string & where, std::vector<int64_t> & tokens,
                                std::vector<engine::ImageInput> & images, int64_t & patch_budget);

// The patches all images of one request may become (two full-resolution Qwen3-VL images, ~800 MB of
// pixel values); more is a 413.
inline constexpr int64_t kMaxRequestImagePatches = 2 * vision::kMaxImagePatches;

}  // namespace tinkerd::wire
