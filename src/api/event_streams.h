// EventStreams: the open Server-Sent-Event streams of the process (the console's live pages, GET
// /api/v1/training_runs/{run_id}/events and GET /api/v1/events) and the one thread that feeds them: a
// bounded number of slots, wake-ups by topic (a run whose points were written; ANY_TOPIC: every wake-up, at
// most once per `coalesce`) and a periodic tick, heartbeat comments, and the end of every stream at stop().
// It knows nothing of runs: each stream brings a Refresh that says what to send.
#pragma once

#include <atomic>
#include <chrono>
#include <condition_variable>
#include <cstddef>
#include <functional>
#include <memory>
#include <mutex>
#include <set>
#include <string>
#include <thread>
#include <vector>

#include "http/server.h"

namespace tinkerd::api {

struct EventStreamOptions {
    size_t max_streams = 64;                     // open at once; more are refused (429)
    std::chrono::milliseconds tick{2000};        // every stream is refreshed at least this often
    std::chrono::milliseconds heartbeat{15000};  // a comment line after this long without a write
    std::chrono::milliseconds coalesce{1000};    // an ANY_TOPIC stream is refreshed by wake-ups at most this often
};

class EventStreams {
  public:
    // Called on the feeding thread (never on an engine or I/O thread): the SSE text to send now, "" for
    // nothing. An exception ends the stream.
    using Refresh = std::function<std::string()>;
    struct Stream;  // one open (or reserved) stream
    // A stream on this topic is woken by every wake-up (whatever its topics), at most once per `coalesce`.
    static constexpr const char * ANY_TOPIC = "*";

    explicit EventStreams(EventStreamOptions options);
    ~EventStreams();  // stop()
    EventStreams(const EventStreams &) = delete;
    EventStreams & operator=(const EventStreams &) = delete;

    // Takes a slot for a stream on `topics` (woken by any of them): nullptr when every slot is taken or the
    // streams are stopped. The slot is held until the stream closes (attach) or the handle is dropped unattached.
    std::shared_ptr<Stream> reserve(std::set<std::string> topics, Refresh refresh);
    // Gives the reserved stream its writer (from http::Response::stream); its first refresh comes at once.
    void attach(const std::shared_ptr<Stream> & stream, std::shared_ptr<http::StreamWriter> writer);
    // Streams on these topics are refreshed now rather than at the next tick. Never blocks for long: any thread.
    void wake(const std::set<std::string> & topics);
    // Ends every stream (the terminating chunk; the client sees a clean end) and the thread; later
    // reserve() calls get nullptr. Idempotent.
    void stop();

    size_t open_streams() const;
    size_t max_streams() const { return options_.max_streams; }

  private:
    void loop();
    // Marks the streams the topics in woken_ name as pending (then clears it); returns those due now (every
    // one on a tick; else pending ones past their coalescing gap) and sets `wake_at` to the next pending one.
    std::vector<std::shared_ptr<Stream>> due_streams(bool tick, std::chrono::steady_clock::time_point & wake_at);
    // Refreshes the streams `due` (woken, or all on a tick), then heartbeats any of `all` quiet too long.
    void feed(const std::vector<std::shared_ptr<Stream>> & due, const std::vector<std::shared_ptr<Stream>> & all);

    const EventStreamOptions options_;
    mutable std::mutex mutex_;  // guards streams_, woken_, stopping_ (the slot count is atomic)
    std::condition_variable wake_;
    std::vector<std::shared_ptr<Stream>> streams_;      // attached ones (dropped by the thread once released)
    std::shared_ptr<std::atomic<size_t>> slots_taken_;  // reserved, not yet released (a Stream frees its own)
    std::set<std::string> woken_;                       // topics to refresh at once
    bool stopping_ = false;
    std::thread thread_;
};

}  // namespace tinkerd::api
