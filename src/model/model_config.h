// ModelConfig: the architecture-independent description of a decoder-only transformer,
// parsed from a Hugging Face config.json. Validates what tinkerd supports and names what it does not.
#pragma once

#include <cstdint>
#include <string>
#include <vector>

#include "common/status.h"

namespace tinkerd::model {

// Which family's code runs the model (one file per family in src/engine/arch/).
enum class ArchFamily { LLAMA, QWEN2, QWEN3, QWEN3_MOE, QWEN3_5, QWEN3_5_MOE };  // Qwen3-VL: QWEN3(_MOE)

struct RopeScaling {
    std::string type;  // "" (none) or "llama3"
    double factor = 1.0;
    double low_freq_factor = 1.0;
    double high_freq_factor = 4.0;
    int64_t original_max_position_embeddings = 8192;
};

// The vision tower of an image-text checkpoint (Qwen3-VL, Qwen3.5: "vision_config"); depth == 0 without one.
struct VisionConfig {
    int64_t depth = 0;              // vision blocks
    int64_t hidden_size = 0;        // Cv
    int64_t intermediate_size = 0;  // Fv
    int64_t n_heads = 0;
    int64_t in_channels = 3, patch_size = 16, temporal_patch_size = 2, spatial_merge_size = 2;
    int64_t out_hidden_size = 0;            // the language model's hidden size
    int64_t num_position_embeddings = 0;    // learned position table, a square grid
    std::vector<int64_t> deepstack_layers;  // Qwen3-VL: blocks whose merged outputs join the first decoder layers
    // One patch's values: in_channels * temporal_patch_size * patch_size^2.
    int64_t patch_dim() const { return in_channels * temporal_patch_size * patch_size * patch_size; }
};

struct ModelConfig {
    std::string architecture;  // e.g. "LlamaForCausalLM"
    ArchFamily family = ArchFamily::LLAMA;
    int64_t vocab_size = 0;
    int64_t hidden_size = 0;        // C
    int64_t intermediate_size = 0;  // F
    int64_t n_layers = 0;
    int64_t n_heads = 0;     // H
    int64_t n_kv_heads = 0;  // KV heads (GQA), divides n_heads
    int64_t head_dim = 0;    // D; from config or hidden_size / n_heads
    int64_t max_position_embeddings = 0;
    double rms_norm_eps = 1e-6;
    double rope_theta = 10000.0;
    RopeScaling rope_scaling;
    bool tie_word_embeddings = false;
    bool attention_bias = false;  // q/k/v biases (Qwen2 always has them)
    bool qk_norm = false;         // per-head RMSNorm on q and k (Qwen3)
    std::string torch_dtype;      // as declared: "float32", "bfloat16", "float16" or ""
    int64_t bos_token_id = -1;
    int64_t eos_token_id = -1;
    // Mixture of experts (Qwen3-MoE); n_experts == 0 for dense models. A sparse layer's MLP routes each
    // token to its top n_experts_per_token experts (softmax over the router logits, renormalised over the
    // chosen ones when norm_topk_prob); every other layer keeps the dense SwiGLU of intermediate_size.
    int64_t n_experts = 0;              // E ("num_experts", or transformers 5's "num_local_experts")
    int64_t n_experts_per_token = 0;    // top-k ("num_experts_per_tok")
    int64_t moe_intermediate_size = 0;  // one expert's F
    bool norm_topk_prob = false;
    std::vector<bool> sparse_layers;  // [n_layers]: not in mlp_only_layers and (l + 1) % decoder_sparse_step == 0
    int64_t shared_expert_intermediate_size = 0;  // Qwen3.5-MoE: a dense shared expert beside the routed ones

    // Qwen3.5 hybrids (the text model, "text_config" of the checkpoints): Gated DeltaNet linear-attention
    // layers where layer_types says "linear_attention", gated full attention (q_proj emits query and gate)
    // elsewhere, rotary embeddings on the first partial_rotary_factor of each head.
    std::vector<bool> linear_attention_layers;  // [n_layers]
    int64_t linear_k_heads = 0, linear_v_heads = 0;
    int64_t linear_k_head_dim = 0, linear_v_head_dim = 0;
    int64_t linear_conv_kernel = 0;
    bool attn_output_gate = false;
    double partial_rotary_factor = 1.0;

    // Image-text checkpoints (docs/vision.md): the vision tower, the image placeholder token and the
    // interleaved multimodal RoPE (mrope_section: rotary frequencies per temporal/height/width axis).
    VisionConfig vision;
    int64_t image_token_id = -1;
    int64_t vision_start_token_id = -1;
    std::vector<int64_t> mrope_section;  // 3 entries, or empty (plain 1-D RoPE)
    bool has_vision() const { return vision.depth > 0; }

    bool is_sparse_layer(int64_t layer) const {
        return layer >= 0 && layer < static_cast<int64_t>(sparse_layers.size()) && sparse_layers[layer];
    }
    bool is_linear_attention_layer(int64_t layer) const {
        return layer >= 0 && layer < static_cast<int64_t>(linear_attention_layers.size()) &&
               linear_attention_layers[layer];
    }
};

// Parses config.json text. Errors: malformed JSON, missing or invalid fields, unsupported architecture
// or hidden_act, rope_scaling types other than llama3 (each named in the message).
Result<ModelConfig> parse_model_config(const std::string & json_text);
// Reads <dir>/config.json and parses it.
Result<ModelConfig> load_model_config(const std::string & model_dir);

}  // namespace tinkerd::model
