// decode_lora.h: the fused decode step's LoRA items. Items run in one fixed order on every thread (target, block,
// group of rows: a factor block's groups back to back, so it is read from the cache after the first) and thread
// tid takes every team-th one, so all threads agree on the split without talking.
#include "engine/decode_lora.h"

#include <algorithm>

#include "engine/lora_rows.h"

namespace tinkerd::engine {

namespace {

// Target t's group of rows [b0, b1) (one adapter's consecutive rows, at most LORA_ROW_GROUP; rows without factors
// form groups too: they may need the bias) with its inputs x [B, in] (nullptr: not needed), u rows and outputs o.
LoraRowGroup target_group(DecodeLoraRows & rows, int t, int64_t b0, int64_t b1, const float * x, int64_t in,
                          const LoraOutput & o) {
    const int64_t u_stride = DECODE_LORA_TARGETS * rows.rank_stride;
    float * u = rows.u.data() + (b0 * DECODE_LORA_TARGETS + t) * rows.rank_stride;
    return LoraRowGroup{b1 - b0,  x ? x + b0 * in : nullptr,           in,      u,
                        u_stride, o.y ? o.y + b0 * o.stride : nullptr, o.stride};
}

// The end of target t's group of rows that starts at b0 (row_group_end, keyed by the rows' A factors).
int64_t group_end(const DecodeLayerWeights & w, int64_t B, int t, int64_t b0) {
    return row_group_end(B, b0, [&](int64_t b) { return w.lora[t * B + b].a; });
}

}  // namespace

bool group_has_lora(const DecodeLayerWeights & w, int64_t B, int t0, int t1) {
    if (w.lora.empty()) {
        return false;
    }
    for (int64_t i = t0 * B; i < t1 * B; ++i) {
        if (w.lora[i].a) {
            return true;
        }
    }
    return false;
}

void lora_rank_share(DecodeLoraRows & rows, const DecodeLayerWeights & w, int t0, int t1, const float * x, int64_t in,
                     int tid, int team) {
    int64_t item = 0;
    for (int t = t0; t < t1; ++t) {
        for (int64_t k0 = 0; k0 < rows.rank_stride; k0 += LORA_RANK_BLOCK) {  // a block's groups back to back
            for (int64_t b0 = 0, b1 = 0; b0 < rows.B; b0 = b1) {
                b1 = group_end(w, rows.B, t, b0);
                const DecodeLora & f = w.lora[t * rows.B + b0];
                if (f.a && k0 < f.rank && item++ % team == tid) {
                    lora_rank_block(f.a, f.rank, in, k0, f.scale, target_group(rows, t, b0, b1, x, in, LoraOutput{}));
                }
            }
        }
    }
}

void lora_out_share(DecodeLoraRows & rows, const DecodeLayerWeights & w, int t0, int t1, const LoraOutput * outs,
                    int tid, int team) {
    int64_t item = 0;
    for (int t = t0; t < t1; ++t) {
        const LoraOutput & o = outs[t - t0];
        for (int64_t j0 = 0; j0 < o.out; j0 += LORA_OUT_BLOCK) {  // a block's groups back to back
            for (int64_t b0 = 0, b1 = 0; b0 < rows.B; b0 = b1) {
                b1 = group_end(w, rows.B, t, b0);
                const DecodeLora & f = w.lora[t * rows.B + b0];
                if (!(f.a || o.bias) || item++ % team != tid) {
                    continue;
                }
                const LoraRowGroup g = target_group(rows, t, b0, b1, nullptr, 0, o);
                for (int64_t r = 0; o.bias && r < g.rows; ++r) {
                    float * y = g.y + r * g.y_stride;
                    for (int64_t j = j0; j < std::min(o.out, j0 + LORA_OUT_BLOCK); ++j) {
                        y[j] = y[j] + o.bias[j];
                    }
                }
                if (f.a) {
                    lora_out_block(f.b, f.rank, o.out, j0, g);
                }
            }
        }
    }
}

}  // namespace tinkerd::engine
