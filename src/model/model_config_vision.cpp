// Parsing of an image-text checkpoint's vision parts into ModelConfig (docs/vision.md): "vision_config" (the
// Qwen3-VL / Qwen3.5 vision tower's sizes, deepstack layers), the image token ids, and the multimodal RoPE's
// mrope_section of the text model's rope parameters. Shapes the engine cannot run are refused here, named.
#include "model/config_json.h"

namespace tinkerd::model::config_json {
namespace {

Result<void> read_int_list(const json & obj, const std::string & key, std::vector<int64_t> & out) {
    if (!is_present(obj, key)) {
        return {};
    }
    if (!obj.at(key).is_array()) {
        return invalid_argument(CONFIG_PREFIX + ("field '" + key + "' must be a list of integers"));
    }
    out.clear();
    for (const json & value : obj.at(key)) {
        auto v = as_int(value, key);
        TRY_STATUS(v);
        out.push_back(v.value());
    }
    return {};
}

// The integer sizes of vision_config, each positive.
Result<void> parse_vision_sizes(const json & v, VisionConfig & out) {
    struct Field {
        const char * key;
        int64_t * target;
        int64_t fallback;  // -1: required
    };
    const Field fields[] = {{"depth", &out.depth, -1},
                            {"hidden_size", &out.hidden_size, -1},
                            {"intermediate_size", &out.intermediate_size, -1},
                            {"num_heads", &out.n_heads, -1},
                            {"in_channels", &out.in_channels, 3},
                            {"patch_size", &out.patch_size, 16},
                            {"temporal_patch_size", &out.temporal_patch_size, 2},
                            {"spatial_merge_size", &out.spatial_merge_size, 2},
                            {"out_hidden_size", &out.out_hidden_size, -1},
                            {"num_position_embeddings", &out.num_position_embeddings, -1}};
    for (const Field & f : fields) {
        const std::string key = std::string("vision_config.") + f.key;
        auto value = f.fallback < 0 ? required_int(v, f.key) : optional_int(v, f.key, f.fallback);
        if (!value.ok()) {
            return f.fallback < 0 && !is_present(v, f.key) ? missing_field(key) : value.error();
        }
        if (value.value() <= 0) {
            return invalid_argument(CONFIG_PREFIX + ("field '" + key + "' must be positive"));
        }
        *f.target = value.value();
    }
    return {};
}

// What the vision tower code assumes: heads divide the width, a square position table, deepstack layers
// that exist, and an output the width of the language model.
Result<void> check_vision_shape(const VisionConfig & v, const ModelConfig & config) {
    const auto fail = [](const std::string & what) { return unsupported(CONFIG_PREFIX + ("vision_config: " + what)); };
    if (v.hidden_size % v.n_heads != 0 || (v.hidden_size / v.n_heads) % 4 != 0) {
        return fail("hidden_size / num_heads must be a multiple of 4");
    }
    int64_t side = 0;
    while ((side + 1) * (side + 1) <= v.num_position_embeddings) {
        ++side;
    }
    if (side * side != v.num_position_embeddings) {
        return fail("num_position_embeddings must be a square");
    }
    if (v.out_hidden_size != config.hidden_size) {
        return fail("out_hidden_size (" + std::to_string(v.out_hidden_size) + ") must equal the text hidden_size (" +
                    std::to_string(config.hidden_size) + ")");
    }
    for (int64_t layer : v.deepstack_layers) {
        if (layer < 0 || layer >= v.depth) {
            return fail("deepstack_visual_indexes holds " + std::to_string(layer) + ", outside [0, depth)");
        }
    }
    if (static_cast<int64_t>(v.deepstack_layers.size()) > config.n_layers) {
        return fail("more deepstack_visual_indexes than text layers");
    }
    return {};
}

Result<void> parse_vision_act(const json & v) {
    auto act = optional_string(v, "hidden_act");
    TRY_STATUS(act);
    if (!act.value().empty() && act.value() != "gelu_pytorch_tanh") {
        return unsupported(CONFIG_PREFIX + ("unsupported vision_config.hidden_act '" + act.value() +
                                            "' (supported: gelu_pytorch_tanh)"));
    }
    return {};
}

// mrope_section of the text model's rope parameters: three counts of rotary frequencies summing to half the
// rotated dims (the temporal, height and width axes, interleaved).
Result<void> parse_mrope_section(const json & text, ModelConfig & config) {
    for (const char * key : {"rope_parameters", "rope_scaling"}) {
        if (is_present(text, key) && text.at(key).is_object()) {
            TRY_STATUS(read_int_list(text.at(key), "mrope_section", config.mrope_section));
        }
    }
    if (config.mrope_section.empty()) {
        return {};
    }
    int64_t sum = 0;
    for (int64_t n : config.mrope_section) {
        sum += n;
    }
    const auto rotated = static_cast<int64_t>(static_cast<double>(config.head_dim) * config.partial_rotary_factor);
    if (config.mrope_section.size() != 3 || sum * 2 != rotated) {
        return invalid_argument(CONFIG_PREFIX + ("rope mrope_section must be 3 counts summing to " +
                                                 std::to_string(rotated / 2) + " (half the rotated head dims)"));
    }
    return {};
}

}  // namespace

Result<void> parse_vision(const json & top, const json & text, ModelConfig & config) {
    if (!is_present(top, "vision_config")) {
        return {};  // text-only: positions are 1-D, whatever mrope_section says
    }
    TRY_STATUS(parse_mrope_section(text, config));
    const json & v = top.at("vision_config");
    if (!v.is_object()) {
        return invalid_argument(CONFIG_PREFIX + std::string("field 'vision_config' must be an object"));
    }
    VisionConfig vision;
    TRY_STATUS(parse_vision_sizes(v, vision));
    TRY_STATUS(parse_vision_act(v));
    TRY_STATUS(read_int_list(v, "deepstack_visual_indexes", vision.deepstack_layers));
    TRY_STATUS(check_vision_shape(vision, config));
    auto image_token = required_int(top, "image_token_id");
    TRY_STATUS(image_token);
    auto start_token = optional_int(top, "vision_start_token_id", -1);
    TRY_STATUS(start_token);
    if (image_token.value() < 0 || image_token.value() >= config.vocab_size) {
        return invalid_argument(CONFIG_PREFIX + std::string("image_token_id is outside the vocabulary"));
    }
    if (config.mrope_section.empty()) {
        return unsupported(CONFIG_PREFIX + std::string("a vision model needs the text rope's mrope_section"));
    }
    config.vision = std::move(vision);
    config.image_token_id = image_token.value();
    config.vision_start_token_id = start_token.value();
    return {};
}

}  // namespace tinkerd::model::config_json
