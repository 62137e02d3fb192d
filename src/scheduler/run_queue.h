// RunQueue: one training run's ops, held in seq_id order. Decides admission (ACCEPTED, DUPLICATE,
// CONFLICT, STALE), remembers which seq_ids were admitted or skipped, and releases the op at next_seq.
// Not thread-safe: the EngineWorker guards it with its own mutex.
#pragma once

#include <cstdint>
#include <map>
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
    // How many admitted seq_ids below next_seq are remembered for DUPLICATE / CONFLICT answers.
    static constexpr int64_t kHistoryKeep = 100000;

    explicit RunQueue(int64_t next_seq) : next_seq_(next_seq) {}

    // Queues `op` when seq_id is new; else says why not (the op is then left untouched).
    Admission admit(int64_t seq_id, const std::string & body_hash, const std::string & request_id, Op & op);
    // Marks seq_id as consumed without an op.
    void skip(int64_t seq_id);

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
    std::map<int64_t, QueuedOp> queue_;    // waiting ops by seq_id
    std::map<int64_t, Admitted> history_;  // every admitted seq_id (recent ones below next_seq)
    std::set<int64_t> skipped_;            // skipped seq_ids above next_seq
};

// Tokens of a forward_backward op (sum of its datums' input lengths).
int64_t op_tokens(const Op & op);

}  // namespace tinkerd::scheduler
