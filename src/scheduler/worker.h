// EngineWorker: the one thread that owns an Engine (one base model) and its ONE scheduling loop. Training
// runs get one queue each: a run's operations are released strictly in seq_id order (early arrivals wait;
// identical resends are answered once; a different body under a used seq_id is refused), and ready
// forward_backward operations of several runs are batched into one engine call. Sample requests
// (SampleJob, sampling.h) join the engine's continuous batch. Posted tasks run outside any order.
//
// Each iteration is plan -> execute -> update (as vLLM's schedule() / update_from_output()):
//   plan_locked()  under the lock, from the queues' state only: which KIND of step, and what it takes
//                  (the training ops of one batch, the sample jobs to admit, or one posted task);
//   execute(plan)  without the lock, on the engine thread: the engine calls and nothing else;
//   update(plan)   without the lock: completion callbacks, sample events, freed sampler adapters.
//
// Policy.
// (1) Kinds: the kinds with work take turns in the fixed cycle TRAINING -> SAMPLING -> TASK, each turn one
//     step: a training pick (one generic op, or one batched forward_backward), ONE engine sample_step
//     (after admitting every queued job and dropping cancelled ones), or one posted task. So when training
//     and sampling both have work they alternate strictly, and no kind with work waits for more than two
//     steps of the others: neither starves.
// (2) Training picks: a run's ops run in seq_id order only; the first op of each pick goes to the next
//     TENANT in round-robin order, and within a tenant to its next run in round-robin order, so a tenant
//     with ten runs gets the same share of picks as a tenant with one; a batch then gathers ready
//     forward_backward ops of every tenant's runs in that order up to max_batch_tokens.
// (3) Sampling: every queued job is submitted to the engine at the next sampling step (its sampler
//     adapter resolved first: BASE_MODEL, a run's live adapter, or the LRU of imported samplers, at most
//     max_sampler_adapters kept, never evicting one a running request samples from). Admission against
//     the KV-cache budget (--kv-cache-mib) and preemption stay inside the engine's SampleLoop, the only
//     place that knows bytes: a submitted request waits there until its cache fits, and the newest
//     request is preempted (caches freed, tokens and RNG kept) when growing would pass the budget. A
//     cancelled job is dropped at the next sampling step (its KV cache freed at once).
// (4) Bounds: each run holds at most max_queued_ops_per_run waiting ops (QUEUE_FULL beyond, a 429 the SDK
//     retries); at most max_queued_samples jobs wait to be admitted (more are refused, UNAVAILABLE); a
//     missing seq_id is given up after seq_gap_timeout.
#pragma once

#include <chrono>
#include <cstdint>
#include <functional>
#include <memory>
#include <string>

#include "common/status.h"
#include "engine/engine.h"
#include "scheduler/compute_thread.h"
#include "scheduler/sampling.h"
#include "scheduler/worker_load.h"

namespace tinkerd::scheduler {

// One operation of a training run.
struct Op {
    enum class Kind { FORWARD_BACKWARD, GENERIC };
    Kind kind = Kind::GENERIC;
    // FORWARD_BACKWARD: the input (its adapter id set) and whether to skip the backward pass.
    engine::ForwardBackwardInput fb_input;
    bool forward_only = false;
    // batch_seconds: the engine time of the batch the op ran in (shared by the batch's ops).
    std::function<void(Result<engine::ForwardBackwardOutput>, double batch_seconds)> on_fb_done;
    // GENERIC: runs on the engine thread (optim_step, save, load, unload, ...).
    std::function<void(engine::Engine &)> run;
    // Called instead of the above when the op will never run (run closed, worker stopped).
    std::function<void(const std::string & reason)> on_cancel;
};

struct Admission {
    enum class Kind {
        ACCEPTED,    // queued under the given request id
        DUPLICATE,   // same (run, seq_id, body_hash) seen before: request_id is the original's
        CONFLICT,    // seq_id already used with a different body (a user error)
        STALE,       // seq_id below the run's next expected one and unknown (a user error)
        TOO_FAR,     // seq_id more than RunQueue::kMaxAhead above the run's next expected one (a user error)
        QUEUE_FULL,  // the run already has max_queued_ops_per_run waiting (backpressure: retry later)
    };
    Kind kind = Kind::ACCEPTED;
    std::string request_id;
};

struct WorkerOptions {
    int64_t max_batch_tokens = 16384;  // cap on the tokens of one batched forward_backward
    // A run's missing seq_id (refused unread, or its client died) is given up after this long, so the ops
    // queued behind it run (--seq-gap-timeout-seconds; the SDK's own retries give up after 300 s).
    std::chrono::milliseconds seq_gap_timeout{330000};
    size_t max_queued_ops_per_run = 1024;  // a run's waiting ops at most (the SDK pipelines a few dozen)
    size_t max_sampler_adapters = 8;       // imported sampler adapters kept (--max-sampler-adapters)
    // Sample jobs waiting for the next sampling step at most: a safety bound far above the api's own
    // 429 (--max-queued-samples counts requests, and one OpenAI request may carry many prompts).
    size_t max_queued_samples = 65536;
    // Where the engine calls of each step run: null, this worker's own thread; shared by the workers of several
    // local models so that one thread opens OpenMP regions (compute_thread.h).
    std::shared_ptr<ComputeThread> compute;
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

    // Registers a run whose next expected seq_id is `next_seq_id` (1 after create_model), owned by `tenant`
    // (the unit of fairness, see the policy above).
    void open_run(const std::string & run_id, int64_t next_seq_id, const std::string & tenant = "");
    bool has_run(const std::string & run_id) const;
    // Cancels the run's queued ops (on_cancel(reason)) and forgets the run. Ops already running finish.
    void close_run(const std::string & run_id, const std::string & reason);

    // Queues `op` under (run_id, seq_id) with the given request id. Unknown run -> NOT_FOUND.
    Result<Admission> submit(const std::string & run_id, int64_t seq_id, const std::string & body_hash,
                             const std::string & request_id, Op op);
    // Marks seq_id as used without running anything (a request rejected at submit time), so later
    // seq_ids of the run are not blocked behind it. False when it changed nothing (RunQueue::skip), or
    // the run is unknown.
    bool skip(const std::string & run_id, int64_t seq_id);

    // Runs `task` on the engine thread, outside every run's order (create_model, unload).
    void post(std::function<void(engine::Engine &)> task);

    // Queues a sample request for the next sampling step. Its on_done is called exactly once: with the
    // outcome, or with the reason it never ran (queue full, cancelled, worker stopped), possibly on the
    // caller's thread when it is refused here.
    void submit_sample(SampleJob job);

    // Queue depths, KV-cache use, resident sampler adapters and busy time (server_status, /metrics).
    WorkerLoad load() const;

    // Counters for logs and tests.
    int64_t batches_run() const;          // engine forward_backward calls
    int64_t fb_ops_run() const;           // forward_backward ops executed
    int64_t max_runs_in_a_batch() const;  // most distinct runs seen in one batched call
    int64_t sample_steps_run() const;     // engine sample_step calls

  private:
    struct Impl;
    std::unique_ptr<Impl> impl_;
};

}  // namespace tinkerd::scheduler
