// image_fuzz: arbitrary bytes as an image chunk's PNG or JPEG (by the first byte's signature) ->
// vision::decode_image (libpng / libjpeg-turbo behind our error handling), then the Qwen-VL preprocessing
// of whatever decoded (resize + patches). The pixel limit is small so that a valid huge header is refused
// quickly instead of timing out.
#include <cstddef>
#include <cstdint>
#include <string_view>

#include "vision/preprocess.h"

extern "C" int LLVMFuzzerTestOneInput(const uint8_t * data, size_t size) {
    using namespace tinkerd;
    const std::string_view bytes(reinterpret_cast<const char *>(data), size);
    const std::string_view format = size > 0 && data[0] == 0xFF ? "jpeg" : "png";
    auto image = vision::decode_image(bytes, format, /*max_pixels=*/int64_t{1} << 16);
    if (!image.ok()) {
        return 0;
    }
    vision::ProcessorConfig config;
    config.patch_size = 4;
    config.merge_size = 2;
    config.min_pixels = 64;
    config.max_pixels = 4096;
    engine::ImageInput prepared;
    (void)vision::preprocess(*image, config, prepared);
    return 0;
}
