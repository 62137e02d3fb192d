// A decode step's decoder layers in one OpenMP parallel region: B sequences each adding one token to a dense
// Llama / Qwen2 / Qwen3 model (bf16 weights, fp32 activations, CPU; rows of the base model or of LoRA adapters).
// The team runs every layer's norms, products, LoRA deltas, RoPE, cache writes and attention with a barrier between
// phases, instead of ~25 torch ops and 4-5 fork/joins a layer with one thread idle during the serial ops. It runs
// the torch path's own per-row code (fused_ops.h, the matmul row kernels, attention_decode, lora_rows), so its
// hidden states are the same bits.
#pragma once

#include <cstdint>
#include <vector>

#include "engine/kernels/matmul.h"

namespace tinkerd::engine {

// One row's LoRA factors for one projection, applied as lora_rows.h applies them (fp32, contiguous):
// y[row] += B·(scale·A·x[row]) with A [rank, in], B [out, rank].
struct DecodeLora {
    const float * a = nullptr;  // nullptr: no delta for this row and projection
    const float * b = nullptr;
    int64_t rank = 0;
    float scale = 0;
};
inline constexpr int DECODE_LORA_TARGETS = 7;  // model::LoraTarget's Q, K, V, O, GATE, UP, DOWN, in that order

// One layer's tensors as raw pointers (their shapes in DecodeShape).
struct DecodeLayerWeights {
    const float * input_norm = nullptr;    // [C]
    const float * post_norm = nullptr;     // [C]
    const uint16_t * w_qkv = nullptr;      // [H*D + 2*KV*D, C] bf16
    const float * b_qkv = nullptr;         // [H*D + 2*KV*D] or nullptr (Qwen2)
    const float * q_norm = nullptr;        // [D] or nullptr (Qwen3's per-head RMSNorm)
    const float * k_norm = nullptr;        // [D] or nullptr
    const uint16_t * wo = nullptr;         // [C, H*D] bf16
    const uint16_t * w_gate_up = nullptr;  // [2F, C] bf16
    const uint16_t * w_down = nullptr;     // [C, F] bf16
    std::vector<DecodeLora> lora;          // [7 targets x B rows] at t·B + b; empty: no row has an adapter here
};

struct DecodeShape {
    int64_t C = 0, H = 0, KV = 0, D = 0, F = 0;
    double eps = 0;
};

// One sequence's KV cache: per layer the K and V slabs [KV, capacity, D] fp32; the new token goes at `length`.
struct DecodeSequence {
    std::vector<float *> keys, values;
    int64_t capacity = 0, length = 0;
};

// The few-row product each projection takes for B rows (kernels::row_range_product; none of them kind none).
struct DecodeProducts {
    kernels::RowRangeProduct qkv, o, gate_up, down;
};

// Runs every layer on the residual stream x [B, C] in place (embeddings in, the last layer's output out: the
// final norm is the caller's), writing each layer's K/V at each sequence's `length`. cos, sin [B, D]: the rows'
// RoPE tables. F must be a multiple of 64 (decode_layers_shape_ok).
void run_decode_layers(const DecodeShape & shape, const std::vector<DecodeLayerWeights> & layers,
                       const DecodeProducts & products, const std::vector<DecodeSequence> & seqs, const float * cos,
                       const float * sin, float * x);

// Whether Transformer::hidden_states_cached takes run_decode_layers where it applies (on by default; tests and
// benchmarks turn it off to compare), and how many steps have run through it in this process.
void set_decode_layers_enabled(bool enabled);
bool decode_layers_enabled();
int64_t decode_layers_runs();

// The shapes run_decode_layers takes: even D, F a multiple of 64 (the SiLU's ranges start on multiples of 64
// elements), H a multiple of KV.
bool decode_layers_shape_ok(const DecodeShape & shape);

}  // namespace tinkerd::engine
