// Row-wise LoRA for sampling: every row's delta from its own adapter in one pass over the rows (the
// BGMV idea: one kernel per projection however many adapters share the batch), without autograd.
#pragma once

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

}  // namespace tinkerd::engine
