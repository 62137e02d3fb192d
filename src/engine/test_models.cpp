// Tiny random model directories for the engine tests (see test_models.h): seeded normal weights
// scaled per tensor kind, written with model::write_safetensors.
#include "test_models.h"

#include <cmath>
#include <cstdlib>
#include <cstring>
#include <filesystem>
#include <fstream>
#include <random>
#include <stdexcept>
#include <vector>

#include <nlohmann/json.hpp>

namespace tinkerd::testing {

namespace fs = std::filesystem;

ScopedTempDir::ScopedTempDir(const std::string & prefix) {
    std::string pattern = (fs::temp_directory_path() / (prefix + "_XXXXXX")).string();
    if (mkdtemp(pattern.data()) == nullptr) {
        throw std::runtime_error("mkdtemp failed for " + pattern);
    }
    path_ = pattern;
}

ScopedTempDir::~ScopedTempDir() {
    std::error_code ec;
    fs::remove_all(path_, ec);
}

namespace {

struct Dims {
    const char * architecture;
    int64_t vocab, hidden, inter, layers, heads, kv_heads, head_dim;
    bool explicit_head_dim, tied, bias, qk_norm;
    int64_t experts = 0, top_k = 0, moe_inter = 0;  // layer 0 sparse when experts > 0 (every layer when hybrid)
    bool hybrid = false;                            // Qwen3.5: layer 0 linear attention, layer 1 gated full
    int64_t shared_inter = 0;                       // Qwen3.5-MoE's shared expert
    bool is_sparse(int64_t layer) const { return experts > 0 && (layer == 0 || hybrid); }
};

// Qwen3.5's Gated DeltaNet sizes of the tiny hybrid: HK, HV, Dk, Dv, conv kernel.
constexpr int64_t kLinKHeads = 2, kLinVHeads = 4, kLinKDim = 4, kLinVDim = 4, kLinConv = 4;

Dims narrow_dims_of(TinyFamily family) {
    switch (family) {
        case TinyFamily::LLAMA:
            return {"LlamaForCausalLM", 61, 16, 24, 2, 4, 2, 4, false, false, false, false};
        case TinyFamily::QWEN3:
            return {"Qwen3ForCausalLM", 53, 16, 20, 2, 4, 2, 8, true, true, false, true};
        case TinyFamily::QWEN2:
            return {"Qwen2ForCausalLM", 47, 12, 20, 2, 3, 1, 4, false, false, true, false};
        case TinyFamily::QWEN3_MOE:
            return {"Qwen3MoeForCausalLM", 53, 16, 20, 2, 4, 2, 8, true, false, false, true, 4, 2, 12};
        case TinyFamily::QWEN3_5:
            return {"Qwen3_5ForCausalLM", 53, 16, 20, 2, 4, 2, 8, true, true, false, true, 0, 0, 0, true};
        case TinyFamily::QWEN3_5_MOE:
            return {"Qwen3_5MoeForCausalLM", 53, 16, 20, 2, 4, 2, 8, true, false, false, true, 4, 2, 12, true, 10};
    }
    throw std::runtime_error("unknown tiny family");
}

// wide: every product's input a multiple of 256 (the K-quants' block), for the quantised-weight tests.
Dims dims_of(TinyFamily family, bool wide) {
    Dims d = narrow_dims_of(family);
    if (wide) {
        d.hidden = d.inter = 256;
        d.moe_inter = d.experts > 0 ? 256 : 0;
        d.head_dim = 64;
        d.explicit_head_dim = true;
    }
    return d;
}

uint16_t to_bf16_bits(float f) {
    uint32_t bits = 0;
    std::memcpy(&bits, &f, sizeof(bits));
    const uint32_t rounding = 0x7fffu + ((bits >> 16) & 1u);  // round to nearest even (no NaNs here)
    return static_cast<uint16_t>((bits + rounding) >> 16);
}

model::OwnedTensor make_tensor(const std::vector<double> & values, std::vector<int64_t> shape, model::DType dtype) {
    model::OwnedTensor t{dtype, std::move(shape), {}};
    if (dtype == model::DType::F32) {
        t.bytes.resize(values.size() * 4);
        for (size_t i = 0; i < values.size(); ++i) {
            const float f = static_cast<float>(values[i]);
            std::memcpy(t.bytes.data() + 4 * i, &f, 4);
        }
    } else if (dtype == model::DType::BF16) {
        t.bytes.resize(values.size() * 2);
        for (size_t i = 0; i < values.size(); ++i) {
            const uint16_t b = to_bf16_bits(static_cast<float>(values[i]));
            std::memcpy(t.bytes.data() + 2 * i, &b, 2);
        }
    } else {
        throw std::runtime_error("tiny models are F32 or BF16");
    }
    return t;
}

// The linear_attn.* tensors of a Qwen3.5 linear-attention layer, by add(name, shape, std, offset).
template <typename Add>
void add_linear_attention(Add & add, const std::string & p, int64_t hidden) {
    const int64_t key_dim = kLinKHeads * kLinKDim, value_dim = kLinVHeads * kLinVDim;
    const int64_t conv_dim = 2 * key_dim + value_dim;
    const double in_std = 1.0 / std::sqrt(static_cast<double>(hidden));
    add(p + "in_proj_qkv.weight", {conv_dim, hidden}, in_std, 0.0);
    add(p + "in_proj_z.weight", {value_dim, hidden}, in_std, 0.0);
    add(p + "in_proj_b.weight", {kLinVHeads, hidden}, in_std, 0.0);
    add(p + "in_proj_a.weight", {kLinVHeads, hidden}, in_std, 0.0);
    add(p + "conv1d.weight", {conv_dim, 1, kLinConv}, 0.5, 0.0);
    add(p + "dt_bias", {kLinVHeads}, 0.3, 0.5);
    add(p + "A_log", {kLinVHeads}, 0.5, 0.0);
    add(p + "norm.weight", {kLinVDim}, 0.1, 1.0);
    add(p + "out_proj.weight", {hidden, value_dim}, 1.0 / std::sqrt(static_cast<double>(value_dim)), 0.0);
}

// The router and experts of a sparse layer under p ("model.layers.0.mlp."): one tensor per expert (the Qwen3-MoE
// Hub layout), or for Qwen3.5-MoE the fused gate_up_proj [E, 2F, C] / down_proj [E, C, F] its checkpoints
// hold, plus its shared expert and the shared expert's gate.
template <typename Add>
void add_experts(Add & add, const std::string & p, const Dims & d) {
    const auto inv_sqrt = [](int64_t n) { return 1.0 / std::sqrt(static_cast<double>(n)); };
    add(p + "gate.weight", {d.experts, d.hidden}, 1.0, 0.0);  // spread-out routing probabilities
    if (d.hybrid) {
        add(p + "experts.gate_up_proj", {d.experts, 2 * d.moe_inter, d.hidden}, inv_sqrt(d.hidden), 0.0);
        add(p + "experts.down_proj", {d.experts, d.hidden, d.moe_inter}, inv_sqrt(d.moe_inter), 0.0);
    } else {
        for (int64_t e = 0; e < d.experts; ++e) {
            const std::string q = p + "experts." + std::to_string(e) + ".";
            add(q + "gate_proj.weight", {d.moe_inter, d.hidden}, inv_sqrt(d.hidden), 0.0);
            add(q + "up_proj.weight", {d.moe_inter, d.hidden}, inv_sqrt(d.hidden), 0.0);
            add(q + "down_proj.weight", {d.hidden, d.moe_inter}, inv_sqrt(d.moe_inter), 0.0);
        }
    }
    if (d.shared_inter > 0) {
        add(p + "shared_expert.gate_proj.weight", {d.shared_inter, d.hidden}, inv_sqrt(d.hidden), 0.0);
        add(p + "shared_expert.up_proj.weight", {d.shared_inter, d.hidden}, inv_sqrt(d.hidden), 0.0);
        add(p + "shared_expert.down_proj.weight", {d.hidden, d.shared_inter}, inv_sqrt(d.shared_inter), 0.0);
        add(p + "shared_expert_gate.weight", {1, d.hidden}, inv_sqrt(d.hidden), 0.0);
    }
}

}  // namespace

std::string tiny_config_json(TinyFamily family, bool wide) {
    const Dims d = dims_of(family, wide);
    nlohmann::json c = {{"architectures", {d.architecture}},
                        {"vocab_size", d.vocab},
                        {"hidden_size", d.hidden},
                        {"intermediate_size", d.inter},
                        {"num_hidden_layers", d.layers},
                        {"num_attention_heads", d.heads},
                        {"num_key_value_heads", d.kv_heads},
                        {"max_position_embeddings", 64},
                        {"rms_norm_eps", 1e-5},
                        {"rope_theta", 10000.0},
                        {"hidden_act", "silu"},
                        {"tie_word_embeddings", d.tied},
                        {"bos_token_id", 1},
                        {"eos_token_id", 2}};
    if (d.explicit_head_dim) {
        c["head_dim"] = d.head_dim;
    }
    if (d.experts > 0) {
        c["num_experts"] = d.experts;
        c["num_experts_per_tok"] = d.top_k;
        c["moe_intermediate_size"] = d.moe_inter;
        c["norm_topk_prob"] = true;
        c["decoder_sparse_step"] = 1;
        c["mlp_only_layers"] = d.hybrid ? nlohmann::json::array() : nlohmann::json{1};
    }
    if (d.shared_inter > 0) {
        c["shared_expert_intermediate_size"] = d.shared_inter;
    }
    if (d.hybrid) {
        c["layer_types"] = {"linear_attention", "full_attention"};
        c["linear_num_key_heads"] = kLinKHeads;
        c["linear_num_value_heads"] = kLinVHeads;
        c["linear_key_head_dim"] = kLinKDim;
        c["linear_value_head_dim"] = kLinVDim;
        c["linear_conv_kernel_dim"] = kLinConv;
        c["attn_output_gate"] = true;
        c["partial_rotary_factor"] = 0.5;
    }
    return c.dump(2);
}

std::map<std::string, model::OwnedTensor> tiny_model_tensors(TinyFamily family, model::DType dtype, uint32_t seed,
                                                             bool wide) {
    const Dims d = dims_of(family, wide);
    std::mt19937 rng(seed);
    std::normal_distribution<double> normal(0.0, 1.0);
    std::map<std::string, model::OwnedTensor> out;
    // A [rows, cols] tensor with entries offset + std·N(0, 1).
    auto add = [&](const std::string & name, std::vector<int64_t> shape, double std, double offset) {
        int64_t n = 1;
        for (int64_t s : shape)
            n *= s;
        std::vector<double> v(static_cast<size_t>(n));
        for (double & x : v)
            x = offset + std * normal(rng);
        out[name] = make_tensor(v, std::move(shape), dtype);
    };
    const int64_t q_dim = d.heads * d.head_dim, kv_dim = d.kv_heads * d.head_dim;
    const auto inv_sqrt = [](int64_t n) { return 1.0 / std::sqrt(static_cast<double>(n)); };
    const double norm_offset = d.hybrid ? 0.0 : 1.0;  // Qwen3.5's RMSNorm scales by (1 + weight)
    // The hybrid's tied head would give logits of std ~sqrt(hidden) from unit embeddings: a quarter of that keeps
    // its next-token distributions spread out enough for the sampling tests (several distinct draws).
    add("model.embed_tokens.weight", {d.vocab, d.hidden}, d.hybrid ? 0.25 : 1.0, 0.0);
    for (int64_t l = 0; l < d.layers; ++l) {
        const std::string p = "model.layers." + std::to_string(l) + ".";
        add(p + "input_layernorm.weight", {d.hidden}, 0.1, norm_offset);
        add(p + "post_attention_layernorm.weight", {d.hidden}, 0.1, norm_offset);
        if (d.hybrid && l == 0) {
            add_linear_attention(add, p + "linear_attn.", d.hidden);
        } else {
            add(p + "self_attn.q_proj.weight", {(d.hybrid ? 2 : 1) * q_dim, d.hidden}, inv_sqrt(d.hidden), 0.0);
            add(p + "self_attn.k_proj.weight", {kv_dim, d.hidden}, inv_sqrt(d.hidden), 0.0);
            add(p + "self_attn.v_proj.weight", {kv_dim, d.hidden}, inv_sqrt(d.hidden), 0.0);
            add(p + "self_attn.o_proj.weight", {d.hidden, q_dim}, inv_sqrt(q_dim), 0.0);
        }
        if (d.bias) {
            add(p + "self_attn.q_proj.bias", {q_dim}, 0.1, 0.0);
            add(p + "self_attn.k_proj.bias", {kv_dim}, 0.1, 0.0);
            add(p + "self_attn.v_proj.bias", {kv_dim}, 0.1, 0.0);
        }
        if (d.qk_norm && !(d.hybrid && l == 0)) {
            add(p + "self_attn.q_norm.weight", {d.head_dim}, 0.1, norm_offset);
            add(p + "self_attn.k_norm.weight", {d.head_dim}, 0.1, norm_offset);
        }
        if (d.is_sparse(l)) {
            add_experts(add, p + "mlp.", d);
            continue;
        }
        add(p + "mlp.gate_proj.weight", {d.inter, d.hidden}, inv_sqrt(d.hidden), 0.0);
        add(p + "mlp.up_proj.weight", {d.inter, d.hidden}, inv_sqrt(d.hidden), 0.0);
        add(p + "mlp.down_proj.weight", {d.hidden, d.inter}, inv_sqrt(d.inter), 0.0);
    }
    add("model.norm.weight", {d.hidden}, 0.1, norm_offset);
    if (!d.tied) {
        add("lm_head.weight", {d.vocab, d.hidden}, inv_sqrt(d.hidden), 0.0);
    }
    return out;
}

void write_model_dir(const std::string & dir, const std::string & config_json,
                     const std::map<std::string, model::OwnedTensor> & tensors) {
    {
        std::ofstream out(dir + "/config.json", std::ios::binary);
        out << config_json;
        if (!out) {
            throw std::runtime_error("cannot write " + dir + "/config.json");
        }
    }
    auto status = model::write_safetensors(dir + "/model.safetensors", tensors);
    if (!status.ok()) {
        throw std::runtime_error(status.error().message);
    }
}

void write_tiny_model(const std::string & dir, TinyFamily family, model::DType dtype, uint32_t seed) {
    write_model_dir(dir, tiny_config_json(family), tiny_model_tensors(family, dtype, seed));
}

}  // namespace tinkerd::testing
