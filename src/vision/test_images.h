// Test helper (not linked into the server): PNG bytes of a small image through libpng's simplified writer,
// for the unit tests of src/vision and of the wire's image chunks.
#pragma once

#include <cstdint>
#include <png.h>
#include <string>
#include <vector>

namespace tinkerd::vision::testing {

// format: PNG_FORMAT_RGB, PNG_FORMAT_RGBA, PNG_FORMAT_GRAY, PNG_FORMAT_GA; pixels row-major. "" on failure.
inline std::string encode_png(int width, int height, png_uint_32 format, const std::vector<uint8_t> & pixels) {
    png_image image{};
    image.version = PNG_IMAGE_VERSION;
    image.width = static_cast<png_uint_32>(width);
    image.height = static_cast<png_uint_32>(height);
    image.format = format;
    png_alloc_size_t size = 0;
    if (!png_image_write_to_memory(&image, nullptr, &size, 0, pixels.data(), 0, nullptr))
        return "";
    std::string out(size, '\0');
    if (!png_image_write_to_memory(&image, out.data(), &size, 0, pixels.data(), 0, nullptr))
        return "";
    out.resize(size);
    return out;
}

// A flat RGB image of width x height.
inline std::string flat_png(int width, int height, uint8_t value = 128) {
    return encode_png(width, height, PNG_FORMAT_RGB,
                      std::vector<uint8_t>(static_cast<size_t>(width * height * 3), value));
}

}  // namespace tinkerd::vision::testing
