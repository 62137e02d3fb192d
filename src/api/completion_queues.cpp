// CompletionQueues (completion_queues.h): events, polls held with a deadline, and the timer thread.
#include "api/completion_queues.h"

#include <algorithm>
#include <unordered_set>

namespace tinkerd::api {

using json = nlohmann::json;
using Clock = std::chrono::steady_clock;

CompletionQueues::CompletionQueues() : timer_([this] { timer_loop(); }) {}

CompletionQueues::~CompletionQueues() {
    stop();
}

std::string CompletionQueues::key(const std::string & sampler_id, int64_t clone) {
    return sampler_id + "#" + std::to_string(clone);
}

CompletionQueues::Queue & CompletionQueues::queue_locked(const std::string & key) {
    auto [it, created] = queues_.try_emplace(key);
    if (created) {
        const auto now = std::chrono::system_clock::now().time_since_epoch();
        it->second.next_cursor = std::chrono::duration_cast<std::chrono::microseconds>(now).count();
    }
    return it->second;
}

json CompletionQueues::page(const Queue & queue, int64_t prev_cursor) {
    json completions = json::array();
    int64_t cursor = prev_cursor;
    for (const Event & e : queue.events) {
        if (e.cursor <= prev_cursor) {
            continue;
        }
        json c = {{"state", e.failed ? "failed" : "finished"}, {"request_id", e.request_id}};
        if (!e.failed) {
            c["response_payload_uncompressed_size"] = e.payload_bytes;
        }
        completions.push_back(std::move(c));
        cursor = std::max(cursor, e.cursor);
    }
    return json{{"completions", completions}, {"cursor", cursor}};
}

void CompletionQueues::append(const std::string & queue_key, const std::string & request_id, bool failed,
                              int64_t payload_bytes) {
    std::vector<std::pair<Answer, json>> ready;
    {
        std::lock_guard<std::mutex> lock(mutex_);
        Queue & q = queue_locked(queue_key);
        q.events.push_back({q.next_cursor++, request_id, failed, payload_bytes});
        if (q.events.size() > MAX_EVENTS_PER_QUEUE) {
            q.events.pop_front();
        }
        q.last_used = Clock::now();
        for (Waiter & w : q.waiters) {
            ready.emplace_back(std::move(w.answer), page(q, w.prev_cursor));
        }
        q.waiters.clear();
    }
    for (auto & [answer, body] : ready) {
        answer(std::move(body));
    }
}

void CompletionQueues::poll(const std::string & queue_key, int64_t prev_cursor,
                            const std::vector<std::string> & acknowledged, std::chrono::milliseconds timeout,
                            Answer answer) {
    json now;
    {
        std::lock_guard<std::mutex> lock(mutex_);
        Queue & q = queue_locked(queue_key);
        q.last_used = Clock::now();
        const std::unordered_set<std::string> acked(acknowledged.begin(),
                                                    acknowledged.end());  // a long list stays cheap
        std::erase_if(q.events,
                      [&](const Event & e) { return e.cursor <= prev_cursor || acked.count(e.request_id) > 0; });
        now = page(q, prev_cursor);
        if (now["completions"].empty() && timeout.count() > 0 && !stopping_) {
            q.waiters.push_back({prev_cursor, Clock::now() + timeout, std::move(answer)});
            wake_.notify_all();
            return;
        }
    }
    answer(std::move(now));
}

void CompletionQueues::timer_loop() {
    std::unique_lock<std::mutex> lock(mutex_);
    while (!stopping_) {
        auto next = Clock::time_point::max();
        std::vector<std::pair<Answer, json>> due;
        const auto now = Clock::now();
        for (auto & [name, q] : queues_) {
            for (auto it = q.waiters.begin(); it != q.waiters.end();) {
                if (it->deadline <= now) {
                    due.emplace_back(std::move(it->answer), page(q, it->prev_cursor));
                    it = q.waiters.erase(it);
                } else {
                    next = std::min(next, it->deadline);
                    ++it;
                }
            }
        }
        if (!due.empty()) {
            lock.unlock();
            for (auto & [answer, body] : due) {
                answer(std::move(body));
            }
            lock.lock();
            continue;
        }
        if (next == Clock::time_point::max()) {
            wake_.wait(lock);
        } else {
            wake_.wait_until(lock, next);
        }
    }
}

void CompletionQueues::forget_idle(Clock::duration idle) {
    std::lock_guard<std::mutex> lock(mutex_);
    const auto before = Clock::now() - idle;
    std::erase_if(queues_,
                  [&](const auto & entry) { return entry.second.waiters.empty() && entry.second.last_used < before; });
}

void CompletionQueues::stop() {
    std::vector<std::pair<Answer, json>> held;
    {
        std::lock_guard<std::mutex> lock(mutex_);
        if (stopping_) {
            return;
        }
        stopping_ = true;
        for (auto & [name, q] : queues_) {
            for (Waiter & w : q.waiters) {
                held.emplace_back(std::move(w.answer), page(q, w.prev_cursor));
            }
            q.waiters.clear();
        }
    }
    wake_.notify_all();
    if (timer_.joinable()) {
        timer_.join();
    }
    for (auto & [answer, body] : held) {
        answer(std::move(body));
    }
}

}  // namespace tinkerd::api
