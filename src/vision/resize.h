// Bicubic resampling of an RgbImage with antialiasing, computed as PIL's Image.resize(BICUBIC) computes
// it (separable passes in PIL's order, 22-bit fixed-point weights, each pass rounded to 8 bits), so the
// Qwen-VL preprocessing here reproduces the Hugging Face processor's pixels.
#pragma once

#include <cstdint>

#include "vision/image_decode.h"

namespace tinkerd::vision {

// Resized copy of `image` at width x height (both >= 1). Same size: an exact copy.
RgbImage resize_bicubic(const RgbImage & image, int64_t width, int64_t height);

}  // namespace tinkerd::vision
