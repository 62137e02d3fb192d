// The sampling side of the EngineWorker's one loop: the queue of submitted sample requests (SampleJob),
// the requests running in the engine's continuous batch, and the LRU of imported sampler adapters. The
// worker drives it in the loop's three phases: take_queued() while planning (under the worker's lock),
// execute() (engine calls: adapter resolution, submit, cancel, ONE sample_step) and update() (events,
// bookkeeping, adapters over the cap released), both on the engine thread without the lock.
#pragma once

#include <atomic>
#include <cstdint>
#include <deque>
#include <functional>
#include <map>
#include <memory>
#include <optional>
#include <set>
#include <string>
#include <vector>

#include "common/status.h"
#include "engine/engine.h"
#include "scheduler/adapter_lru.h"

namespace tinkerd::scheduler {

// One generated token of sample `index` of a request.
struct SampleToken {
    int64_t index = 0;
    int64_t token = 0;
    float logprob = 0;
    engine::TopLogprobs top;  // empty unless top_logprobs were asked
};

// One sample request (a Tinker asample or one prompt of an OpenAI completion) handed to the scheduler.
struct SampleJob {
    engine::SampleRequest request;  // its adapter (and, with on_tokens, its on_token) are set by the scheduler
    // The weights: with an empty adapter_key, `adapter` as is (BASE_MODEL or a training run's live
    // adapter); else the sampler adapter cached under adapter_key, imported from load_weights() on a miss
    // (called on the engine thread; it may read files).
    engine::AdapterId adapter = engine::BASE_MODEL;
    std::string adapter_key;
    WeightsLoader load_weights;
    // Events, on the engine thread, that must not call the engine: each step's new tokens (only when set)
    // and, exactly once, the outcome (also for a job refused at submit, cancelled or dropped at stop).
    std::function<void(std::vector<SampleToken>)> on_tokens;
    std::function<void(Result<engine::SampleOutput>)> on_done;
    std::shared_ptr<std::atomic<bool>> cancelled;  // set by the caller when nobody waits any more
};

// What execute() did, for update() to report.
struct SampleStepOutcome {
    std::vector<std::pair<SampleJob, Error>> dropped;                 // refused at admission, or cancelled
    std::optional<Result<std::vector<engine::FinishedSample>>> step;  // the one sample_step, if any ran
};

class SampleScheduler {
  public:
    SampleScheduler(size_t max_adapters, size_t max_queued) : adapters_(max_adapters), max_queued_(max_queued) {}

    // Under the worker's lock. enqueue refuses (UNAVAILABLE) beyond max_queued waiting jobs.
    Result<void> enqueue(SampleJob & job);
    bool has_work() const { return !queued_.empty() || !running_.empty(); }  // engine thread
    std::vector<SampleJob> take_queued();
    size_t queued() const { return queued_.size(); }               // under the worker's lock
    size_t resident_adapters() const { return adapters_.size(); }  // engine thread

    // Engine thread, without the lock.
    SampleStepOutcome execute(engine::Engine & engine, std::vector<SampleJob> & admit);
    void update(engine::Engine & engine, SampleStepOutcome & outcome);
    // After the engine thread ended: every queued and running job, for their on_done.
    std::vector<SampleJob> drain();

  private:
    struct Running {
        SampleJob job;
        std::shared_ptr<std::vector<SampleToken>> tokens;  // this step's tokens (when job.on_tokens is set)
    };
    Result<engine::AdapterId> resolve_adapter(engine::Engine & engine, SampleJob & job);
    void admit(engine::Engine & engine, SampleJob & job, SampleStepOutcome & outcome);
    static void emit_tokens(Running & running);
    std::set<engine::AdapterId> adapters_in_use() const;

    AdapterLru adapters_;
    size_t max_queued_;
    std::deque<SampleJob> queued_;                     // guarded by the worker's lock
    std::map<engine::SampleHandle, Running> running_;  // engine thread only
};

// Calls a job's on_done once, keeping the thread alive if it throws.
void finish_job(SampleJob & job, Result<engine::SampleOutput> output);

}  // namespace tinkerd::scheduler
