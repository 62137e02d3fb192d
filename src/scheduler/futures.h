// FutureTable: the server side of Tinker futures. A submit creates a pending future; the engine thread
// completes or fails it; retrieve_future long-polls it with a deadline. Thread-safe. One timer thread
// answers the polls whose deadline passes. Finished futures are handed to a persistence callback
// (the database) and looked up there once evicted from memory or after a restart.
#pragma once

#include <chrono>
#include <cstddef>
#include <functional>
#include <memory>
#include <optional>
#include <string>

namespace tinkerd::scheduler {

struct FutureOutcome {
    enum class State { PENDING, DONE, FAILED, UNKNOWN };
    State state = State::UNKNOWN;
    std::string tenant;
    std::string request_type;  // "ForwardBackward", "OptimStep", ...
    std::string json;          // DONE: the JSON success body
    std::string proto;         // DONE: the protobuf body, "" when the type has none
    std::string error;         // FAILED: message
    std::string category;      // FAILED: "user" or "server"
};

struct FutureTableOptions {
    size_t max_finished_in_memory = 20000;  // older finished futures are dropped (still in the DB)
    // Called once per finished future, on the thread that finished it (write it to the DB).
    std::function<void(const std::string & request_id, const FutureOutcome &)> on_finish;
    // Asked for ids unknown in memory (a finished future from the DB); nullopt = unknown.
    std::function<std::optional<FutureOutcome>(const std::string & request_id)> lookup;
};

class FutureTable {
  public:
    explicit FutureTable(FutureTableOptions options);
    ~FutureTable();  // answers every waiting poll with PENDING, stops the timer thread
    FutureTable(const FutureTable &) = delete;
    FutureTable & operator=(const FutureTable &) = delete;

    // A new pending future with a fresh, unguessable id ("req-<32 hex>").
    std::string create(const std::string & tenant, const std::string & request_type);
    // Registers a pending future under a given id (used to re-create ids known from elsewhere).
    void create_with_id(const std::string & request_id, const std::string & tenant, const std::string & request_type);

    // Finishing an unknown or already finished future does nothing.
    void complete(const std::string & request_id, std::string json, std::string proto = "");
    void fail(const std::string & request_id, std::string error, std::string category);

    // Calls `ready` exactly once, on some thread: at once when the future is finished or unknown,
    // else when it finishes, or at `timeout` with state PENDING. `ready` must not block.
    void wait(const std::string & request_id, std::chrono::milliseconds timeout,
              std::function<void(FutureOutcome)> ready);

    // The current state without waiting.
    FutureOutcome peek(const std::string & request_id);

    size_t waiting_polls() const;  // polls currently held
    size_t pending_futures() const;

  private:
    struct Impl;
    std::unique_ptr<Impl> impl_;
};

}  // namespace tinkerd::scheduler
