// GGUF tensors to Hugging Face tensors: names mapped (token_embd -> model.embed_tokens, blk.N.attn_q ->
// model.layers.N.self_attn.q_proj, ...), quantised data dequantised to F32, and the rows of llama's
// q/k projections put back in Hugging Face order (see convert.h); qwen3moe's stacked expert tensors
// [E, out, in] split into Hugging Face's per-expert "mlp.experts.E.{gate,up,down}_proj.weight" (qwen35moe's
// kept stacked); Qwen3.5's value transforms undone (qwen35.cpp), its MTP layers skipped.
#include <array>
#include <cstring>

#include "common/log.h"
#include "gguf/convert.h"
#include "gguf/dequant.h"
#include "gguf/qwen35.h"

namespace tinkerd::gguf {
namespace {

using nlohmann::json;

struct NameRow {
    const char * gguf;
    const char * hf;
};

// Per-layer names, after "blk.N." / "model.layers.N.".
constexpr std::array<NameRow, 37> LAYER_NAMES = {{
    {"attn_norm.weight", "input_layernorm.weight"},
    {"ffn_norm.weight", "post_attention_layernorm.weight"},
    {"attn_q.weight", "self_attn.q_proj.weight"},
    {"attn_k.weight", "self_attn.k_proj.weight"},
    {"attn_v.weight", "self_attn.v_proj.weight"},
    {"attn_output.weight", "self_attn.o_proj.weight"},
    {"attn_q.bias", "self_attn.q_proj.bias"},
    {"attn_k.bias", "self_attn.k_proj.bias"},
    {"attn_v.bias", "self_attn.v_proj.bias"},
    {"attn_output.bias", "self_attn.o_proj.bias"},
    {"attn_q_norm.weight", "self_attn.q_norm.weight"},
    {"attn_k_norm.weight", "self_attn.k_norm.weight"},
    {"ffn_gate.weight", "mlp.gate_proj.weight"},
    {"ffn_up.weight", "mlp.up_proj.weight"},
    {"ffn_down.weight", "mlp.down_proj.weight"},
    {"ffn_gate.bias", "mlp.gate_proj.bias"},
    {"ffn_up.bias", "mlp.up_proj.bias"},
    {"ffn_down.bias", "mlp.down_proj.bias"},
    // Mixture of experts (qwen3moe): the router, and each projection of every expert stacked [E, out, in].
    {"ffn_gate_inp.weight", "mlp.gate.weight"},
    {"ffn_gate_exps.weight", "mlp.experts.gate_proj"},
    {"ffn_up_exps.weight", "mlp.experts.up_proj"},
    {"ffn_down_exps.weight", "mlp.experts.down_proj"},
    {"ffn_gate_up_exps.weight", "mlp.experts.gate_up_proj"},  // --fuse-gate-up-exps: [E, 2F, C], gate first
    // Qwen3.5 (qwen35, qwen35moe): Gated DeltaNet mixers, the second norm, the shared expert and its gate.
    {"post_attention_norm.weight", "post_attention_layernorm.weight"},
    {"attn_qkv.weight", "linear_attn.in_proj_qkv.weight"},
    {"attn_gate.weight", "linear_attn.in_proj_z.weight"},
    {"ssm_alpha.weight", "linear_attn.in_proj_a.weight"},
    {"ssm_beta.weight", "linear_attn.in_proj_b.weight"},
    {"ssm_conv1d.weight", "linear_attn.conv1d.weight"},
    {"ssm_dt.bias", "linear_attn.dt_bias"},
    {"ssm_a", "linear_attn.A_log"},
    {"ssm_norm.weight", "linear_attn.norm.weight"},
    {"ssm_out.weight", "linear_attn.out_proj.weight"},
    {"ffn_gate_inp_shexp.weight", "mlp.shared_expert_gate.weight"},
    {"ffn_gate_shexp.weight", "mlp.shared_expert.gate_proj.weight"},
    {"ffn_up_shexp.weight", "mlp.shared_expert.up_proj.weight"},
    {"ffn_down_shexp.weight", "mlp.shared_expert.down_proj.weight"},
}};

}  // namespace

std::string hf_tensor_name(const std::string & name, int64_t n_layers) {
    if (name == "token_embd.weight")
        return "model.embed_tokens.weight";
    if (name == "output_norm.weight")
        return "model.norm.weight";
    if (name == "output.weight")
        return "lm_head.weight";
    if (name.rfind("blk.", 0) != 0)
        return "";
    const size_t dot = name.find('.', 4);
    if (dot == std::string::npos || dot == 4 || name.find_first_not_of("0123456789", 4) != dot || dot - 4 > 6) {
        return "";
    }
    const std::string layer = name.substr(4, dot - 4);
    if (std::stoll(layer) >= n_layers)
        return "";
    const std::string rest = name.substr(dot + 1);
    for (const NameRow & row : LAYER_NAMES) {
        if (rest == row.gguf)
            return "model.layers." + layer + "." + row.hf;
    }
    return "";
}

namespace {

// llama.cpp's converter interleaves each head's two rotary halves for the llama architecture: GGUF
// row (head h, 2i + j) holds Hugging Face row (h, j*D/2 + i). This puts the rows back.
// bytes: [heads*D, row_bytes] -> the same shape in Hugging Face order.
Result<void> unpermute_rows(std::vector<uint8_t> & bytes, int64_t heads, int64_t head_dim, const std::string & name) {
    const int64_t rows = heads * head_dim;
    if (head_dim % 2 != 0 || rows == 0 || bytes.size() % static_cast<size_t>(rows) != 0) {
        return invalid_argument("tensor '" + name + "' does not have " + std::to_string(rows) + " rows");
    }
    const size_t row_bytes = bytes.size() / static_cast<size_t>(rows);
    const int64_t half = head_dim / 2;
    std::vector<uint8_t> out(bytes.size());
    for (int64_t h = 0; h < heads; ++h) {
        for (int64_t i = 0; i < half; ++i) {
            for (int64_t j = 0; j < 2; ++j) {
                const int64_t src = h * head_dim + 2 * i + j, dst = h * head_dim + j * half + i;
                std::memcpy(out.data() + dst * row_bytes, bytes.data() + src * row_bytes, row_bytes);
            }
        }
    }
    bytes = std::move(out);
    return {};
}

// One tensor's data in a safetensors dtype: plain types copied, quantised ones dequantised to F32, or with
// keep their raw blocks as U8 (blocks_shape) where the type is kept.
Result<model::OwnedTensor> tensor_data(const TensorInfo & t, bool keep, bool & quantised) {
    model::OwnedTensor out;
    out.shape = t.shape;
    if (t.type == GgmlType::F16 || t.type == GgmlType::BF16) {
        out.dtype = t.type == GgmlType::F16 ? model::DType::F16 : model::DType::BF16;
        out.bytes.assign(t.data, t.data + t.n_bytes);
        return out;
    }
    quantised = quantised || t.type != GgmlType::F32;
    if (keep && can_keep_quantised(t.type) && t.shape.size() >= 2) {
        out.dtype = model::DType::U8;
        out.shape = blocks_shape(t);
        out.bytes.assign(t.data, t.data + t.n_bytes);
        return out;
    }
    out.dtype = model::DType::F32;
    out.bytes.resize(static_cast<size_t>(t.numel()) * sizeof(float));
    auto status = dequantize(t.type, t.data, t.n_bytes, t.numel(), reinterpret_cast<float *>(out.bytes.data()));
    if (!status.ok()) {
        return invalid_argument("tensor '" + t.name + "': " + status.error().message);
    }
    return out;
}

bool is_llama_qk(const std::string & arch, const std::string & name) {
    const auto ends_with = [&](const char * s) {
        const std::string suffix(s);
        return name.size() > suffix.size() && name.compare(name.size() - suffix.size(), suffix.size(), suffix) == 0;
    };
    return arch == "llama" && (ends_with(".attn_q.weight") || ends_with(".attn_q.bias") ||
                               ends_with(".attn_k.weight") || ends_with(".attn_k.bias"));
}

// Heads of a llama q/k tensor (to undo the permutation), 0 for every other tensor.
int64_t permuted_heads(const std::string & arch, const std::string & name, const json & config) {
    if (!is_llama_qk(arch, name))
        return 0;
    const auto ends_with = [&](const char * s) {
        const std::string suffix(s);
        return name.size() > suffix.size() && name.compare(name.size() - suffix.size(), suffix.size(), suffix) == 0;
    };
    if (ends_with(".attn_q.weight") || ends_with(".attn_q.bias"))
        return config["num_attention_heads"].get<int64_t>();
    if (ends_with(".attn_k.weight") || ends_with(".attn_k.bias"))
        return config["num_key_value_heads"].get<int64_t>();
    return 0;
}

bool is_stacked_experts(const std::string & hf_name) {
    const size_t at = hf_name.rfind(".mlp.experts.");
    if (at == std::string::npos)
        return false;
    const std::string rest = hf_name.substr(at + 13);
    return rest == "gate_proj" || rest == "up_proj" || rest == "down_proj";
}

// The [E, out, in] shape a stacked expert tensor must have: down_proj maps the expert width back to hidden.
std::vector<int64_t> expected_expert_shape(const std::string & hf_name, const json & config) {
    const int64_t experts = config.value("num_experts", int64_t{0});
    const int64_t hidden = config["hidden_size"].get<int64_t>();
    const int64_t width = config.value("moe_intermediate_size", int64_t{0});
    if (hf_name.size() > 9 && hf_name.compare(hf_name.size() - 9, 9, "down_proj") == 0) {
        return {experts, hidden, width};
    }
    return {experts, width, hidden};
}

// Splits one stacked expert tensor "<prefix>.experts.<proj>" [E, out, in] into E tensors
// "<prefix>.experts.<e>.<proj>.weight" [out, in] (the stacked copy is dropped on return).
Result<void> split_experts(const std::string & hf_name, model::OwnedTensor stacked, const json & config,
                           std::map<std::string, model::OwnedTensor> & out) {
    const std::vector<int64_t> want = expected_expert_shape(hf_name, config);
    if (stacked.shape != want) {
        const auto dims = [](const std::vector<int64_t> & v) { return json(v).dump(); };
        return invalid_argument("tensor '" + hf_name + "' has shape " + dims(stacked.shape) + ", expected " +
                                dims(want) + " (num_experts, out, in)");
    }
    const size_t per_expert = stacked.bytes.size() / static_cast<size_t>(want[0]);
    const size_t dot = hf_name.rfind('.');
    const std::string prefix = hf_name.substr(0, dot + 1), proj = hf_name.substr(dot + 1);
    for (int64_t e = 0; e < want[0]; ++e) {
        model::OwnedTensor expert;
        expert.dtype = stacked.dtype;
        expert.shape = {want[1], want[2]};
        const uint8_t * src = stacked.bytes.data() + static_cast<size_t>(e) * per_expert;
        expert.bytes.assign(src, src + per_expert);
        out.emplace(prefix + std::to_string(e) + "." + proj + ".weight", std::move(expert));
    }
    return {};
}

}  // namespace

bool kept_in_place(const GgufFile & file, const TensorInfo & t) {
    auto arch = file.get_string("general.architecture");
    bool needs_f32 = false;
    return arch.ok() && can_keep_quantised(t.type) && t.shape.size() >= 2 && !is_llama_qk(*arch, t.name) &&
           (!qwen35_transformed(file, t.name, needs_f32) || qwen35_tiled_columns(file, t.name)) &&
           !qwen35_mtp_tensor(file, t.name);
}

Result<std::map<std::string, model::OwnedTensor>> hf_tensors(const GgufFile & file, const json & config,
                                                             bool & quantised, bool keep_quantised) {
    auto arch = file.get_string("general.architecture");
    TRY_STATUS(arch);
    const int64_t n_layers = config["num_hidden_layers"].get<int64_t>();
    const int64_t head_dim = config["head_dim"].get<int64_t>();
    std::map<std::string, model::OwnedTensor> tensors;
    quantised = false;
    size_t done = 0, skipped = 0;
    for (const TensorInfo & t : file.tensors()) {
        if (qwen35_mtp_tensor(file, t.name)) {
            ++skipped;  // multi-token prediction: not part of the model tinkerd runs
            continue;
        }
        const std::string name = hf_tensor_name(t.name, n_layers);
        if (name.empty()) {
            return unsupported(file.name() + ": tensor '" + t.name + "' has no counterpart in " +
                               config["architectures"][0].get<std::string>());
        }
        if (keep_quantised && kept_in_place(file, t)) {
            quantised = true;
            continue;  // used where it lies (external_manifest)
        }
        bool needs_f32 = false;  // Qwen3.5's arithmetic / column transforms need the values
        const bool transformed = qwen35_transformed(file, t.name, needs_f32);
        auto data = tensor_data(t, keep_quantised && !needs_f32, quantised);
        TRY_STATUS(data);
        if (const int64_t heads = permuted_heads(*arch, t.name, config); heads > 0) {
            TRY_STATUS(unpermute_rows(data->bytes, heads, head_dim, t.name));
        }
        if (transformed) {
            TRY_STATUS(undo_qwen35(file, t.name, *data));
        }
        if (is_stacked_experts(name) && *arch == "qwen3moe") {  // qwen35moe's stay stacked (the engine takes both)
            TRY_STATUS(split_experts(name, std::move(data).value(), config, tensors));
        } else {
            tensors.emplace(name, std::move(data).value());
        }
        if (++done % 64 == 0) {
            LOG_INF("gguf", "dequantised %zu of %zu tensors", done, file.tensors().size());
        }
    }
    if (skipped > 0) {
        LOG_INF("gguf", "%s: skipped %zu multi-token-prediction tensors", file.name().c_str(), skipped);
    }
    return tensors;
}

}  // namespace tinkerd::gguf
