// OutputStage: the thread that turns the engine's native sampling events into what clients get. The
// engine thread only pushes events (token ids + logprobs per request and step, then the request's
// outcome: its SampleOutput or an Error); this thread decodes text, cuts stop strings, writes SSE chunks,
// builds OpenAI bodies, encodes asample results (protobuf + legacy JSON) and completes futures (and so
// writes SQLite), so none of that delays the next decode step.
//
// One thread per App, not a pool: formatting a step's events costs far less than the decode step that
// made them, one consumer keeps every request's events in push order without per-request locks, and the
// machine's cores stay with the engine's intra-op pool. The queue is bounded: when it is full the engine
// thread waits for room (backpressure instead of unbounded memory; the stage itself never blocks on a
// client, because StreamWriter queues and drops on its own).
#pragma once

#include <atomic>
#include <condition_variable>
#include <cstdint>
#include <deque>
#include <functional>
#include <memory>
#include <mutex>
#include <optional>
#include <thread>
#include <vector>

#include "common/status.h"
#include "engine/engine.h"
#include "scheduler/sampling.h"

namespace tinkerd::api {

// One generated token of sample `index` of a request (the scheduler's native token event).
using GeneratedToken = scheduler::SampleToken;

// Where one sample request's events go; called on the output thread only, in push order.
class SampleSink {
  public:
    virtual ~SampleSink() = default;
    virtual void on_tokens(std::vector<GeneratedToken> tokens) { (void)tokens; }
    virtual void on_done(Result<engine::SampleOutput> output) = 0;
    // True once nobody wants the request's tokens (an OpenAI client that went away): its token events
    // are dropped. The final on_done is still delivered, so the sink can answer or clean up.
    virtual bool cancelled() const { return false; }
};

// A sink made of callbacks (asample futures, tests).
class FunctionSink : public SampleSink {
  public:
    using Tokens = std::function<void(std::vector<GeneratedToken>)>;
    using Done = std::function<void(Result<engine::SampleOutput>)>;
    using Cancelled = std::function<bool()>;
    explicit FunctionSink(Done done, Tokens tokens = nullptr, Cancelled cancelled = nullptr)
        : done_(std::move(done)), tokens_(std::move(tokens)), cancelled_(std::move(cancelled)) {}
    void on_tokens(std::vector<GeneratedToken> tokens) override {
        if (tokens_) {
            tokens_(std::move(tokens));
        }
    }
    void on_done(Result<engine::SampleOutput> output) override { done_(std::move(output)); }
    bool cancelled() const override { return cancelled_ && cancelled_(); }

  private:
    Done done_;
    Tokens tokens_;
    Cancelled cancelled_;
};

class OutputStage {
  public:
    explicit OutputStage(size_t capacity = 4096);
    ~OutputStage();  // stop()
    OutputStage(const OutputStage &) = delete;
    OutputStage & operator=(const OutputStage &) = delete;

    // Engine thread: queue an event (moved, never copied); waits while the queue is full.
    void push_tokens(std::shared_ptr<SampleSink> sink, std::vector<GeneratedToken> tokens);
    void push_done(std::shared_ptr<SampleSink> sink, Result<engine::SampleOutput> output);
    // Handles everything queued, then ends the thread; later pushes are handled on the caller's thread
    // (nothing is lost at shutdown).
    void stop();

    size_t capacity() const { return capacity_; }
    int64_t full_waits() const { return full_waits_.load(); }  // pushes that waited for room

  private:
    struct Event {
        std::shared_ptr<SampleSink> sink;
        std::vector<GeneratedToken> tokens;
        std::optional<Result<engine::SampleOutput>> done;  // set: the request's last event
    };
    void push(Event event);
    void loop();
    static void handle(Event & event);

    const size_t capacity_;
    std::mutex mutex_;
    std::condition_variable not_empty_;
    std::condition_variable not_full_;
    std::deque<Event> queue_;
    bool stopping_ = false;
    bool stopped_ = false;
    std::atomic<int64_t> full_waits_{0};
    std::thread thread_;
};

}  // namespace tinkerd::api
