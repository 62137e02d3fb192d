// One data-parallel forward_backward, run by every rank on the same batch (adapter ids already in the
// rank's own numbering): each rank runs its shard (shard.h) with its adapters' gradients set aside,
// rank 0 gathers and merges the results (per-datum logprobs back in order, metrics reduced), decides per
// adapter whether every part of its inputs succeeded, and then every rank either all-reduces the new
// gradients (fp32, one flat buffer per adapter) and adds them to the ones set aside, or restores those:
// a failed input changes nothing, as in one process. Afterwards every rank holds the same gradients.
#pragma once

#include <vector>

#include "dist/process_group.h"
#include "engine/engine.h"

namespace tinkerd::dist {

// Rank 0 gets one result per input; the other ranks an empty list.
std::vector<Result<engine::ForwardBackwardOutput>> run_forward_backward_step(
    engine::Engine & local, DataParallelGroup & group, const std::vector<engine::ForwardBackwardInput> & inputs,
    bool backward);

}  // namespace tinkerd::dist
