// Keeping a GGUF's quantised weights as they are (--base-quant): which types the engine multiplies in
// quantised form, the U8 block shape they are loaded with, the choice AUTO makes, and the manifest of the
// tensors used in place in the file (model/safetensors.h EXTERNAL_WEIGHTS).
#include <algorithm>

#include "common/log.h"
#include "gguf/convert.h"
#include "gguf/dequant.h"
#include "gguf/qwen35.h"

namespace tinkerd::gguf {

bool parse_base_quant(const std::string & word, BaseQuant & out) {
    if (word == "auto" || word == "gguf" || word == "dequant") {
        out = word == "auto" ? BaseQuant::AUTO : word == "gguf" ? BaseQuant::GGUF : BaseQuant::DEQUANT;
        return true;
    }
    return false;
}

bool can_keep_quantised(GgmlType type) {
    const std::vector<GgmlType> & kept = block_quantised_types();
    return std::find(kept.begin(), kept.end(), type) != kept.end();
}

std::vector<int64_t> blocks_shape(const TensorInfo & t) {
    BlockLayout layout;
    ggml_block_layout(static_cast<uint32_t>(t.type), layout);
    std::vector<int64_t> shape(t.shape.begin(), t.shape.end() - 1);  // the reader checked whole blocks per row
    shape.push_back(t.shape.back() / layout.elements);
    shape.push_back(static_cast<int64_t>(layout.bytes));
    return shape;
}

BaseQuant choose_base_quant(const GgufFile & file, BaseQuant asked, uint64_t physical_bytes) {
    if (asked != BaseQuant::AUTO) {
        return asked;
    }
    uint64_t bf16_bytes = 0;
    bool quantised = false;
    for (const TensorInfo & t : file.tensors()) {
        bf16_bytes += static_cast<uint64_t>(t.numel()) * 2;
        quantised = quantised || can_keep_quantised(t.type);
    }
    const bool keep = quantised && bf16_bytes > physical_bytes / 2;
    LOG_INF("gguf", "--base-quant auto: %s weights take %.1f GiB in bf16 (memory %.1f GiB): %s", file.name().c_str(),
            bf16_bytes / 1073741824.0, physical_bytes / 1073741824.0,
            keep ? "keeping the quantised blocks" : "dequantising");
    return keep ? BaseQuant::GGUF : BaseQuant::DEQUANT;
}

Result<nlohmann::json> external_manifest(const GgufFile & file, const nlohmann::json & config,
                                         const std::string & source_path) {
    const int64_t n_layers = config["num_hidden_layers"].get<int64_t>();
    nlohmann::json tensors = nlohmann::json::object();
    for (const TensorInfo & t : file.tensors()) {
        if (!kept_in_place(file, t)) {
            continue;
        }
        const std::string name = hf_tensor_name(t.name, n_layers);
        if (name.empty()) {
            return unsupported(file.name() + ": tensor '" + t.name + "' has no counterpart in " +
                               config["architectures"][0].get<std::string>());
        }
        const std::string suffix = qwen35_tiled_columns(file, t.name) ? kTiledColumnsSuffix : "";
        tensors[name + suffix] = {{"dtype", "U8"},
                                  {"shape", blocks_shape(t)},
                                  {"offset", file.file_offset(t)},
                                  {"n_bytes", t.n_bytes},
                                  {"ggml_type", ggml_type_name(static_cast<uint32_t>(t.type))}};
    }
    return nlohmann::json{{"file", source_path}, {"size", file.byte_size()}, {"tensors", tensors}};
}

}  // namespace tinkerd::gguf
