// Row-wise LoRA for sampling: every row's delta from its own adapter in one pass over the rows (the
// BGMV idea: one kernel per projection however many adapters share the batch), without autograd.
#pragma once

#include <utility>
#include <vector>

#include <torch/torch.h>

#include "engine/lora.h"

namespace tinkerd::engine {

// Whether add_lora_rows can run these segments: no autograd, CPU, fp32, and few rows per segment
// (decode steps; a long prompt's segment is one matmul pair instead).
bool lora_rows_applicable(const torch::Tensor & y, const torch::Tensor & x, const std::vector<RowSegment> & segments);

// y[r] += B_a·(scale_a·A_a·x[r]) in place for each row r whose segment's adapter a targets (layer, target).
// y [T, out] fp32 (row stride free, unit column stride); x [T, in] fp32 contiguous.
void add_lora_rows(torch::Tensor & y, const torch::Tensor & x, const std::vector<RowSegment> & segments, int64_t layer,
                   LoraTarget target);

// Rows per segment beyond which a segment takes matmuls: a no-grad forward's rows must be the bits its
// forward_backward (autograd: matmuls) gets, so only decode-sized segments run row-wise. (Decode steps alone
// taking up to 64 rows row-wise, so that one adapter's 32 samples stay in the fused decode region, was measured
// no faster than their matmuls: docs/benchmarks.md, 2026-12-07 20:40.)
inline constexpr int64_t LORA_ROWS_MAX_SEGMENT = 16;
inline constexpr int64_t LORA_RANK_BLOCK = 16;
inline constexpr int64_t LORA_OUT_BLOCK = 256;
inline constexpr int64_t LORA_ROW_GROUP = 8;

// add_lora_rows' work items, which run_decode_layers (decode_layers.h) also runs inside its own parallel region
// (same items, same bits), for a group of up to LORA_ROW_GROUP rows of one adapter: u[g, k0 .. k0 + r) =
// scale·A[k0 .. k0 + r)·x[g] with r = min(16, rank - k0) (A [rank, in]), and y[g, j0 .. j0 + n) += B[j0 .. j0 + n)·u[g]
// with n = min(256, out - j0) (B [out, rank]). Each row's values do not depend on the group it is computed in.
struct LoraRowGroup {
    int64_t rows;  // 1 .. LORA_ROW_GROUP
    const float * x;
    int64_t x_stride;  // the group's inputs [rows, in]
    float * u;
    int64_t u_stride;  // their u [rows, rank]
    float * y;
    int64_t y_stride;  // their outputs [rows, out]
};
void lora_rank_block(const float * a, int64_t rank, int64_t in, int64_t k0, float scale, const LoraRowGroup & g);
void lora_out_block(const float * b, int64_t rank, int64_t out, int64_t j0, const LoraRowGroup & g);

// Rows [0, n) are grouped as consecutive rows with the same key (their adapter), at most LORA_ROW_GROUP rows each:
// the end of the group that starts at row `begin` (no allocation: the decode region calls it on its hot path).
template <typename Key>
int64_t row_group_end(int64_t n, int64_t begin, const Key & key) {
    int64_t end = begin + 1;
    while (end < n && end - begin < LORA_ROW_GROUP && key(end) == key(begin)) {
        ++end;
    }
    return end;
}

// Every group of rows [0, n) as [begin, end) (row_group_end's grouping).
template <typename Key>
std::vector<std::pair<int64_t, int64_t>> row_groups(int64_t n, const Key & key) {
    std::vector<std::pair<int64_t, int64_t>> groups;
    for (int64_t r = 0; r < n; r = groups.back().second) {
        groups.emplace_back(r, row_group_end(n, r, key));
    }
    return groups;
}

}  // namespace tinkerd::engine
