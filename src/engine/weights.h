// Base-model weights: the frozen tensors of one Hugging Face checkpoint, loaded (memory-mapped where
// the dtype allows) and shape-checked by name. Knows tensor names only through the family code.
#pragma once

#include <memory>
#include <string>
#include <vector>

#include <torch/torch.h>

#include "common/status.h"
#include "engine/engine.h"
#include "model/model_config.h"
#include "model/safetensors.h"

namespace tinkerd::engine {

// Dimension letters used in shape comments across the engine:
// T tokens in the packed batch, C hidden, F intermediate, H query heads, KV key/value heads,
// D head dim, V vocab, R LoRA rank, N a datum's tokens, K top-K targets, E experts.

struct LayerWeights {
    torch::Tensor input_norm;  // [C], act dtype
    torch::Tensor post_norm;   // [C], act dtype
    torch::Tensor wq;          // [H*D, C], compute dtype
    torch::Tensor wk;          // [KV*D, C]
    torch::Tensor wv;          // [KV*D, C]
    torch::Tensor wo;          // [C, H*D]
    torch::Tensor bq, bk, bv;  // [H*D], [KV*D], [KV*D] act dtype; undefined when the family has none
    torch::Tensor q_norm;      // [D] per-head RMSNorm (Qwen3); undefined otherwise
    torch::Tensor k_norm;      // [D]
    torch::Tensor w_gate;      // [F, C]
    torch::Tensor w_up;        // [F, C]
    torch::Tensor w_down;      // [C, F]
    // A sparse (MoE) layer instead of w_gate/w_up/w_down (arch/moe_block.h):
    torch::Tensor router;           // [E, C] act dtype (routing is computed in fp32)
    torch::Tensor experts_gate_up;  // [E, 2F, C] compute dtype: each expert's cat(gate, up)
    torch::Tensor experts_down;     // [E, C, F] compute dtype
    torch::Tensor experts_gate;     // [E, F, C] and
    torch::Tensor experts_up;       // [E, F, C]: a GGUF's quantised experts instead of experts_gate_up
    // ... and Qwen3.5-MoE's shared expert: w_gate / w_up / w_down above (its SwiGLU, S wide) and its gate
    torch::Tensor shared_expert_gate;  // [1, C] act dtype; undefined without a shared expert
    // A Gated DeltaNet (linear-attention) layer instead of the attention tensors (arch/qwen3_5.cpp); Cc =
    // 2·HK·Dk + HV·Dv conv channels, Vd = HV·Dv:
    torch::Tensor w_lin_in;  // [Cc + Vd + 2·HV, C] compute dtype: cat(in_proj_qkv, in_proj_z, in_proj_b, in_proj_a)
    std::vector<torch::Tensor> lin_in_parts;  // when they cannot all be stacked: each run of one type stacked
    torch::Tensor w_lin_out;                  // [C, Vd] out_proj
    bool lin_out_v_tiled = false;             // w_lin_out's columns in llama.cpp's tiled V-head order (gguf/qwen35.h)
    torch::Tensor conv1d;                     // [Cc, K] act dtype (the checkpoint's [Cc, 1, K])
    torch::Tensor dt_bias;                    // [HV] act dtype
    torch::Tensor A_log;                      // [HV] act dtype
    torch::Tensor lin_norm;                   // [Dv] act dtype: the gated RMSNorm's weight
    // Fused copies made after loading (one GEMM instead of three / two); the parts are then released.
    torch::Tensor w_qkv;      // [H*D + 2*KV*D, C] = cat(wq, wk, wv)
    torch::Tensor b_qkv;      // [H*D + 2*KV*D] or undefined
    torch::Tensor w_gate_up;  // [2F, C] = cat(w_gate, w_up)
};

// Drops the mapped pages t aliases, if any (only a CPU tensor can: WeightLoader moves others to the device).
void release_mapped(const model::SafetensorsFile & file, const torch::Tensor & t);

// Builds w_qkv / b_qkv / w_gate_up from the separate projections, drops the separate tensors and
// releases their mapped pages, so the checkpoint is not resident twice. Quantised parts of different block
// types cannot be stacked: they stay separate and the fused tensor undefined.
void fuse_projections(LayerWeights & w, const model::SafetensorsFile & file);

// x [T, in] · cat(parts)ᵀ -> [T, Σ out]: one product on the fused weight when fuse_projections made it, else
// one per part.
torch::Tensor fused_linear(const torch::Tensor & x, const torch::Tensor & fused,
                           const std::vector<torch::Tensor> & parts);

// Whether row blocks can be concatenated into one weight: the same dtype and rank and, for quantised blocks
// ([rows, blocks, bytes]), the same block size.
bool can_stack(const std::vector<torch::Tensor> & parts);

struct BaseWeights {
    torch::Tensor embed;  // [V, C], compute dtype
    std::vector<LayerWeights> layers;
    torch::Tensor final_norm;  // [C], act dtype
    torch::Tensor lm_head;     // [V, C], compute dtype; the same tensor as embed when tied
};

// Fetches named tensors from a checkpoint, checks shape and dtype, and converts them.
class WeightLoader {
  public:
    WeightLoader(std::shared_ptr<model::SafetensorsFile> file, torch::ScalarType compute, torch::ScalarType act,
                 torch::Device device)
        : file_(std::move(file)), compute_(compute), act_(act), device_(device) {}

