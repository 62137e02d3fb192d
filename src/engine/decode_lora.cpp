// decode_lora.h: the fused decode step's LoRA items. Items run in one fixed order on every thread (target, block,
// group of rows: a factor block's groups back to back, so it is read from the cache after the first) and thread
// tid takes every team-th one, so all threads agree on the split without talking.
#include "engine/decode_lora.h"

#include <algorithm>
#include <utility>

#include "engine/lora_rows.h"

namespace tinkerd::engine {

namespace {

// Target t's rows as groups of one adapter's consecutive rows (rows without factors form groups too: they may
// need the bias), with their inputs x [B, in] (nullptr: not needed), u rows and outputs o.
std::vector<std::pair<int64_t, LoraRowGroup>> target_groups(DecodeLoraRows & rows, const DecodeLayerWeights & w, int t,
                                                            const float * x, int64_t in, const LoraOutput & o) {
    const int64_t B = rows.B, u_stride = DECODE_LORA_TARGETS * rows.rank_stride;
    const auto adapter_of = [&](int64_t b) { return static_cast<const void *>(w.lora[t * B + b].a); };
    std::vector<std::pair<int64_t, LoraRowGroup>> out;
    for (const auto & [b0, b1] : row_groups(B, adapter_of)) {
        float * u = rows.u.data() + (b0 * DECODE_LORA_TARGETS + t) * rows.rank_stride;
        out.push_back({b0, LoraRowGroup{b1 - b0, x ? x + b0 * in : nullptr, in, u, u_stride,
                                        o.y ? o.y + b0 * o.stride : nullptr, o.stride}});
    }
    return out;
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
        const auto groups = target_groups(rows, w, t, x, in, LoraOutput{});
        for (int64_t k0 = 0; k0 < rows.rank_stride; k0 += LORA_RANK_BLOCK) {  // a block's groups back to back
            for (const auto & [b0, g] : groups) {
                const DecodeLora & f = w.lora[t * rows.B + b0];
                if (f.a && k0 < f.rank && item++ % team == tid) {
                    lora_rank_block(f.a, f.rank, in, k0, f.scale, g);
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
        const auto groups = target_groups(rows, w, t, nullptr, 0, o);
        for (int64_t j0 = 0; j0 < o.out; j0 += LORA_OUT_BLOCK) {  // a block's groups back to back
            for (const auto & [b0, g] : groups) {
                const DecodeLora & f = w.lora[t * rows.B + b0];
                if (!(f.a || o.bias) || item++ % team != tid) {
                    continue;
                }
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
