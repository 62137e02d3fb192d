// Image decoding for vision inputs: PNG (libpng) and JPEG (libjpeg-turbo) bytes into 8-bit RGB pixels,
// converted the way PIL's Image.convert("RGB") does (alpha dropped, grey and palettes expanded), because
// that is what the Hugging Face processors the references use see. Bounded: a size over the pixel limit
// is refused before any pixel is decoded.
#pragma once

#include <cstdint>
#include <string_view>
#include <vector>

#include "common/status.h"

namespace tinkerd::vision {

// Row-major 8-bit RGB: rgb[(y * width + x) * 3 + c].
struct RgbImage {
    int64_t width = 0;
    int64_t height = 0;
    std::vector<uint8_t> rgb;  // [height, width, 3]
};

// Decoded images larger than this many pixels are refused (a decompression bomb guard).
inline constexpr int64_t kMaxImagePixels = int64_t{64} << 20;

// format: "png" or "jpeg" (as the Tinker ImageChunk names them; "jpg" is accepted too). The error names
// the format and what is wrong with the bytes ("not a PNG file", "truncated", "image of 90000x90000
// pixels is over the limit of ...").
Result<RgbImage> decode_image(std::string_view bytes, std::string_view format, int64_t max_pixels = kMaxImagePixels);

Result<RgbImage> decode_png(std::string_view bytes, int64_t max_pixels = kMaxImagePixels);
Result<RgbImage> decode_jpeg(std::string_view bytes, int64_t max_pixels = kMaxImagePixels);

}  // namespace tinkerd::vision
