// assign_datum_ranks (greedy longest-first by token count) and make_shard.
#include "dist/shard.h"

#include <algorithm>
#include <numeric>

namespace tinkerd::dist {

DatumRanks assign_datum_ranks(const std::vector<engine::ForwardBackwardInput> & inputs, int world_size) {
    struct Item {
        size_t input, datum;
        int64_t tokens;
    };
    std::vector<Item> items;
    DatumRanks ranks(inputs.size());
    for (size_t i = 0; i < inputs.size(); ++i) {
        ranks[i].assign(inputs[i].datums.size(), 0);
        for (size_t d = 0; d < inputs[i].datums.size(); ++d) {
            items.push_back({i, d, static_cast<int64_t>(inputs[i].datums[d].tokens.size())});
        }
    }
    std::stable_sort(items.begin(), items.end(), [](const Item & a, const Item & b) { return a.tokens > b.tokens; });
    std::vector<int64_t> load(static_cast<size_t>(std::max(1, world_size)), 0);
    for (const Item & item : items) {
        const auto least = std::min_element(load.begin(), load.end()) - load.begin();
        ranks[item.input][item.datum] = static_cast<int>(least);
        load[static_cast<size_t>(least)] += item.tokens;
    }
    return ranks;
}

Shard make_shard(const std::vector<engine::ForwardBackwardInput> & inputs, const DatumRanks & ranks, int rank) {
    Shard shard;
    for (size_t i = 0; i < inputs.size(); ++i) {
        std::vector<size_t> mine;
        for (size_t d = 0; d < ranks[i].size(); ++d) {
            if (ranks[i][d] == rank) {
                mine.push_back(d);
            }
        }
        if (mine.empty()) {
            continue;
        }
        engine::ForwardBackwardInput part;
        part.adapter = inputs[i].adapter;
        part.loss_fn = inputs[i].loss_fn;
        part.loss_fn_config = inputs[i].loss_fn_config;
        for (size_t d : mine) {
            part.datums.push_back(inputs[i].datums[d]);
        }
        shard.inputs.push_back(std::move(part));
        shard.source.push_back(i);
        shard.datums.push_back(std::move(mine));
    }
    return shard;
}

std::vector<int64_t> tokens_per_rank(const std::vector<engine::ForwardBackwardInput> & inputs, const DatumRanks & ranks,
                                     int world_size) {
    std::vector<int64_t> tokens(static_cast<size_t>(world_size), 0);
    for (size_t i = 0; i < inputs.size(); ++i) {
        for (size_t d = 0; d < ranks[i].size(); ++d) {
            tokens[static_cast<size_t>(ranks[i][d])] += static_cast<int64_t>(inputs[i].datums[d].tokens.size());
        }
    }
    return tokens;
}

}  // namespace tinkerd::dist
