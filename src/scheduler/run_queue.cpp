// RunQueue implementation: seq_id admission rules and in-order release for one training run.
// See tinker-protocol.md §4.9: ops run strictly in seq_id order; identical resends are answered once.
#include "scheduler/run_queue.h"

namespace tinkerd::scheduler {

Admission RunQueue::admit(int64_t seq_id, const std::string & body_hash, const std::string & request_id, Op & op) {
    auto seen = history_.find(seq_id);
    if (seen != history_.end()) {
        if (seen->second.body_hash == body_hash) {
            return {Admission::Kind::DUPLICATE, seen->second.request_id};
        }
        return {Admission::Kind::CONFLICT, seen->second.request_id};
    }
    if (seq_id < next_seq_ || skipped_.count(seq_id) > 0) {
        return {Admission::Kind::STALE, ""};
    }
    history_.emplace(seq_id, Admitted{body_hash, request_id});
    queue_.emplace(seq_id, QueuedOp{seq_id, request_id, std::move(op)});
    return {Admission::Kind::ACCEPTED, request_id};
}

void RunQueue::skip(int64_t seq_id) {
    if (seq_id < next_seq_ || history_.count(seq_id) > 0) {
        return;  // already consumed or admitted: nothing to skip
    }
    if (seq_id == next_seq_) {
        advance();
    } else {
        skipped_.insert(seq_id);
    }
}

bool RunQueue::ready() const {
    return !queue_.empty() && queue_.begin()->first == next_seq_;
}

const QueuedOp & RunQueue::head() const {
    return queue_.begin()->second;
}

QueuedOp RunQueue::pop_head() {
    auto node = queue_.extract(queue_.begin());
    advance();
    return std::move(node.mapped());
}

std::vector<QueuedOp> RunQueue::drain() {
    std::vector<QueuedOp> ops;
    ops.reserve(queue_.size());
    for (auto & [seq, queued] : queue_) {
        ops.push_back(std::move(queued));
    }
    queue_.clear();
    return ops;
}

void RunQueue::advance() {
    next_seq_++;
    while (!skipped_.empty() && *skipped_.begin() <= next_seq_) {
        if (*skipped_.begin() == next_seq_) {
            next_seq_++;
        }
        skipped_.erase(skipped_.begin());
    }
    // Forget admissions far behind; a resend that old is answered STALE instead of DUPLICATE.
    while (!history_.empty() && history_.begin()->first < next_seq_ - kHistoryKeep) {
        history_.erase(history_.begin());
    }
}

int64_t op_tokens(const Op & op) {
    int64_t tokens = 0;
    for (const auto & datum : op.fb_input.datums) {
        tokens += static_cast<int64_t>(datum.tokens.size());
    }
    return tokens;
}

}  // namespace tinkerd::scheduler
