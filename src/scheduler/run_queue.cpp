// RunQueue implementation: seq_id admission rules and in-order release for one training run.
// See tinker-protocol.md §4.9: ops run strictly in seq_id order; identical resends are answered once.
#include "scheduler/run_queue.h"

#include <algorithm>
#include <iterator>

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
    if (seq_id - next_seq_ > kMaxAhead) {
        return {Admission::Kind::TOO_FAR, ""};
    }
    if (queue_.size() >= max_queued_ && seq_id != next_seq_) {  // the op everything waits for always fits
        return {Admission::Kind::QUEUE_FULL, ""};
    }
    history_.emplace(seq_id, Admitted{body_hash, request_id});
    queue_.emplace(seq_id, QueuedOp{seq_id, request_id, std::move(op)});
    return {Admission::Kind::ACCEPTED, request_id};
}

bool RunQueue::skip(int64_t seq_id) {
    if (seq_id < next_seq_ || seq_id - next_seq_ > kMaxAhead || history_.count(seq_id) > 0) {
        return false;  // already consumed or admitted, or too far ahead to have been admitted: nothing to skip
    }
    if (seq_id == next_seq_) {
        advance();
        return true;
    }
    return skipped_.insert(seq_id).second;
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

int64_t RunQueue::expire_gap(Clock::time_point now, Clock::duration timeout) {
    if (queue_.empty() || ready()) {
        hole_since_.reset();
        return 0;
    }
    if (!hole_since_) {
        hole_since_ = now;
    }
    if (now - *hole_since_ < timeout) {
        return 0;
    }
    const int64_t first_queued = queue_.begin()->first;
    const auto released = skipped_.lower_bound(first_queued);  // skipped_ holds only seq_ids above next_seq_
    const int64_t given_up = first_queued - next_seq_ - std::distance(skipped_.begin(), released);
    skipped_.erase(skipped_.begin(), released);
    next_seq_ = first_queued;
    hole_since_.reset();
    return given_up;
}

std::optional<RunQueue::Clock::time_point> RunQueue::gap_deadline(Clock::duration timeout) const {
    if (!hole_since_ || queue_.empty() || ready()) {
        return std::nullopt;
    }
    return *hole_since_ + timeout;
}

void RunQueue::advance() {
    hole_since_.reset();
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

namespace {

// Rotates `items` (sorted by key) so that it starts after `last`.
template <typename T, typename Key>
void rotate_after(std::vector<T> & items, const std::string & last, Key key) {
    auto first = std::find_if(items.begin(), items.end(), [&](const T & item) { return key(item) > last; });
    std::rotate(items.begin(), first, items.end());
}

std::string value_or_empty(const std::map<std::string, std::string> & map, const std::string & key) {
    auto it = map.find(key);
    return it == map.end() ? std::string() : it->second;
}

}  // namespace

std::vector<ReadyRun> fair_order(std::vector<ReadyRun> ready, const std::map<std::string, std::string> & tenant_of,
                                 const std::string & last_tenant,
                                 const std::map<std::string, std::string> & last_run_of) {
    std::map<std::string, std::vector<ReadyRun>> by_tenant;
    for (ReadyRun run : ready) {
        by_tenant[value_or_empty(tenant_of, run->first)].push_back(run);
    }
    std::vector<std::pair<std::string, std::vector<ReadyRun>>> tenants(by_tenant.begin(), by_tenant.end());
    rotate_after(tenants, last_tenant, [](const auto & t) { return t.first; });
    size_t most = 0;
    for (auto & [tenant, list] : tenants) {
        rotate_after(list, value_or_empty(last_run_of, tenant), [](ReadyRun r) { return r->first; });
        most = std::max(most, list.size());
    }
    std::vector<ReadyRun> order;
    for (size_t round = 0; round < most; ++round) {
        for (auto & [tenant, list] : tenants) {
            if (round < list.size()) {
                order.push_back(list[round]);
            }
        }
    }
    return order;
}

}  // namespace tinkerd::scheduler
