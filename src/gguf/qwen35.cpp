// Qwen3.5 GGUFs (see qwen35.h): config fields from `<arch>.ssm.*` / `<arch>.attention.recurrent_layers`, and
// the inverse of llama.cpp's value transforms, read from its convert_hf_to_gguf.py (Qwen3NextModel and
// _LinearAttentionVReorderBase, llama-cpp-python 0.3.36): V heads tiled -> grouped, A -> log(-A), norms -1.
#include "gguf/qwen35.h"

#include <cmath>
#include <cstring>

#include "common/log.h"
#include "gguf/convert.h"
#include "gguf/dequant.h"

namespace tinkerd::gguf {
namespace {

using nlohmann::json;

// The linear-attention sizes as the file states them.
struct Linear {
    int64_t k_heads = 0, v_heads = 0, k_dim = 0, v_dim = 0;
};

Result<int64_t> positive(const GgufFile & file, const std::string & key) {
    auto v = file.get_int(key);
    TRY_STATUS(v);
    if (*v <= 0) {
        return invalid_argument(file.name() + ": " + key + " must be positive, got " + std::to_string(*v));
    }
    return v;
}

Result<Linear> linear_sizes(const GgufFile & file, const std::string & a) {
    auto hk = positive(file, a + ".ssm.group_count");
    auto hv = positive(file, a + ".ssm.time_step_rank");
    auto dk = positive(file, a + ".ssm.state_size");
    auto inner = positive(file, a + ".ssm.inner_size");
    for (const Result<int64_t> * r : {&hk, &hv, &dk, &inner}) {
        TRY_STATUS(*r);
    }
    constexpr int64_t LIMIT = int64_t{1} << 24;  // keeps every product of two sizes far from overflow
    if (*hk > LIMIT || *hv > LIMIT || *dk > LIMIT || *inner > LIMIT) {
        return invalid_argument(file.name() + ": " + a + ".ssm.* sizes above 2^24 are not supported");
    }
    if (*inner % *hv != 0 || *hv % *hk != 0) {
        return invalid_argument(file.name() + ": " + a + ".ssm.inner_size " + std::to_string(*inner) +
                                " / time_step_rank " + std::to_string(*hv) + " / group_count " + std::to_string(*hk) +
                                " do not divide");
    }
    return Linear{*hk, *hv, *dk, *inner / *hv};
}

// The tensor name after "blk.N." (or the whole name for non-layer tensors).
std::string layer_part(const std::string & name) {
    if (name.rfind("blk.", 0) != 0)
        return name;
    const size_t dot = name.find('.', 4);
    return dot == std::string::npos ? name : name.substr(dot + 1);
}

enum class Fix { NONE, V_ROWS, V_COLS, NORM, A_LOG, CONV };

// What the converter did to a tensor, and the V-head size of its reordered rows/columns.
Fix fix_of(const std::string & part, int64_t & head) {
    head = 1;
    if (part == "attn_norm.weight" || part == "post_attention_norm.weight" || part == "attn_q_norm.weight" ||
        part == "attn_k_norm.weight" || part == "output_norm.weight")
        return Fix::NORM;  // Qwen3_5RMSNorm scales by (1 + w): the file holds 1 + w
    if (part == "ssm_a")
        return Fix::A_LOG;  // the file holds -exp(A_log), V heads tiled
    if (part == "ssm_conv1d.weight")
        return Fix::CONV;  // [C, 1, K] squeezed to [C, K], the V channels tiled
    if (part == "ssm_alpha.weight" || part == "ssm_beta.weight" || part == "ssm_dt.bias")
        return Fix::V_ROWS;
    head = 0;  // V head size: the caller's v_dim
    if (part == "attn_qkv.weight" || part == "attn_gate.weight")
        return Fix::V_ROWS;
    if (part == "ssm_out.weight")
        return Fix::V_COLS;
    return Fix::NONE;
}

// Grouped-by-K-head index of tiled position p: llama.cpp stores V head (k, j) (K head k, j-th of its r) at
// tiled slot j·HK + k. Units of `unit` elements / rows.
void untile(const uint8_t * src, uint8_t * dst, const Linear & s, size_t unit_bytes) {
    const int64_t r = s.v_heads / s.k_heads;
    for (int64_t k = 0; k < s.k_heads; ++k) {
        for (int64_t j = 0; j < r; ++j) {
            std::memcpy(dst + static_cast<size_t>(k * r + j) * unit_bytes,
                        src + static_cast<size_t>(j * s.k_heads + k) * unit_bytes, unit_bytes);
        }
    }
}

// Puts the last HV·head rows of data (rows of equal byte size) back in grouped order.
Result<void> untile_rows(model::OwnedTensor & data, const Linear & s, int64_t head, const std::string & name) {
    const int64_t rows = data.shape.empty() ? 0 : data.shape[0];
    const int64_t v_rows = s.v_heads * head;
    if (rows < v_rows || rows == 0 || data.bytes.size() % static_cast<size_t>(rows) != 0) {
        return invalid_argument("tensor '" + name + "' has " + std::to_string(rows) + " rows, expected at least " +
                                std::to_string(v_rows) + " V-head rows");
    }
    const size_t row_bytes = data.bytes.size() / static_cast<size_t>(rows);
    uint8_t * v = data.bytes.data() + static_cast<size_t>(rows - v_rows) * row_bytes;
    const std::vector<uint8_t> tiled(v, v + static_cast<size_t>(v_rows) * row_bytes);
    untile(tiled.data(), v, s, static_cast<size_t>(head) * row_bytes);
    return {};
}

// The columns of a [rows, HV·Dv] matrix back in grouped order: plain values (F32, F16, BF16), or U8 blocks
// [rows, blocks, block bytes] when each V head is a whole number of blocks (whole blocks move).
Result<void> untile_cols(model::OwnedTensor & data, const Linear & s, const std::string & name) {
    const bool blocks = data.dtype == model::DType::U8;
    const int64_t units = data.shape.size() == (blocks ? 3u : 2u) ? data.shape[1] : 0;  // columns, or blocks
    if (units == 0 || units % s.v_heads != 0 || (!blocks && units != s.v_heads * s.v_dim)) {
        return invalid_argument("tensor '" + name + "' is not a [rows, " + std::to_string(s.v_heads * s.v_dim) +
                                "] matrix whose V heads are whole blocks");
    }
    const size_t row_bytes = data.bytes.size() / static_cast<size_t>(data.shape[0]);
    std::vector<uint8_t> row(row_bytes);
    for (int64_t i = 0; i < data.shape[0]; ++i) {
        uint8_t * p = data.bytes.data() + static_cast<size_t>(i) * row_bytes;
        std::memcpy(row.data(), p, row_bytes);
        untile(row.data(), p, s, row_bytes / static_cast<size_t>(s.v_heads));
    }
    return {};
}

Result<float *> f32_values(model::OwnedTensor & data, const std::string & name) {
    if (data.dtype != model::DType::F32) {
        return invalid_argument("tensor '" + name + "' must be F32 to undo its transform, got " +
                                model::dtype_name(data.dtype));
    }
    return reinterpret_cast<float *>(data.bytes.data());
}

// A = -exp(A_log) -> A_log. The log is taken in double and rounded once: where exp is many-to-one in float32
// (|A_log| small) the original bits are gone, and this picks the float whose exp is nearest A, so that
// float32 exp(result) gives A back (the only value the model uses).
Result<void> undo_a(model::OwnedTensor & data, const std::string & name) {
    auto v = f32_values(data, name);
    TRY_STATUS(v);
    for (size_t i = 0; i < data.bytes.size() / sizeof(float); ++i) {
        if (!((*v)[i] < 0.0f)) {
            return invalid_argument("tensor '" + name + "' holds " + std::to_string((*v)[i]) + ", not -exp(A_log) < 0");
        }
        (*v)[i] = static_cast<float>(std::log(-static_cast<double>((*v)[i])));
    }
    return {};
}

// 1 + w -> w: exact (Sterbenz) wherever 1 + w lies in [0.5, 2], and 1 + result == the file's value in float32.
Result<void> undo_norm(model::OwnedTensor & data, const std::string & name) {
    auto v = f32_values(data, name);
    TRY_STATUS(v);
    for (size_t i = 0; i < data.bytes.size() / sizeof(float); ++i) {
        (*v)[i] -= 1.0f;
    }
    return {};
}

// F16 / BF16 to F32 (exact), so the arithmetic inverses apply.
void widen(model::OwnedTensor & data) {
    if (data.dtype != model::DType::F16 && data.dtype != model::DType::BF16)
        return;
    const size_t n = data.bytes.size() / 2;
    std::vector<uint8_t> out(n * sizeof(float));
    for (size_t i = 0; i < n; ++i) {
        uint16_t h;
        std::memcpy(&h, data.bytes.data() + 2 * i, 2);
        const float f = data.dtype == model::DType::BF16 ? bf16_to_float(h) : half_to_float(h);
        std::memcpy(out.data() + 4 * i, &f, 4);
    }
    data.dtype = model::DType::F32;
    data.bytes = std::move(out);
}

}  // namespace

bool is_qwen35(const std::string & arch) {
    return arch == "qwen35" || arch == "qwen35moe";
}

int64_t qwen35_mtp_layers(const GgufFile & file, const std::string & arch) {
    auto n = file.get_int(arch + ".nextn_predict_layers");
    return n.ok() && *n > 0 ? *n : 0;
}

bool qwen35_mtp_tensor(const GgufFile & file, const std::string & gguf_name) {
    auto arch = file.get_string("general.architecture");
    if (!arch.ok() || !is_qwen35(*arch) || gguf_name.rfind("blk.", 0) != 0)
        return false;
    const int64_t mtp = qwen35_mtp_layers(file, *arch);
    auto blocks = file.get_int(*arch + ".block_count");
    const size_t dot = gguf_name.find('.', 4);
    if (mtp == 0 || !blocks.ok() || dot == std::string::npos || dot == 4 || dot - 4 > 6 ||
        gguf_name.find_first_not_of("0123456789", 4) != dot)
        return false;
    return std::stoll(gguf_name.substr(4, dot - 4)) >= *blocks - mtp;
}

bool qwen35_transformed(const GgufFile & file, const std::string & gguf_name, bool & needs_f32) {
    needs_f32 = false;
    auto arch = file.get_string("general.architecture");
    int64_t head = 0;
    const Fix fix = arch.ok() && is_qwen35(*arch) ? fix_of(layer_part(gguf_name), head) : Fix::NONE;
    if (fix == Fix::NONE)
        return false;
    needs_f32 = fix == Fix::NORM || fix == Fix::A_LOG || fix == Fix::CONV;
    if (fix == Fix::V_ROWS || fix == Fix::V_COLS) {
        auto sizes = linear_sizes(file, *arch);  // equal K and V head counts: nothing was reordered
        if (fix == Fix::V_COLS) {                // whole blocks per V head move as blocks; else the values are needed
            const TensorInfo * t = file.find_tensor(gguf_name);
            BlockLayout layout;
            needs_f32 = !sizes.ok() || t == nullptr || !ggml_block_layout(static_cast<uint32_t>(t->type), layout) ||
                        sizes->v_dim % layout.elements != 0;
        }
        return !sizes.ok() || sizes->k_heads != sizes->v_heads;
    }
    return true;
}

bool qwen35_tiled_columns(const GgufFile & file, const std::string & gguf_name) {
    bool needs_f32 = false;
    int64_t head = 0;
    const TensorInfo * t = file.find_tensor(gguf_name);
    return t != nullptr && can_keep_quantised(t->type) && fix_of(layer_part(gguf_name), head) == Fix::V_COLS &&
           qwen35_transformed(file, gguf_name, needs_f32) && needs_f32;
}

Result<void> undo_qwen35(const GgufFile & file, const std::string & gguf_name, model::OwnedTensor & data) {
    bool needs_f32 = false;
    if (!qwen35_transformed(file, gguf_name, needs_f32))
        return {};
    auto sizes = linear_sizes(file, file.get_string("general.architecture").value());
    TRY_STATUS(sizes);
    int64_t head = 0;
    const Fix fix = fix_of(layer_part(gguf_name), head);
    head = head == 0 ? sizes->v_dim : head;
    const bool tiled = sizes->k_heads != sizes->v_heads;
    if (fix == Fix::NORM || fix == Fix::A_LOG) {
        widen(data);  // arithmetic: F16 / BF16 values to F32 (exact)
    }
    switch (fix) {
        case Fix::NORM:
            return undo_norm(data, gguf_name);
        case Fix::A_LOG:
            if (tiled) {
                TRY_STATUS(untile_rows(data, *sizes, 1, gguf_name));
            }
            return undo_a(data, gguf_name);
        case Fix::CONV:
            if (data.shape.size() != 2) {
                return invalid_argument("tensor '" + gguf_name + "' is not a [channels, kernel] matrix");
            }
            if (tiled) {
                TRY_STATUS(untile_rows(data, *sizes, sizes->v_dim, gguf_name));
            }
            data.shape = {data.shape[0], 1, data.shape[1]};  // Hugging Face's Conv1d weight [C, 1, K]
            return {};
        case Fix::V_ROWS:
            return untile_rows(data, *sizes, head, gguf_name);
        case Fix::V_COLS:
            return untile_cols(data, *sizes, gguf_name);
        case Fix::NONE:
            break;
    }
    return {};
}

namespace {

// layer_types from `<arch>.attention.recurrent_layers` (cut to the model's layers), else the interval.
Result<void> add_layer_types(const GgufFile & file, const std::string & a, int64_t layers, json & config) {
    const Value * recurrent = file.find(a + ".attention.recurrent_layers");
    if (recurrent == nullptr) {
        auto interval = positive(file, a + ".full_attention_interval");
        TRY_STATUS(interval);
        config["full_attention_interval"] = *interval;
        return {};
    }
    if (recurrent->type != ValueType::ARRAY || static_cast<int64_t>(recurrent->numbers.size()) < layers) {
        return invalid_argument(file.name() + ": " + a + ".attention.recurrent_layers must list at least " +
                                std::to_string(layers) + " booleans");
    }
    json types = json::array();
    for (int64_t l = 0; l < layers; ++l) {
        types.push_back(recurrent->numbers[static_cast<size_t>(l)] != 0 ? "linear_attention" : "full_attention");
    }
    config["layer_types"] = types;
    return {};
}

// qwen35moe: every layer sparse, a shared expert behind a sigmoid gate (transformers always renormalises).
Result<void> add_expert_fields(const GgufFile & file, const std::string & a, json & config) {
    auto experts = positive(file, a + ".expert_count");
    auto used = positive(file, a + ".expert_used_count");
    auto width = positive(file, a + ".expert_feed_forward_length");
    for (const Result<int64_t> * r : {&experts, &used, &width}) {
        TRY_STATUS(*r);
    }
    if (*used > *experts) {
        return invalid_argument(file.name() + ": " + a + ".expert_used_count exceeds " + a + ".expert_count");
    }
    int64_t shared = 0;
    if (file.find(a + ".expert_shared_feed_forward_length")) {
        auto s = positive(file, a + ".expert_shared_feed_forward_length");
        TRY_STATUS(s);
        shared = *s;
    } else if (const TensorInfo * t = file.find_tensor("blk.0.ffn_gate_shexp.weight"); t && t->shape.size() == 2) {
        shared = t->shape[0];
    }
    config["num_experts"] = *experts;
    config["num_experts_per_tok"] = *used;
    config["moe_intermediate_size"] = *width;
    config["shared_expert_intermediate_size"] = shared;
    config["norm_topk_prob"] = true;
    config["output_router_logits"] = false;
    if (config.value("intermediate_size", int64_t{0}) <= 0) {
        config["intermediate_size"] = *width;  // unused (every layer is sparse); HF wants a value
    }
    return {};
}

}  // namespace

Result<void> add_qwen35_fields(const GgufFile & file, const std::string & a, json & config) {
    const int64_t layers = config["num_hidden_layers"].get<int64_t>() - qwen35_mtp_layers(file, a);
    if (layers <= 0) {
        return invalid_argument(file.name() + ": " + a + ".nextn_predict_layers leaves no layers");
    }
    if (layers != config["num_hidden_layers"].get<int64_t>()) {
        LOG_INF("gguf", "%s: skipping %lld multi-token-prediction layer(s) (not used by tinkerd)", file.name().c_str(),
                static_cast<long long>(config["num_hidden_layers"].get<int64_t>() - layers));
    }
    config["num_hidden_layers"] = layers;
    config["model_type"] = a == "qwen35moe" ? "qwen3_5_moe_text" : "qwen3_5_text";
    TRY_STATUS(add_layer_types(file, a, layers, config));
    auto sizes = linear_sizes(file, a);
    TRY_STATUS(sizes);
    auto kernel = positive(file, a + ".ssm.conv_kernel");
    TRY_STATUS(kernel);
    config["linear_num_key_heads"] = sizes->k_heads;
    config["linear_num_value_heads"] = sizes->v_heads;
    config["linear_key_head_dim"] = sizes->k_dim;
    config["linear_value_head_dim"] = sizes->v_dim;
    config["linear_conv_kernel_dim"] = *kernel;
    config["attn_output_gate"] = true;
    const int64_t head_dim = config["head_dim"].get<int64_t>();
    auto rotary = file.find(a + ".rope.dimension_count") ? positive(file, a + ".rope.dimension_count")
                                                         : Result<int64_t>(head_dim / 4);
    TRY_STATUS(rotary);
    if (*rotary > head_dim) {
        return invalid_argument(file.name() + ": " + a + ".rope.dimension_count exceeds the head dim");
    }
    const double partial = static_cast<double>(*rotary) / static_cast<double>(head_dim);
    config["partial_rotary_factor"] = partial;
    config["rope_parameters"] = {
        {"rope_type", "default"}, {"rope_theta", config["rope_theta"]}, {"partial_rotary_factor", partial}};
    return a == "qwen35moe" ? add_expert_fields(file, a, config) : Result<void>{};
}

}  // namespace tinkerd::gguf
