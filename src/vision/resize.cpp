// PIL-style antialiased bicubic resampling (resize.h). Each output pixel of a pass is a normalised,
// fixed-point weighted sum over a window of input pixels whose width grows with the downscale factor
// (that is the antialiasing); the cubic kernel uses a = -0.5.
#include "vision/resize.h"

#include <algorithm>
#include <cmath>

namespace tinkerd::vision {
namespace {

constexpr int kPrecisionBits = 32 - 8 - 2;  // fixed-point weights: sums of 8-bit pixels fit in int32
constexpr double kSupport = 2.0;            // the cubic kernel is zero outside [-2, 2]

double cubic(double x) {
    constexpr double a = -0.5;
    x = std::fabs(x);
    if (x < 1.0)
        return ((a + 2.0) * x - (a + 3.0)) * x * x + 1.0;
    if (x < 2.0)
        return (((x - 5.0) * x + 8.0) * x - 4.0) * a;
    return 0.0;
}

// For each output index: the first input index of its window, the window's length, and the fixed-point
// weights (kernel_size per output, zero-padded).
struct Windows {
    int64_t kernel_size = 0;
    std::vector<int64_t> first, length;
    std::vector<int32_t> weights;  // [out, kernel_size]
};

int32_t to_fixed(double weight) {
    const double scaled = weight * static_cast<double>(1 << kPrecisionBits);
    return static_cast<int32_t>(weight < 0 ? scaled - 0.5 : scaled + 0.5);
}

Windows make_windows(int64_t in_size, int64_t out_size) {
    const double scale = static_cast<double>(in_size) / static_cast<double>(out_size);
    const double filter_scale = std::max(scale, 1.0);
    const double support = kSupport * filter_scale;
    Windows w;
    w.kernel_size = static_cast<int64_t>(std::ceil(support)) * 2 + 1;
    w.first.resize(out_size);
    w.length.resize(out_size);
    w.weights.assign(static_cast<size_t>(out_size * w.kernel_size), 0);
    std::vector<double> k(static_cast<size_t>(w.kernel_size));
    for (int64_t o = 0; o < out_size; ++o) {
        const double center = (static_cast<double>(o) + 0.5) * scale;
        const auto lo = std::max<int64_t>(static_cast<int64_t>(center - support + 0.5), 0);
        const auto hi = std::min<int64_t>(static_cast<int64_t>(center + support + 0.5), in_size);
        double total = 0;
        for (int64_t i = lo; i < hi; ++i) {
            k[i - lo] = cubic((static_cast<double>(i) - center + 0.5) / filter_scale);
            total += k[i - lo];
        }
        for (int64_t i = lo; i < hi; ++i)
            w.weights[o * w.kernel_size + (i - lo)] = to_fixed(total != 0.0 ? k[i - lo] / total : 0.0);
        w.first[o] = lo;
        w.length[o] = hi - lo;
    }
    return w;
}

uint8_t clip_fixed(int64_t sum) {
    const int64_t value = sum >> kPrecisionBits;
    return static_cast<uint8_t>(std::clamp<int64_t>(value, 0, 255));
}

// One pass along x (stride 3 between neighbours) or along y (stride width*3).
RgbImage resample_horizontal(const RgbImage & in, int64_t out_width) {
    const Windows w = make_windows(in.width, out_width);
    RgbImage out{out_width, in.height, std::vector<uint8_t>(static_cast<size_t>(out_width * in.height * 3))};
    for (int64_t y = 0; y < in.height; ++y) {
        const uint8_t * row = in.rgb.data() + y * in.width * 3;
        for (int64_t x = 0; x < out_width; ++x) {
            const int32_t * k = w.weights.data() + x * w.kernel_size;
            for (int c = 0; c < 3; ++c) {
                int64_t sum = int64_t{1} << (kPrecisionBits - 1);
                for (int64_t i = 0; i < w.length[x]; ++i)
                    sum += int64_t{row[(w.first[x] + i) * 3 + c]} * k[i];
                out.rgb[(y * out_width + x) * 3 + c] = clip_fixed(sum);
            }
        }
    }
    return out;
}

RgbImage resample_vertical(const RgbImage & in, int64_t out_height) {
    const Windows w = make_windows(in.height, out_height);
    const int64_t row_bytes = in.width * 3;
    RgbImage out{in.width, out_height, std::vector<uint8_t>(static_cast<size_t>(row_bytes * out_height))};
    for (int64_t y = 0; y < out_height; ++y) {
        const int32_t * k = w.weights.data() + y * w.kernel_size;
        for (int64_t b = 0; b < row_bytes; ++b) {
            int64_t sum = int64_t{1} << (kPrecisionBits - 1);
            for (int64_t i = 0; i < w.length[y]; ++i)
                sum += int64_t{in.rgb[(w.first[y] + i) * row_bytes + b]} * k[i];
            out.rgb[y * row_bytes + b] = clip_fixed(sum);
        }
    }
    return out;
}

}  // namespace

RgbImage resize_bicubic(const RgbImage & image, int64_t width, int64_t height) {
    RgbImage out = image;
    // PIL (13.0, checked by tests/reference/check_vision_preprocess.py) runs the vertical pass first when
    // it widens and shortens the image, the horizontal first otherwise; the 8-bit rounding between the
    // passes makes the order visible.
    if (width > image.width && height < image.height) {
        out = resample_vertical(out, height);
        return resample_horizontal(out, width);
    }
    if (width != out.width)
        out = resample_horizontal(out, width);
    if (height != out.height)
        out = resample_vertical(out, height);
    return out;
}

}  // namespace tinkerd::vision
