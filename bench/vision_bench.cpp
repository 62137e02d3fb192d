// Vision benchmark (docs/vision.md): on a Qwen3-VL-shaped checkpoint (bench/vision_model.py), times the engine's
// base forward of one datum holding an image of S x S pixels (S a multiple of 32) (random pixel_values, grid S/16 x
// S/16) against the same datum with text in place of the image; the difference is the vision tower (and the merge into
// the embeddings). Also the process's peak RSS after each size. JSON lines to stdout, a table to stderr. Usage:
// vision_bench MODEL_DIR [REPEATS [SIDE...]]   (sides default: 224 448)
#include <algorithm>
#include <chrono>
#include <cstdio>
#include <cstdlib>
#include <random>
#include <string>
#include <sys/resource.h>
#include <vector>

#include "engine/engine.h"

namespace {

using Clock = std::chrono::steady_clock;
namespace eng = tinkerd::engine;

double peak_rss_mib() {
    rusage usage{};
    getrusage(RUSAGE_SELF, &usage);
    return static_cast<double>(usage.ru_maxrss) / 1024.0;
}

// 4 text tokens, the image's tokens (or text instead), 4 text tokens; cross_entropy on every position.
eng::Datum make_datum(const eng::Engine & engine, int64_t side, bool with_image, std::mt19937 & rng) {
    const auto & c = engine.config();
    const int64_t grid = side / c.vision.patch_size, merge = c.vision.spatial_merge_size;
    const int64_t image_tokens = grid * grid / (merge * merge);
    eng::Datum datum;
    std::uniform_int_distribution<int64_t> text(0, 1000);
    for (int64_t i = 0; i < 8 + image_tokens; ++i) {
        const bool image_row = i >= 4 && i < 4 + image_tokens;
        datum.tokens.push_back(image_row && with_image ? c.image_token_id : text(rng));
    }
    const auto n = static_cast<int64_t>(datum.tokens.size());
    datum.loss_inputs["target_tokens"] = eng::make_host_tensor_i64({n}, std::vector<int64_t>(n, 1));
    if (with_image) {
        eng::ImageInput image;
        image.token_offset = 4;
        image.grid_t = 1, image.grid_h = grid, image.grid_w = grid;
        std::normal_distribution<float> pixel(0.0f, 1.0f);
        image.pixel_values.resize(grid * grid * c.vision.patch_dim());
        for (float & v : image.pixel_values) {
            v = pixel(rng);
        }
        datum.images.push_back(std::move(image));
    }
    return datum;
}

// Median seconds of a base-model forward of the datum.
double forward_seconds(eng::Engine & engine, const eng::Datum & datum, int repeats) {
    eng::ForwardBackwardInput input;
    input.loss_fn = "cross_entropy";
    input.datums = {datum};
    std::vector<double> times;
    for (int r = 0; r < repeats; ++r) {
        const auto t0 = Clock::now();
        auto out = engine.forward_backward({input}, false);
        if (!out[0].ok()) {
            std::fprintf(stderr, "vision_bench: %s\n", out[0].error().message.c_str());
            std::exit(1);
        }
        times.push_back(std::chrono::duration<double>(Clock::now() - t0).count());
    }
    std::sort(times.begin(), times.end());
    return times[times.size() / 2];
}

}  // namespace

int main(int argc, char ** argv) {
    if (argc < 2) {
        std::fprintf(stderr, "usage: vision_bench MODEL_DIR [REPEATS [SIDE...]]\n");
        return 2;
    }
    const int repeats = argc > 2 ? std::max(1, std::atoi(argv[2])) : 3;
    std::vector<int64_t> sides;
    for (int i = 3; i < argc; ++i) {
        sides.push_back(std::atoll(argv[i]));
    }
    if (sides.empty()) {
        sides = {224, 448};
    }
    auto loaded = eng::Engine::load(argv[1], {});
    if (!loaded.ok()) {
        std::fprintf(stderr, "vision_bench: %s\n", loaded.error().message.c_str());
        return 1;
    }
    eng::Engine & engine = **loaded;
    std::fprintf(stderr, "vision_bench: %s, %s weights\n", argv[1], engine.compute_dtype_name().c_str());
    std::fprintf(stderr, "%8s %8s %10s %10s %10s %10s\n", "pixels", "tokens", "with (s)", "text (s)", "tower (s)",
                 "peak MiB");
    std::mt19937 rng(7);
    for (int64_t side : sides) {
        const eng::Datum image = make_datum(engine, side, true, rng), text = make_datum(engine, side, false, rng);
        forward_seconds(engine, text, 1);  // warm-up of both paths (kernel choices, first-touch pages)
        forward_seconds(engine, image, 1);
        const double with_image = forward_seconds(engine, image, repeats);
        const double text_only = forward_seconds(engine, text, repeats);
        const int64_t tokens =
            static_cast<int64_t>(image.images[0].pixel_values.size()) / engine.config().vision.patch_dim();
        std::fprintf(stderr, "%5lldx%-4lld %8lld %10.3f %10.3f %10.3f %10.0f\n", static_cast<long long>(side),
                     static_cast<long long>(side), static_cast<long long>(tokens), with_image, text_only,
                     with_image - text_only, peak_rss_mib());
        std::printf(
            "{\"bench\":\"vision\",\"side\":%lld,\"patches\":%lld,\"forward_with_image_s\":%.4f,"
            "\"forward_text_s\":%.4f,\"vision_tower_s\":%.4f,\"peak_rss_mib\":%.0f,\"dtype\":\"%s\"}\n",
            static_cast<long long>(side), static_cast<long long>(tokens), with_image, text_only, with_image - text_only,
            peak_rss_mib(), engine.compute_dtype_name().c_str());
    }
    return 0;
}
