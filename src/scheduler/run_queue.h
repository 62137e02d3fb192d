// RunQueue: one training run's ops, held in seq_id order. Decides admission (ACCEPTED, DUPLICATE,
// CONFLICT, STALE), remembers which seq_ids were admitted or skipped, and releases the op at next_seq.
// fair_order: the round-robin order (tenants, then runs within a tenant) in which the worker serves ready
// runs. Not thread-safe: the EngineWorker guards them with its own mutex.
#pragma once

#include <chrono>
#include <cstdint>
#include <map>
#include <optional>
#include <set>
#include <string>
#include <utility>
#include <vector>

#include "scheduler/worker.h"

namespace tinkerd::scheduler {

struct QueuedOp {
    int64_t seq_id = 0;
    std::string request_id;
    Op op;
};

class RunQueue {
  public:
    using Clock = std::chrono::steady_clock;
    // How many admitted seq_ids below next_seq are remembered for DUPLICATE / CONFLICT answers.
    static constexpr int64_t kHistoryKeep = 100000;
    // How far ahead of next_seq a seq_id may be: further ones are TOO_FAR (a client never has that many
    // requests in flight; without a bound one request could park an op, or a skip, forever).
    static constexpr int64_t kMaxAhead = 10000;

    // `max_queued`: ops waiting at once (beyond it: QUEUE_FULL, the client retries later).
    explicit RunQueue(int64_t next_seq, size_t max_queued = 1024) : next_seq_(next_seq), max_queued_(max_queued) {}

    // Queues `op` when seq_id is new; else says why not (the op is then left untouched).
    Admission admit(int64_t seq_id, const std::string & body_hash, const std::string & request_id, Op & op);
    // Marks seq_id as consumed without an op (a request that carried it was refused). False, changing
    // nothing, when it already was consumed (run, skipped, given up), is admitted, or is beyond kMaxAhead.
    bool skip(int64_t seq_id);

    // A hole in the order: the run holds ops, but not the one at next_seq. Called by the worker each time it
    // looks for work: the first call that sees the hole starts its clock; once the hole is `timeout` old,
    // every missing seq_id up to the first queued op is given up (as if skipped: a late arrival is STALE)
    // and their count returned (skipped ones in the range not counted), else 0. A skip of next_seq (a
    // request refused with its seq_id known) ends the hole at once.
    int64_t expire_gap(Clock::time_point now, Clock::duration timeout);
    // When the current hole's wait ends, or nullopt when there is no hole (or expire_gap has not seen it).
    std::optional<Clock::time_point> gap_deadline(Clock::duration timeout) const;

    // True when the op at next_seq is queued.
    bool ready() const;
    // The op at next_seq; only when ready().
    const QueuedOp & head() const;
    // Removes the op at next_seq and advances past it (and past skipped seq_ids after it).
    QueuedOp pop_head();
    // Removes every queued op (the run is closing).
    std::vector<QueuedOp> drain();

    int64_t next_seq() const { return next_seq_; }
    size_t queued() const { return queue_.size(); }

  private:
    struct Admitted {
        std::string body_hash;
        std::string request_id;
    };
    void advance();

    int64_t next_seq_;
    size_t max_queued_;
    std::map<int64_t, QueuedOp> queue_;            // waiting ops by seq_id
    std::map<int64_t, Admitted> history_;          // every admitted seq_id (recent ones below next_seq)
    std::set<int64_t> skipped_;                    // skipped seq_ids above next_seq
    std::optional<Clock::time_point> hole_since_;  // since when next_seq has been missing with ops queued
};

// Tokens of a forward_backward op (sum of its datums' input lengths).
int64_t op_tokens(const Op & op);

// A run (id and queue) as the EngineWorker holds it.
using ReadyRun = std::pair<const std::string, RunQueue> *;

// The worker policy's (2) order of `ready` runs: tenants (tenant_of) in round-robin order starting after
// `last_tenant`, each tenant's runs in round-robin order starting after last_run_of[tenant], interleaved
// one run per tenant a round.
std::vector<ReadyRun> fair_order(std::vector<ReadyRun> ready, const std::map<std::string, std::string> & tenant_of,
                                 const std::string & last_tenant,
                                 const std::map<std::string, std::string> & last_run_of);

}  // namespace tinkerd::scheduler
