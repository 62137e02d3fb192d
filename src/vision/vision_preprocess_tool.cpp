// vision_preprocess_tool MODEL_DIR IMAGE_FILE FORMAT OUT_FILE [WIDTH HEIGHT]: runs prepare_image on one
// file with the model's processor and writes int64 grid_t, grid_h, grid_w, tokens, then the float32
// pixel_values, for tests/reference/check_vision_preprocess.py. Errors: the message on stderr, exit 2.
#include <cstdio>
#include <fstream>
#include <iostream>
#include <iterator>
#include <string>

#include "vision/preprocess.h"

int main(int argc, char ** argv) {
    using namespace tinkerd;
    if (argc != 5 && argc != 7) {
        std::cerr << "usage: vision_preprocess_tool MODEL_DIR IMAGE_FILE FORMAT OUT_FILE [WIDTH HEIGHT]\n";
        return 1;
    }
    auto config = vision::load_processor_config(argv[1]);
    if (!config || *config == nullptr) {
        std::cerr << (config ? std::string("not a vision model") : config.error().message) << "\n";
        return 2;
    }
    std::ifstream in(argv[2], std::ios::binary);
    engine::ImageInput image;
    image.data.assign(std::istreambuf_iterator<char>(in), std::istreambuf_iterator<char>());
    image.format = argv[3];
    const int64_t width = argc == 7 ? std::stoll(argv[5]) : 0, height = argc == 7 ? std::stoll(argv[6]) : 0;
    auto tokens = vision::prepare_image(image, **config, "image", width, height);
    if (!tokens) {
        std::cerr << tokens.error().message << "\n";
        return 2;
    }
    std::ofstream out(argv[4], std::ios::binary);
    for (int64_t v : {image.grid_t, image.grid_h, image.grid_w, *tokens})
        out.write(reinterpret_cast<const char *>(&v), 8);
    out.write(reinterpret_cast<const char *>(image.pixel_values.data()),
              static_cast<std::streamsize>(image.pixel_values.size() * sizeof(float)));
    return out ? 0 : 3;
}
