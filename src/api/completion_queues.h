// CompletionQueues: SDK 0.38's retrieve_futures, one completion queue per sampling session clone (sampler id,
// seq_id / 1e9). A finished or failed asample appends an event with the queue's next cursor; a poll returns
// the events after its prev_cursor (trimming those at or before it and the acknowledged ones), or is held
// until one arrives or its timeout passes (a thread of its own answers timed-out polls).
#pragma once

#include <chrono>
#include <condition_variable>
#include <cstdint>
#include <deque>
#include <functional>
#include <map>
#include <mutex>
#include <string>
#include <thread>
#include <vector>

#include <nlohmann/json.hpp>

namespace tinkerd::api {

class CompletionQueues {
  public:
    struct Event {
        int64_t cursor = 0;
        std::string request_id;
        bool failed = false;
        int64_t payload_bytes = 0;
    };
    // Gets {"completions": [...], "cursor": N}; called once per poll, on the poller's or the appender's thread.
    using Answer = std::function<void(nlohmann::json)>;

    static constexpr size_t MAX_EVENTS_PER_QUEUE = 10000;  // the oldest give way (a client that never polls)

    CompletionQueues();
    ~CompletionQueues();
    CompletionQueues(const CompletionQueues &) = delete;
    CompletionQueues & operator=(const CompletionQueues &) = delete;

    static std::string key(const std::string & sampler_id, int64_t clone);

    void append(const std::string & queue, const std::string & request_id, bool failed, int64_t payload_bytes);
    // Drops acknowledged and seen events, then answers at once when events follow prev_cursor or timeout is 0,
    // else holds the poll up to `timeout`.
    void poll(const std::string & queue, int64_t prev_cursor, const std::vector<std::string> & acknowledged,
              std::chrono::milliseconds timeout, Answer answer);
    // Queues without events or polls since `idle` are forgotten (the sweeper calls it).
    void forget_idle(std::chrono::steady_clock::duration idle);
    void stop();  // answers every held poll (empty) and ends the timer thread

  private:
    struct Waiter {
        int64_t prev_cursor = 0;
        std::chrono::steady_clock::time_point deadline;
        Answer answer;
    };
    struct Queue {
        std::deque<Event> events;
        int64_t next_cursor = 0;  // set at creation: the Unix time in microseconds, so that cursors grow across
                                  // restarts (a client's prev_cursor from the last process is below every new one)
        std::vector<Waiter> waiters;
        std::chrono::steady_clock::time_point last_used;
    };

    static nlohmann::json page(const Queue & queue, int64_t prev_cursor);
    Queue & queue_locked(const std::string & key);
    void timer_loop();

    std::mutex mutex_;
    std::condition_variable wake_;
    std::map<std::string, Queue> queues_;
    bool stopping_ = false;
    std::thread timer_;
};

}  // namespace tinkerd::api
