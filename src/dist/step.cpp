// run_forward_backward_step: shard, run, gather, merge, decide, reduce (see step.h).
#include "dist/step.h"

#include <algorithm>
#include <cstring>
#include <map>
#include <set>

#include "dist/codec.h"
#include "dist/shard.h"

namespace tinkerd::dist {

using engine::AdapterId;
using engine::ForwardBackwardInput;
using engine::ForwardBackwardOutput;
using Outputs = std::vector<Result<ForwardBackwardOutput>>;

namespace {

// Metrics are named "<name>:<reduction>" (Tinker): sums add up, max/min keep the extreme, means are
// weighted by the datums behind them; anything else is summed.
void merge_metric(std::map<std::string, double> & into, std::map<std::string, double> & weights,
                  const std::string & key, double value, double weight) {
    const bool known = into.count(key) > 0;
    double & slot = into[key];
    auto ends_with = [&](const char * suffix) {
        const size_t n = std::strlen(suffix);
        return key.size() >= n && key.compare(key.size() - n, n, suffix) == 0;
    };
    if (!known) {
        slot = value;
    } else if (ends_with(":max")) {
        slot = std::max(slot, value);
    } else if (ends_with(":min")) {
        slot = std::min(slot, value);
    } else if (ends_with(":mean")) {
        slot = (slot * weights[key] + value * weight) / (weights[key] + weight);
    } else {
        slot += value;
    }
    weights[key] += weight;
}

// Rank 0: every rank's shard results back into one result per input.
Outputs merge_results(const std::vector<ForwardBackwardInput> & inputs, const DatumRanks & ranks,
                      const std::vector<Outputs> & per_rank) {
    Outputs merged;
    std::vector<std::map<std::string, double>> weights(inputs.size());
    for (const auto & input : inputs) {
        ForwardBackwardOutput out;
        out.logprobs.resize(input.datums.size());
        merged.emplace_back(std::move(out));
    }
    for (size_t r = 0; r < per_rank.size(); ++r) {
        const Shard shard = make_shard(inputs, ranks, static_cast<int>(r));
        for (size_t k = 0; k < shard.source.size() && k < per_rank[r].size(); ++k) {
            auto & target = merged[shard.source[k]];
            const auto & part = per_rank[r][k];
            if (!target.ok()) {
                continue;
            }
            if (!part.ok()) {
                target = part.error();
                continue;
            }
            for (size_t j = 0; j < shard.datums[k].size() && j < part->logprobs.size(); ++j) {
                target->logprobs[shard.datums[k][j]] = part->logprobs[j];
            }
            for (const auto & [key, value] : part->metrics) {
                merge_metric(target->metrics, weights[shard.source[k]], key, value,
                             static_cast<double>(shard.datums[k].size()));
            }
        }
    }
    return merged;
}

// Per adapter of the batch (in id order): 1 when every input of it succeeded. Inputs of a failed adapter
// that succeeded themselves get its error, since its gradients are dropped.
std::vector<uint8_t> decide_adapters(const std::vector<ForwardBackwardInput> & inputs,
                                     const std::vector<AdapterId> & ids, Outputs & merged) {
    std::vector<uint8_t> ok(ids.size(), 1);
    for (size_t a = 0; a < ids.size(); ++a) {
        std::optional<Error> first;
        for (size_t i = 0; i < inputs.size(); ++i) {
            if (inputs[i].adapter == ids[a] && !merged[i].ok() && !first) {
                first = merged[i].error();
            }
        }
        if (!first) {
            continue;
        }
        ok[a] = 0;
        for (size_t i = 0; i < inputs.size(); ++i) {
            if (inputs[i].adapter == ids[a] && merged[i].ok()) {
                merged[i] = Error{first->kind, "another part of this batch failed: " + first->message};
            }
        }
    }
    return ok;
}

// The batch's adapters in order of first appearance. Every rank gets the same inputs in the same order, so
// this order is the same on every rank even though each numbers its adapters its own way (a follower
// numbers them as they reach it): the per-adapter all-reduces must pair the same run on every rank.
std::vector<AdapterId> trained_adapters(const std::vector<ForwardBackwardInput> & inputs) {
    std::vector<AdapterId> ids;
    std::set<AdapterId> seen;
    for (const auto & input : inputs) {
        if (input.adapter != engine::BASE_MODEL && seen.insert(input.adapter).second) {
            ids.push_back(input.adapter);
        }
    }
    return ids;
}

// Copies each adapter's gradients aside and zeroes them, so the step's own gradients can be summed alone.
std::vector<std::vector<float>> set_gradients_aside(engine::Engine & local, const std::vector<AdapterId> & ids) {
    std::vector<std::vector<float>> saved(ids.size());
    for (size_t a = 0; a < ids.size(); ++a) {
        (void)local.visit_gradients(ids[a], [&](float * data, int64_t n) {
            saved[a].assign(data, data + n);
            std::fill(data, data + n, 0.0f);
        });
    }
    return saved;
}

// ok: sum the new gradients over ranks, then add the ones set aside; not ok, or any all-reduce failed:
// every adapter gets the set-aside gradients back, so a failed step leaves no partial sum anywhere.
Result<void> finish_gradients(engine::Engine & local, DataParallelGroup & group, const std::vector<AdapterId> & ids,
                              const std::vector<std::vector<float>> & saved, const std::vector<uint8_t> & ok) {
    Result<void> status;
    for (size_t a = 0; a < ids.size() && status.ok(); ++a) {
        if (ok[a]) {
            (void)local.visit_gradients(ids[a],
                                        [&](float * data, int64_t n) { status = group.all_reduce_sum(data, n); });
        }
    }
    for (size_t a = 0; a < ids.size(); ++a) {
        (void)local.visit_gradients(ids[a], [&](float * data, int64_t n) {
            const bool keep_new = ok[a] && status.ok() && n == static_cast<int64_t>(saved[a].size());
            for (int64_t j = 0; j < n && j < static_cast<int64_t>(saved[a].size()); ++j) {
                data[j] = keep_new ? data[j] + saved[a][static_cast<size_t>(j)] : saved[a][static_cast<size_t>(j)];
            }
        });
    }
    return status;
}

Outputs fail_all(size_t n, const Error & error) {
    return Outputs(n, Error{ErrorKind::INTERNAL, error.message});
}

}  // namespace

Outputs run_forward_backward_step(engine::Engine & local, DataParallelGroup & group,
                                  const std::vector<ForwardBackwardInput> & inputs, bool backward) {
    const DatumRanks ranks = assign_datum_ranks(inputs, group.size());
    const Shard shard = make_shard(inputs, ranks, group.rank());
    const std::vector<AdapterId> ids = backward ? trained_adapters(inputs) : std::vector<AdapterId>{};
    const auto saved = set_gradients_aside(local, ids);
    Outputs mine = shard.inputs.empty() ? Outputs{} : local.forward_backward(shard.inputs, backward);
    ByteWriter writer;
    write_outputs(writer, mine);
    auto gathered = group.gather_to_root(writer.take());
    std::vector<uint8_t> ok(ids.size(), 0);
    Outputs merged;
    if (gathered.ok() && group.rank() == 0) {
        std::vector<Outputs> per_rank;
        for (const auto & bytes : *gathered) {
            ByteReader reader(bytes);
            auto outputs = read_outputs(reader);
            per_rank.push_back(outputs.ok() ? std::move(outputs).value() : fail_all(inputs.size(), outputs.error()));
        }
        merged = merge_results(inputs, ranks, per_rank);
        ok = decide_adapters(inputs, ids, merged);
    }
    Result<void> status = gathered.ok() ? Result<void>() : Result<void>(gathered.error());
    if (status.ok() && !ids.empty()) {
        status = group.broadcast_bytes(ok);
    }
    if (!status.ok()) {
        ok.assign(ids.size(), 0);
    }
    const auto reduced = finish_gradients(local, group, ids, saved, ok);
    if (!reduced.ok()) {
        status = reduced;
    }
    if (!status.ok()) {
        return group.rank() == 0 ? fail_all(inputs.size(), status.error()) : Outputs{};
    }
    return merged;
}

}  // namespace tinkerd::dist
