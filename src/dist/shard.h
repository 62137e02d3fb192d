// How a forward_backward batch is split over the ranks of a data-parallel group: every datum of every
// input goes to one rank, longest first to the rank with the fewest tokens so far (ties: the lowest
// rank), so the split is balanced by tokens and the same on every rank. A rank's shard keeps each
// input's adapter, loss and config, so several runs' ops never mix their gradients.
#pragma once

#include <cstddef>
#include <vector>

#include "engine/engine.h"

namespace tinkerd::dist {

// ranks[i][d]: the rank that runs datum d of input i.
using DatumRanks = std::vector<std::vector<int>>;

DatumRanks assign_datum_ranks(const std::vector<engine::ForwardBackwardInput> & inputs, int world_size);

struct Shard {
    std::vector<engine::ForwardBackwardInput> inputs;  // this rank's part of each input it has datums of
    std::vector<size_t> source;                        // per shard input: its input in the batch
    std::vector<std::vector<size_t>> datums;           // per shard input: its datums' indices in that input
};

Shard make_shard(const std::vector<engine::ForwardBackwardInput> & inputs, const DatumRanks & ranks, int rank);

// Tokens each rank runs under `ranks` (for logs and tests).
std::vector<int64_t> tokens_per_rank(const std::vector<engine::ForwardBackwardInput> & inputs, const DatumRanks & ranks,
                                     int world_size);

}  // namespace tinkerd::dist
