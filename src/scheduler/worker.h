// EngineWorker: the one thread that owns an Engine (one base model). It keeps one queue per training
// run, releases each run's operations strictly in seq_id order (early arrivals wait; identical resends
// are answered once; a different body under a used seq_id is refused), and batches ready
// forward_backward operations of several runs into one engine call. One run's gap never blocks another.
#pragma once

#include <chrono>
#include <cstdint>
#include <functional>
#include <memory>
#include <string>

#include "common/status.h"
#include "engine/engine.h"

namespace tinkerd::scheduler {

// One operation of a training run.
struct Op {
    enum class Kind { FORWARD_BACKWARD, GENERIC };
    Kind kind = Kind::GENERIC;
    // FORWARD_BACKWARD: the input (its adapter id set) and whether to skip the backward pass.
    engine::ForwardBackwardInput fb_input;
    bool forward_only = false;
    std::function<void(Result<engine::ForwardBackwardOutput>)> on_fb_done;
    // GENERIC: runs on the engine thread (optim_step, save, load, unload, ...).
    std::function<void(engine::Engine &)> run;
    // Called instead of the above when the op will never run (run closed, worker stopped).
    std::function<void(const std::string & reason)> on_cancel;
};

struct Admission {
    enum class Kind {
        ACCEPTED,   // queued under the given request id
        DUPLICATE,  // same (run, seq_id, body_hash) seen before: request_id is the original's
        CONFLICT,   // seq_id already used with a different body (a user error)
        STALE,      // seq_id below the run's next expected one and unknown (a user error)
        TOO_FAR,    // seq_id more than RunQueue::kMaxAhead above the run's next expected one (a user error)
    };
    Kind kind = Kind::ACCEPTED;
    std::string request_id;
};

struct WorkerOptions {
    int64_t max_batch_tokens = 16384;  // cap on the tokens of one batched forward_backward
    // A run's missing seq_id (refused unread, or its client died) is given up after this long, so the ops
    // queued behind it run (--seq-gap-timeout-seconds; the SDK's own retries give up after 300 s).
    std::chrono::milliseconds seq_gap_timeout{330000};
};

class EngineWorker {
  public:
    EngineWorker(engine::Engine & engine, std::string name, WorkerOptions options = {});
    ~EngineWorker();  // stop()
    EngineWorker(const EngineWorker &) = delete;
    EngineWorker & operator=(const EngineWorker &) = delete;

    void start();
    // Cancels every queued op (on_cancel("server shutting down")), finishes the running one, joins.
    void stop();

    // Registers a run whose next expected seq_id is `next_seq_id` (1 after create_model).
    void open_run(const std::string & run_id, int64_t next_seq_id);
    bool has_run(const std::string & run_id) const;
    // Cancels the run's queued ops (on_cancel(reason)) and forgets the run. Ops already running finish.
    void close_run(const std::string & run_id, const std::string & reason);

    // Queues `op` under (run_id, seq_id) with the given request id. Unknown run -> NOT_FOUND.
    Result<Admission> submit(const std::string & run_id, int64_t seq_id, const std::string & body_hash,
                             const std::string & request_id, Op op);
    // Marks seq_id as used without running anything (a request rejected at submit time), so later
    // seq_ids of the run are not blocked behind it.
    void skip(const std::string & run_id, int64_t seq_id);

    // Runs `task` on the engine thread, outside every run's order (create_model, sampler snapshots).
    void post(std::function<void(engine::Engine &)> task);

    // Counters for logs and tests.
    int64_t batches_run() const;          // engine forward_backward calls
    int64_t fb_ops_run() const;           // forward_backward ops executed
    int64_t max_runs_in_a_batch() const;  // most distinct runs seen in one batched call

  private:
    struct Impl;
    std::unique_ptr<Impl> impl_;
};

}  // namespace tinkerd::scheduler