    // Names are given as a Hugging Face *ForCausalLM names them ("model.layers.0...."); a checkpoint of a
    // *ForConditionalGeneration keeps its text model under "model.language_model.". Chosen from the file:
    // "model.language_model." when it holds that embedding, else "model.".
    void choose_model_prefix();
    // Matrices fetched in the compute dtype are quantised to GGUF blocks at load (--base-quant q8_0 / q4_k:
    // LoadQuant in engine.h says which rows take which type); CPU only.
    void quantise_at_load(LoadQuant mode) { quantise_ = mode; }
    // The name in the checkpoint of a text-model tensor named as above.
    std::string resolve(const std::string & name) const;

    // A matrix used in matmuls, in the compute dtype (aliasing the mapping when dtypes match on CPU), or its
    // quantised blocks [..., out, in/blk, bb] uint8 as the file holds them (kernels/quant_matmul.h).
    Result<torch::Tensor> matrix(const std::string & name, std::vector<int64_t> shape) const;
    // A matrix kept in the activation dtype (the MoE router: routing decisions in fp32).
    Result<torch::Tensor> act_matrix(const std::string & name, std::vector<int64_t> shape) const;
    // A small vector (norm weights, biases) in the activation dtype.
    Result<torch::Tensor> vector(const std::string & name, int64_t size) const;
    bool contains(const std::string & name) const { return file_->contains(resolve(name)); }
    // A tensor named exactly as the checkpoint names it (no text-model prefix: "model.visual.…"), in the compute
    // dtype (as_matrix, never quantised) or the activation dtype.
    Result<torch::Tensor> exact(const std::string & name, std::vector<int64_t> shape, bool as_matrix) const;
    // Lets the kernel drop the mapped pages of a tensor that was copied elsewhere (no-op unless t aliases them).
    void release(const torch::Tensor & t) const { release_mapped(*file_, t); }

  private:
    // A tensor of quantised blocks (U8, gguf::blocks_shape) standing for `shape`: kept as it is for a product
    // weight (matrix()), dequantised to dtype otherwise (a router). CPU only.
    Result<torch::Tensor> quantised(const model::TensorView & view, const std::vector<int64_t> & shape,
                                    torch::ScalarType dtype, bool product_weight) const;
    // The blocks a matrix quantised at load becomes, or an undefined tensor when its rows fit no block type.
    torch::Tensor quantise_loaded(const torch::Tensor & mapped) const;
    // product_weight: a matrix of base_linear products (matrix()), which --base-quant q8_0 / q4_k quantise.
    Result<torch::Tensor> fetch(const std::string & name, const std::vector<int64_t> & shape, torch::ScalarType dtype,
                                bool product_weight = false, bool resolve_name = true) const;

    std::shared_ptr<model::SafetensorsFile> file_;
    torch::ScalarType compute_;
    torch::ScalarType act_;
    torch::Device device_;
    std::string model_prefix_ = "model.";
    LoadQuant quantise_ = LoadQuant::NONE;
};

std::string shape_string(const std::vector<int64_t> & shape);

// Stores a loaded tensor into dst, or returns the loader's error.
inline Result<void> assign(torch::Tensor & dst, Result<torch::Tensor> src) {
    if (!src.ok()) {
        return src.error();
    }
    dst = std::move(src).value();
    return {};
}

}  // namespace tinkerd::engine
