// The LoRA phases of a fused decode step (decode_layers.h): each row's u = scale·A·x and y += B·u for the
// projections its adapter targets, as work items dealt round-robin to the region's team. The items are
// add_lora_rows' own (lora_rows.h: groups of one adapter's rows, the same kernels), so the deltas are its bits.
#pragma once

#include <cstdint>
#include <vector>

#include "engine/decode_layers.h"

namespace tinkerd::engine {

// Every row's u for every target of one step: [B, 7 targets, rank_stride] (rank_stride: the largest rank).
struct DecodeLoraRows {
    DecodeLoraRows() = default;
    DecodeLoraRows(int64_t rows, int64_t max_rank)
        : B(rows), rank_stride(max_rank), u(static_cast<size_t>(rows * DECODE_LORA_TARGETS * max_rank)) {}
    int64_t B = 0, rank_stride = 0;
    std::vector<float> u;
};

// Where one target's delta goes: row b at y + b·stride, `out` columns; bias (the qkv bias, else nullptr) added to
// every row before the delta, as the torch path adds it.
struct LoraOutput {
    float * y = nullptr;
    int64_t stride = 0, out = 0;
    const float * bias = nullptr;
};

// Whether some row has factors for one of the layer's targets [t0, t1).
bool group_has_lora(const DecodeLayerWeights & w, int64_t B, int t0, int t1);

// u[b, t] = scale·A_t·x[b] for targets [t0, t1) (x [B, in]): this thread's items of the phase.
void lora_rank_share(DecodeLoraRows & rows, const DecodeLayerWeights & w, int t0, int t1, const float * x, int64_t in,
                     int tid, int team);

// y_t[b] += B_t·u[b, t] (outs[t - t0]) for targets [t0, t1), each bias first: this thread's items of the phase.
void lora_out_share(DecodeLoraRows & rows, const DecodeLayerWeights & w, int t0, int t1, const LoraOutput * outs,
                    int tid, int team);

}  // namespace tinkerd::engine
