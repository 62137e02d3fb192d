// config.json from GGUF metadata: `<arch>.*` hyper-parameters mapped to the Hugging Face fields of
// LlamaForCausalLM / Qwen2ForCausalLM / Qwen3ForCausalLM / Qwen3MoeForCausalLM / Qwen3_5(Moe)ForCausalLM (see
// convert.h), the expert fields of qwen3moe included (Qwen3.5's own fields: qwen35.cpp).
#include <array>

#include "gguf/convert.h"
#include "gguf/qwen35.h"

namespace tinkerd::gguf {
namespace {

using nlohmann::json;

struct ArchRow {
    const char * gguf;
    const char * hf_class;
    const char * model_type;
};

constexpr std::array<ArchRow, 6> ARCHS = {{
    {"llama", "LlamaForCausalLM", "llama"},
    {"qwen2", "Qwen2ForCausalLM", "qwen2"},
    {"qwen3", "Qwen3ForCausalLM", "qwen3"},
    {"qwen3moe", "Qwen3MoeForCausalLM", "qwen3_moe"},
    {"qwen35", "Qwen3_5ForCausalLM", "qwen3_5_text"},
    {"qwen35moe", "Qwen3_5MoeForCausalLM", "qwen3_5_moe_text"},
}};

// An integer hyper-parameter `<arch>.<key>`, required.
Result<int64_t> arch_int(const GgufFile & file, const std::string & arch, const std::string & key) {
    auto v = file.get_int(arch + "." + key);
    if (v.ok() && *v <= 0) {
        return invalid_argument(file.name() + ": " + arch + "." + key + " must be positive, got " + std::to_string(*v));
    }
    return v;
}

double arch_float_or(const GgufFile & file, const std::string & key, double fallback) {
    auto v = file.get_float(key);
    return v.ok() ? *v : fallback;
}

// Vocabulary size: `<arch>.vocab_size`, else the token list, else the embedding's rows.
Result<int64_t> vocab_size(const GgufFile & file, const std::string & arch) {
    if (file.find(arch + ".vocab_size")) {
        return arch_int(file, arch, "vocab_size");
    }
    if (const Value * tokens = file.find("tokenizer.ggml.tokens"); tokens && !tokens->strings.empty()) {
        return static_cast<int64_t>(tokens->strings.size());
    }
    if (const TensorInfo * embd = file.find_tensor("token_embd.weight"); embd && embd->shape.size() == 2) {
        return embd->shape[0];
    }
    return invalid_argument(file.name() + ": cannot tell the vocabulary size (no " + arch +
                            ".vocab_size, tokenizer.ggml.tokens or token_embd.weight)");
}

Result<void> check_rope(const GgufFile & file, const std::string & arch, int64_t head_dim) {
    if (auto type = file.get_string(arch + ".rope.scaling.type"); type.ok() && *type != "none") {
        return unsupported(file.name() + ": rope scaling '" + *type + "' (" + arch +
                           ".rope.scaling.type) is not supported");
    }
    if (file.find_tensor("rope_freqs.weight")) {
        return unsupported(file.name() +
                           ": per-frequency rope factors (tensor rope_freqs.weight, llama3 rope "
                           "scaling) are not supported");
    }
    auto dims = file.get_int(arch + ".rope.dimension_count");
    if (dims.ok() && *dims != head_dim && !is_qwen35(arch)) {  // Qwen3.5: partial_rotary_factor (qwen35.cpp)
        return unsupported(file.name() + ": partial rotary embeddings (" + arch + ".rope.dimension_count " +
                           std::to_string(*dims) + " != head dim " + std::to_string(head_dim) + ") are not supported");
    }
    return {};
}

const char * dtype_of(const GgufFile & file) {
    const TensorInfo * embd = file.find_tensor("token_embd.weight");
    if (embd && embd->type == GgmlType::BF16) {
        return "bfloat16";
    }
    return embd && embd->type == GgmlType::F16 ? "float16" : "float32";
}

// qwen3moe's expert fields. Every layer is sparse (llama.cpp's qwen3moe has no dense layers), and the top-k
// routing weights are renormalised: llama.cpp's qwen3moe graph always normalises them (transformers' GGUF
// loader sets norm_topk_prob = true for it too), while Qwen3MoeConfig's own default is false. An explicit
// `<arch>.expert_weights_norm` is followed.
Result<void> add_moe_fields(const GgufFile & file, const std::string & a, json & config) {
    auto experts = arch_int(file, a, "expert_count");
    auto used = arch_int(file, a, "expert_used_count");
    auto width = arch_int(file, a, "expert_feed_forward_length");
    for (const Result<int64_t> * r : {&experts, &used, &width}) {
        TRY_STATUS(*r);
    }
    if (*used > *experts) {
        return invalid_argument(file.name() + ": " + a + ".expert_used_count " + std::to_string(*used) + " exceeds " +
                                a + ".expert_count " + std::to_string(*experts));
    }
    if (file.find(a + ".expert_shared_count") || file.find_tensor("blk.0.ffn_gate_shexp.weight")) {
        return unsupported(file.name() + ": shared experts are not supported for " + a);
    }
    config["num_experts"] = *experts;
    config["num_experts_per_tok"] = *used;
    config["moe_intermediate_size"] = *width;
    const Value * norm = file.find(a + ".expert_weights_norm");
    config["norm_topk_prob"] = norm == nullptr || !norm->is_number() || norm->i != 0;
    config["decoder_sparse_step"] = 1;
    config["mlp_only_layers"] = json::array();
    config["output_router_logits"] = false;
    if (!file.find(a + ".feed_forward_length")) {  // unused by sparse layers; HF wants a value
        config["intermediate_size"] = *width;
    }
    return {};
}

}  // namespace

Result<json> hf_config(const GgufFile & file) {
    auto arch = file.get_string("general.architecture");
    TRY_STATUS(arch);
    const ArchRow * row = nullptr;
    for (const ArchRow & r : ARCHS) {
        row = *arch == r.gguf ? &r : row;
    }
    if (!row) {
        return unsupported(file.name() + ": architecture '" + *arch +
                           "' is not supported (llama, qwen2, qwen3, qwen3moe, qwen35, qwen35moe)");
    }
    const std::string a = *arch;
    const bool moe = a == "qwen3moe" || a == "qwen35moe";
    auto hidden = arch_int(file, a, "embedding_length");
    auto layers = arch_int(file, a, "block_count");
    auto ffn =
        moe && !file.find(a + ".feed_forward_length") ? Result<int64_t>(0) : arch_int(file, a, "feed_forward_length");
    auto heads = arch_int(file, a, "attention.head_count");
    auto context = arch_int(file, a, "context_length");
    auto vocab = vocab_size(file, a);
    for (const Result<int64_t> * r : {&hidden, &layers, &ffn, &heads, &context, &vocab}) {
        TRY_STATUS(*r);
    }
    auto kv_heads = file.find(a + ".attention.head_count_kv") ? arch_int(file, a, "attention.head_count_kv") : heads;
    TRY_STATUS(kv_heads);
    auto head_dim = file.find(a + ".attention.key_length") ? arch_int(file, a, "attention.key_length")
                                                           : Result<int64_t>(*hidden / *heads);
    TRY_STATUS(head_dim);
    TRY_STATUS(check_rope(file, a, *head_dim));
    json config = {
        {"architectures", {row->hf_class}},
        {"model_type", row->model_type},
        {"vocab_size", *vocab},
        {"hidden_size", *hidden},
        {"intermediate_size", *ffn},
        {"num_hidden_layers", *layers},
        {"num_attention_heads", *heads},
        {"num_key_value_heads", *kv_heads},
        {"head_dim", *head_dim},
        {"max_position_embeddings", *context},
        {"rms_norm_eps", arch_float_or(file, a + ".attention.layer_norm_rms_epsilon", 1e-6)},
        {"rope_theta", arch_float_or(file, a + ".rope.freq_base", 10000.0)},
        {"hidden_act", "silu"},
        {"tie_word_embeddings", file.find_tensor("output.weight") == nullptr},
        {"attention_bias", file.find_tensor("blk.0.attn_q.bias") != nullptr},
        {"torch_dtype", dtype_of(file)},
    };
    if (is_qwen35(a)) {
        TRY_STATUS(add_qwen35_fields(file, a, config));
    } else if (moe) {
        TRY_STATUS(add_moe_fields(file, a, config));
    }
    for (const char * key : {"bos", "eos"}) {
        if (auto id = file.get_int(std::string("tokenizer.ggml.") + key + "_token_id"); id.ok()) {
            config[std::string(key) + "_token_id"] = *id;
        }
    }
    return config;
}

}  // namespace tinkerd::gguf
