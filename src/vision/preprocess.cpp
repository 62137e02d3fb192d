// Qwen-VL preprocessing (preprocess.h). Numerics follow the Hugging Face PIL processor step by step:
// rescale in float64 then rounded to float32, normalise in float32, so pixel_values match it to the bit
// wherever the resized pixels match.
#include "vision/preprocess.h"

#include <cmath>
#include <fstream>

#include <nlohmann/json.hpp>

#include "vision/resize.h"

namespace tinkerd::vision {
namespace {

using json = nlohmann::json;

Result<json> read_json(const std::filesystem::path & path) {
    std::ifstream in(path);
    if (!in)
        return not_found(path.string() + ": cannot be read");
    json value = json::parse(in, nullptr, /*allow_exceptions=*/false);
    if (value.is_discarded() || !value.is_object())
        return invalid_argument(path.string() + ": not a JSON object");
    return value;
}

Result<int64_t> positive_int(const json & object, const char * key, int64_t fallback, const std::string & file) {
    auto it = object.find(key);
    if (it == object.end() || it->is_null())
        return fallback;
    if (!it->is_number_integer() || it->get<int64_t>() <= 0)
        return invalid_argument(file + ": \"" + key + "\" must be a positive integer");
    return it->get<int64_t>();
}

Result<void> read_triple(const json & object, const char * key, double (&out)[3], const std::string & file) {
    auto it = object.find(key);
    if (it == object.end() || it->is_null())
        return {};
    if (!it->is_array() || it->size() != 3)
        return invalid_argument(file + ": \"" + key + "\" must be 3 numbers");
    for (size_t c = 0; c < 3; ++c) {
        if (!(*it)[c].is_number())
            return invalid_argument(file + ": \"" + key + "\" must be 3 numbers");
        out[c] = (*it)[c].get<double>();
    }
    return {};
}

// preprocessor_config.json: sizes, patching and normalisation; unsupported switches refused by name.
Result<void> apply_preprocessor_json(const json & pre, const std::string & file, ProcessorConfig & config) {
    for (const char * flag : {"do_resize", "do_rescale", "do_normalize", "do_convert_rgb"}) {
        if (pre.contains(flag) && pre[flag] == false)
            return unsupported(file + ": \"" + std::string(flag) + "\": false is not supported");
    }
    if (pre.contains("resample") && pre["resample"] != 3)
        return unsupported(file + ": \"resample\": only 3 (bicubic) is supported");
    auto patch = positive_int(pre, "patch_size", config.patch_size, file);
    auto temporal = positive_int(pre, "temporal_patch_size", config.temporal_patch_size, file);
    auto merge = positive_int(pre, "merge_size", config.merge_size, file);
    if (!patch || !temporal || !merge)
        return !patch ? patch.error() : !temporal ? temporal.error() : merge.error();
    config.patch_size = *patch, config.temporal_patch_size = *temporal, config.merge_size = *merge;
    const json size = pre.value("size", json::object());
    auto min_px = positive_int(size, "shortest_edge", pre.value("min_pixels", config.min_pixels), file);
    auto max_px = positive_int(size, "longest_edge", pre.value("max_pixels", config.max_pixels), file);
    if (!min_px || !max_px)
        return !min_px ? min_px.error() : max_px.error();
    config.min_pixels = *min_px, config.max_pixels = *max_px;
    if (auto it = pre.find("rescale_factor"); it != pre.end() && it->is_number())
        config.rescale_factor = *it;
    TRY_STATUS(read_triple(pre, "image_mean", config.mean, file));
    return read_triple(pre, "image_std", config.std, file);
}

// The processor must cut the patches the vision tower (config.json's vision_config) was built for; otherwise
// every image would fail later with "pixel_values of the wrong size", so the mismatch is named once at start-up.
Result<void> check_same_patching(const ProcessorConfig & config, int64_t patch, int64_t temporal, int64_t merge,
                                 const std::string & file) {
    const struct {
        const char * key;
        int64_t processor, tower;
    } pairs[] = {{"patch_size", config.patch_size, patch},
                 {"temporal_patch_size", config.temporal_patch_size, temporal},
                 {"merge_size", config.merge_size, merge}};
    for (const auto & pair : pairs) {
        if (pair.processor != pair.tower)
            return unsupported(file + ": \"" + pair.key + "\" is " + std::to_string(pair.processor) +
                               " but config.json's vision_config says " + std::to_string(pair.tower));
    }
    return {};
}

}  // namespace

Result<std::shared_ptr<const ProcessorConfig>> load_processor_config(const std::filesystem::path & model_dir) {
    auto model = read_json(model_dir / "config.json");
    if (!model)
        return model.error();
    auto vision = model->find("vision_config");
    if (vision == model->end() || !vision->is_object())
        return std::shared_ptr<const ProcessorConfig>{};
    auto config = std::make_shared<ProcessorConfig>();
    const std::string config_file = (model_dir / "config.json").string();
    auto patch = positive_int(*vision, "patch_size", config->patch_size, config_file);
    auto temporal = positive_int(*vision, "temporal_patch_size", config->temporal_patch_size, config_file);
    auto merge = positive_int(*vision, "spatial_merge_size", config->merge_size, config_file);
    auto image_token = positive_int(*model, "image_token_id", -1, config_file);
    if (!patch || !temporal || !merge || !image_token)
        return !patch ? patch.error() : !temporal ? temporal.error() : !merge ? merge.error() : image_token.error();
    if (*image_token < 0)
        return unsupported(config_file + ": a vision model needs \"image_token_id\"");
    config->patch_size = *patch, config->temporal_patch_size = *temporal, config->merge_size = *merge;
    config->image_token_id = *image_token;
    config->vision_start_token_id = model->value("vision_start_token_id", int64_t{-1});
    const auto pre_path = model_dir / "preprocessor_config.json";
    if (std::filesystem::exists(pre_path)) {
        auto pre = read_json(pre_path);
        if (!pre)
            return pre.error();
        TRY_STATUS(apply_preprocessor_json(*pre, pre_path.string(), *config));
        TRY_STATUS(check_same_patching(*config, *patch, *temporal, *merge, pre_path.string()));
    }
    return std::shared_ptr<const ProcessorConfig>(std::move(config));
}

Result<ResizedSize> smart_resize(int64_t height, int64_t width, int64_t factor, int64_t min_pixels,
                                 int64_t max_pixels) {
    if (std::max(height, width) > 200 * std::min(height, width))
        return invalid_argument("the image's aspect ratio " + std::to_string(width) + "x" + std::to_string(height) +
                                " is over 200");
    const auto f = static_cast<double>(factor);
    const auto h = static_cast<double>(height), w = static_cast<double>(width);
    // Python's round() rounds halves to even, as nearbyint does in the default rounding mode.
    auto h_bar = static_cast<int64_t>(std::nearbyint(h / f)) * factor;
    auto w_bar = static_cast<int64_t>(std::nearbyint(w / f)) * factor;
    if (h_bar * w_bar > max_pixels) {
        const double beta = std::sqrt(h * w / static_cast<double>(max_pixels));
        h_bar = std::max(factor, static_cast<int64_t>(std::floor(h / beta / f)) * factor);
        w_bar = std::max(factor, static_cast<int64_t>(std::floor(w / beta / f)) * factor);
    } else if (h_bar * w_bar < min_pixels) {
        const double beta = std::sqrt(static_cast<double>(min_pixels) / (h * w));
        h_bar = static_cast<int64_t>(std::ceil(h * beta / f)) * factor;
        w_bar = static_cast<int64_t>(std::ceil(w * beta / f)) * factor;
    }
    return ResizedSize{h_bar, w_bar};
}

Result<int64_t> image_token_count(int64_t height, int64_t width, const ProcessorConfig & config) {
    const int64_t factor = config.patch_size * config.merge_size;
    auto size = smart_resize(height, width, factor, config.min_pixels, config.max_pixels);
    if (!size)
        return size.error();
    return (size->height / factor) * (size->width / factor);
}

namespace {

// The rescaled, normalised value of every 8-bit level per channel: float32((float64(v) * rescale) as
// float32 - mean) / std, the processor's own order of rounding.
std::vector<float> normalised_levels(const ProcessorConfig & config) {
    std::vector<float> table(256 * 3);
    for (int c = 0; c < 3; ++c) {
        for (int v = 0; v < 256; ++v) {
            const auto rescaled = static_cast<float>(static_cast<double>(v) * config.rescale_factor);
            table[c * 256 + v] = (rescaled - static_cast<float>(config.mean[c])) / static_cast<float>(config.std[c]);
        }
    }
    return table;
}

// pixel_values [grid_h * grid_w, 3 * tp * p * p]: patches ordered by merge block (row-major), then within
// the block row-major; each patch's features by channel, frame (the one frame repeated tp times), row, column.
void cut_patches(const RgbImage & image, const ProcessorConfig & config, engine::ImageInput & out) {
    const int64_t p = config.patch_size, m = config.merge_size, tp = config.temporal_patch_size;
    const int64_t gh = image.height / p, gw = image.width / p, features = config.patch_features();
    const std::vector<float> levels = normalised_levels(config);
    out.pixel_values.assign(static_cast<size_t>(gh * gw * features), 0.0F);
    int64_t patch = 0;
    for (int64_t bh = 0; bh < gh / m; ++bh)
        for (int64_t bw = 0; bw < gw / m; ++bw)
            for (int64_t mh = 0; mh < m; ++mh)
                for (int64_t mw = 0; mw < m; ++mw, ++patch) {
                    const int64_t y0 = (bh * m + mh) * p, x0 = (bw * m + mw) * p;
                    float * dst = out.pixel_values.data() + patch * features;
                    for (int64_t c = 0; c < 3; ++c)
                        for (int64_t t = 0; t < tp; ++t)
                            for (int64_t y = 0; y < p; ++y)
                                for (int64_t x = 0; x < p; ++x)
                                    *dst++ = levels[c * 256 + image.rgb[((y0 + y) * image.width + x0 + x) * 3 + c]];
                }
    out.grid_t = 1;
    out.grid_h = gh;
    out.grid_w = gw;
}

}  // namespace

Result<int64_t> preprocess(const RgbImage & pixels, const ProcessorConfig & config, engine::ImageInput & image) {
    const int64_t factor = config.patch_size * config.merge_size;
    auto size = smart_resize(pixels.height, pixels.width, factor, config.min_pixels, config.max_pixels);
    if (!size)
        return size.error();
    const int64_t patches = (size->height / config.patch_size) * (size->width / config.patch_size);
    if (patches > kMaxImagePatches)
        return invalid_argument("the image becomes " + std::to_string(patches) + " patches, over the limit of " +
                                std::to_string(kMaxImagePatches));
    if (size->height == pixels.height && size->width == pixels.width) {
        cut_patches(pixels, config, image);
    } else {
        cut_patches(resize_bicubic(pixels, size->width, size->height), config, image);
    }
    return patches / (config.merge_size * config.merge_size);
}

Result<int64_t> prepare_image(engine::ImageInput & image, const ProcessorConfig & config, const std::string & where,
                              int64_t override_width, int64_t override_height) {
    auto pixels = decode_image(image.data, image.format);
    if (!pixels)
        return Error{pixels.error().kind, where + ": " + pixels.error().message};
    std::string().swap(image.data);  // the encoded bytes are not needed again: free them before the resize
    const int64_t width = pixels->width, height = pixels->height;
    if (override_width > 0 && override_height > 0)
        *pixels = resize_bicubic(*pixels, override_width, override_height);
    auto tokens = preprocess(*pixels, config, image);
    if (!tokens)
        return Error{tokens.error().kind, where + ": " + tokens.error().message};
    if (image.expected_tokens > 0 && image.expected_tokens != *tokens) {
        return invalid_argument(where + ".expected_tokens: " + std::to_string(image.expected_tokens) +
                                " but the image (" + std::to_string(width) + "x" + std::to_string(height) +
                                ", resized to " + std::to_string(image.grid_w * config.patch_size) + "x" +
                                std::to_string(image.grid_h * config.patch_size) + ") gives " +
                                std::to_string(*tokens) + " tokens");
    }
    return *tokens;
}

}  // namespace tinkerd::vision
