// Gated DeltaNet building blocks of Qwen3.5's linear-attention layers, on packed sequences (each sequence
// starts from zero state): the causal depthwise conv + SiLU (full and one-step), the chunked gated delta rule
// (differentiable by autograd) and its one-step recurrent form for decoding, the gated RMSNorm, and the whole
// mixer (Qwen3_5GatedDeltaNet.forward) given its projected inputs, also over sequences' cached states (sampling).
// No LoRA here: callers project.
#pragma once

#include <torch/torch.h>

#include "engine/attention.h"
#include "engine/kv_cache.h"

namespace tinkerd::engine {

// Depthwise causal conv (no bias) then SiLU: row t of sequence s sees rows max(start_s, t-K+1)..t of its own
// sequence (zeros before the start). x [T, Cc], weight [Cc, K] -> [T, Cc]; differentiable in x and weight.
torch::Tensor causal_conv1d_silu(const torch::Tensor & x, const torch::Tensor & weight, const SequenceLayout & layout);

// Each sequence's conv state after its prompt: its last K-1 input rows, oldest first, zero-padded in front
// when the sequence is shorter. x [T, Cc] -> [S, Cc, K-1].
torch::Tensor conv_state_from_prompt(const torch::Tensor & x, const SequenceLayout & layout, int64_t kernel);

// One decoding step of causal_conv1d_silu: x [S, Cc] (one new row per sequence), weight [Cc, K],
// state [S, Cc, K-1] (written in place: the oldest input dropped, x appended) -> [S, Cc].
torch::Tensor causal_conv1d_silu_step(const torch::Tensor & x, const torch::Tensor & weight, torch::Tensor & state);

// The chunked gated delta rule (chunks of 64 rows) over packed sequences. q, k are l2-normalised inside
// (eps 1e-6 under the square root) and q is scaled by 1/sqrt(Dk); computed in fp32 (fp64 for fp64 inputs).
// q, k [T, H, Dk], v [T, H, Dv], g [T, H] (log-decay, <= 0), beta [T, H] -> [T, H, Dv] in q's dtype.
// Differentiable by autograd in every input. final_state, when given, receives each sequence's state after
// its last row: [S, H, Dk, Dv] in the compute dtype.
torch::Tensor gated_delta_rule(const torch::Tensor & q, const torch::Tensor & k, const torch::Tensor & v,
                               const torch::Tensor & g, const torch::Tensor & beta, const SequenceLayout & layout,
                               torch::Tensor * final_state = nullptr);

// One recurrent step of the same rule for decoding (no autograd): q, k [S, H, Dk], v [S, H, Dv], g, beta
// [S, H]; state [S, H, Dk, Dv] written in place (in its own dtype) -> [S, H, Dv] in q's dtype. CPU fp32 states
// take the fused kernel (kernels/delta_step.h: the same formulas in one pass, another summation order); other
// states (fp64, GPUs) the tensor ops of recurrent_gated_delta_step_ops.
torch::Tensor recurrent_gated_delta_step(const torch::Tensor & q, const torch::Tensor & k, const torch::Tensor & v,
                                         const torch::Tensor & g, const torch::Tensor & beta, torch::Tensor & state);

// The same over per-sequence states: states[s] [H, Dk, Dv] (views of the callers' tensors), each updated in place.
torch::Tensor recurrent_gated_delta_step(const torch::Tensor & q, const torch::Tensor & k, const torch::Tensor & v,
                                         const torch::Tensor & g, const torch::Tensor & beta,
                                         const std::vector<torch::Tensor> & states);

// The step as tensor ops (any device and dtype; the fused kernel's reference in tests).
torch::Tensor recurrent_gated_delta_step_ops(const torch::Tensor & q, const torch::Tensor & k, const torch::Tensor & v,
                                             const torch::Tensor & g, const torch::Tensor & beta,
                                             torch::Tensor & state);

// rmsnorm(x)·weight·silu(z) as Qwen3_5RMSNormGated: normalised in fp32 (fp64 stays fp64), cast back to x's
// dtype before the weight, the gate in fp32. x, z [N, Dv], weight [Dv] -> [N, Dv] in x's dtype.
torch::Tensor gated_rms_norm(const torch::Tensor & x, const torch::Tensor & weight, const torch::Tensor & z,
                             double eps);

// Sizes of one linear-attention layer (config.json's linear_* fields and rms_norm_eps).
struct DeltaNetDims {
    int64_t k_heads = 0;      // linear_num_key_heads (HK)
    int64_t v_heads = 0;      // linear_num_value_heads (HV), a multiple of HK
    int64_t k_head_dim = 0;   // linear_key_head_dim (Dk)
    int64_t v_head_dim = 0;   // linear_value_head_dim (Dv)
    int64_t conv_kernel = 0;  // linear_conv_kernel_dim (K)
    double rms_eps = 1e-6;
    int64_t key_dim() const { return k_heads * k_head_dim; }
    int64_t value_dim() const { return v_heads * v_head_dim; }
    int64_t conv_dim() const { return 2 * key_dim() + value_dim(); }
};

// The layer's own (non-projection) weights; conv1d is the checkpoint's [Cc, 1, K] squeezed to [Cc, K].
struct DeltaNetWeights {
    torch::Tensor conv1d;   // [Cc, K], Cc = 2·HK·Dk + HV·Dv
    torch::Tensor dt_bias;  // [HV]
    torch::Tensor A_log;    // [HV]
    torch::Tensor norm;     // [Dv]
};

// The four input projections of the mixer (plain or with LoRA, made by the caller).
struct DeltaNetInputs {
    torch::Tensor qkv;  // [T, Cc] in_proj_qkv(x)
    torch::Tensor z;    // [T, HV·Dv] in_proj_z(x)
    torch::Tensor b;    // [T, HV] in_proj_b(x)
    torch::Tensor a;    // [T, HV] in_proj_a(x)
};

// Per-sequence decoding state of one linear-attention layer.
struct DeltaNetState {
    torch::Tensor conv;       // [S, Cc, K-1]
    torch::Tensor recurrent;  // [S, HV, Dk, Dv]
};

// The mixer from its projected inputs to out_proj's input [T, HV·Dv] (Qwen3_5GatedDeltaNet.forward without
// the projections). When state is given it receives each sequence's conv and recurrent state after its rows.
torch::Tensor deltanet_mix(const DeltaNetWeights & w, const DeltaNetDims & dims, const DeltaNetInputs & in,
                           const SequenceLayout & layout, DeltaNetState * state = nullptr);

// One decoding step of deltanet_mix: inputs with one row per sequence [S, ...], state updated in place.
torch::Tensor deltanet_mix_step(const DeltaNetWeights & w, const DeltaNetDims & dims, const DeltaNetInputs & in,
                                DeltaNetState & state);

// deltanet_mix for the new rows of a cached forward, continuing each sequence's state kept in its cache (the
// layer's conv_state / recurrent_state, updated): one row per sequence (decode: deltanet_mix_step), or whole
// prompts from empty caches (prefill: the chunked pass, its final states stored). Sequence s owns rows
// [sum(lengths[..s]), + lengths[s]) of in; returns [T, HV·Dv]. No autograd.
torch::Tensor deltanet_mix_cached(const DeltaNetWeights & w, const DeltaNetDims & dims, const DeltaNetInputs & in,
                                  const std::vector<int64_t> & lengths, const std::vector<SequenceCache *> & caches,
                                  int64_t layer);

}  // namespace tinkerd::engine
