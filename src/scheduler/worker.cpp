// EngineWorker implementation: the engine thread's one loop (plan_locked -> execute -> update). Picks the
// kind of each step (training, sampling, posted task) in turn, training work round-robin across tenants
// and runs, batches the ready forward_backward ops of many runs into one engine call, drives the sampling
// side (sampling.cpp), and keeps every exception inside the thread (the affected ops fail with a reason).
#include "scheduler/worker.h"

#include <algorithm>
#include <atomic>
#include <chrono>
#include <condition_variable>
#include <deque>
#include <exception>
#include <map>
#include <mutex>
#include <optional>
#include <set>
#include <thread>
#include <utility>
#include <vector>

#include "common/log.h"
#include "scheduler/run_queue.h"

namespace tinkerd::scheduler {

namespace {

using Task = std::function<void(engine::Engine &)>;
using FbResult = Result<engine::ForwardBackwardOutput>;

struct RunOp {
    std::string run_id;
    QueuedOp queued;
};

// One iteration of the loop, decided under the lock from the queues' state alone (plan_locked).
struct StepPlan {
    enum class Kind { TRAIN = 0, SAMPLE = 1, TASK = 2, NONE = 3 };  // TRAIN..TASK: the policy's cycle
    Kind kind = Kind::NONE;
    Task task;               // TASK
    std::vector<RunOp> ops;  // TRAIN: one GENERIC op, or a batch of FORWARD_BACKWARD ops
    bool fb_batch = false;
    bool forward_only = false;
    int64_t tokens = 0;
    std::vector<SampleJob> admit;  // SAMPLE: the queued jobs that join the engine's batch this step
};

// What execute() did, for update() to report.
struct StepOutcome {
    std::vector<FbResult> fb_results;  // TRAIN batch: one per op
    double fb_seconds = 0;             // TRAIN batch: the engine call's time
    SampleStepOutcome sample;          // SAMPLE
};

std::string exception_text(std::exception_ptr ptr) {
    try {
        std::rethrow_exception(ptr);
    } catch (const std::exception & e) {
        return e.what();
    } catch (...) {
        return "non-standard exception";
    }
}

void cancel_op(Op & op, const std::string & reason) {
    if (!op.on_cancel) {
        return;
    }
    try {
        op.on_cancel(reason);
    } catch (...) {
        LOG_ERR("worker", "on_cancel threw: %s", exception_text(std::current_exception()).c_str());
    }
}

void deliver_fb(Op & op, FbResult result, double batch_seconds) {
    if (!op.on_fb_done) {
        return;
    }
    try {
        op.on_fb_done(std::move(result), batch_seconds);
    } catch (...) {
        LOG_ERR("worker", "on_fb_done threw: %s", exception_text(std::current_exception()).c_str());
    }
}

}  // namespace

struct EngineWorker::Impl {
    engine::Engine & engine;
    std::string name;
    WorkerOptions options;

    mutable std::mutex mu;
    std::condition_variable cv;
    std::map<std::string, RunQueue> runs;
    std::map<std::string, std::string> tenant_of;  // run id -> tenant
    std::string rr_tenant;                         // the tenant served first by the previous pick
    std::map<std::string, std::string> rr_run_of;  // tenant -> its run served first most recently
    std::deque<Task> tasks;
    SampleScheduler sampling;
    StepPlan::Kind last_kind = StepPlan::Kind::TASK;  // the kind of the previous step (TRAIN comes first)
    bool started = false;
    bool stopping = false;
    std::thread thread;

    std::atomic<int64_t> batches{0};
    std::atomic<int64_t> fb_ops{0};
    std::atomic<int64_t> max_runs{0};
    std::atomic<int64_t> sample_steps{0};
    LoadMeter meter;

    Impl(engine::Engine & e, std::string n, WorkerOptions o)
        : engine(e), name(std::move(n)), options(o), sampling(o.max_sampler_adapters, o.max_queued_samples) {}

    bool any_ready_locked() const {
        return std::any_of(runs.begin(), runs.end(), [](const auto & kv) { return kv.second.ready(); });
    }

    // The runs whose next op is queued, in the policy's (2) tenant/run round-robin order.
    std::vector<ReadyRun> ready_runs_locked() {
        std::vector<ReadyRun> ready;
        for (auto & entry : runs) {
            if (entry.second.ready()) {
                ready.push_back(&entry);
            }
        }
        return fair_order(std::move(ready), tenant_of, rr_tenant, rr_run_of);
    }

    // Policy (1): the kind after the previous step's in the cycle TRAIN -> SAMPLE -> TASK that has work.
    StepPlan::Kind next_kind_locked() const {
        const bool has_work[3] = {any_ready_locked(), sampling.has_work(), !tasks.empty()};
        const int last = static_cast<int>(last_kind);
        for (int i = 1; i <= 3; ++i) {
            const int kind = (last + i) % 3;
            if (has_work[kind]) {
                return static_cast<StepPlan::Kind>(kind);
            }
        }
        return StepPlan::Kind::NONE;
    }

    // The next step; the caller knows that some kind has work.
    StepPlan plan_locked() {
        StepPlan plan;
        plan.kind = last_kind = next_kind_locked();
        if (plan.kind == StepPlan::Kind::TASK) {
            plan.task = std::move(tasks.front());
            tasks.pop_front();
        } else if (plan.kind == StepPlan::Kind::SAMPLE) {
            plan.admit = sampling.take_queued();
        } else if (plan.kind == StepPlan::Kind::TRAIN) {
            plan_training_locked(plan);
        }
        return plan;
    }

    // Policy (2): the first ready run in tenant/run round-robin order; its generic op alone, or a batch.
    void plan_training_locked(StepPlan & plan) {
        auto order = ready_runs_locked();
        auto & [first_id, first_run] = *order.front();
        rr_tenant = tenant_of[first_id];
        rr_run_of[rr_tenant] = first_id;
        if (first_run.head().op.kind == Op::Kind::GENERIC) {
            plan.ops.push_back({first_id, first_run.pop_head()});
            return;
        }
        plan.fb_batch = true;
        plan.forward_only = first_run.head().op.forward_only;
        gather_fb_locked(order, plan);
    }

    // For each ready run in order, takes its contiguous chain of FB ops of the batch's kind from
    // next_seq while the token budget allows (the first op is always taken).
    void gather_fb_locked(const std::vector<ReadyRun> & order, StepPlan & work) {
        for (auto * entry : order) {
            RunQueue & run = entry->second;
            while (run.ready()) {
                const Op & op = run.head().op;
                if (op.kind != Op::Kind::FORWARD_BACKWARD || op.forward_only != work.forward_only) {
                    break;
                }
                int64_t tokens = op_tokens(op);
                if (!work.ops.empty() && work.tokens + tokens > options.max_batch_tokens) {
                    break;  // this run's chain stops here; a smaller op of another run may still fit
                }
                work.tokens += tokens;
                work.ops.push_back({entry->first, run.pop_head()});
            }
        }
    }

    // Waits until a task or a ready op exists (false: stopping), giving up holes in a run's order on the way.
    bool wait_for_work_locked(std::unique_lock<std::mutex> & lock) {
        for (;;) {
            if (stopping) {
                return false;
            }
            expire_gaps_locked();
            if (next_kind_locked() != StepPlan::Kind::NONE) {
                return true;
            }
            std::optional<RunQueue::Clock::time_point> deadline;
            for (const auto & [run_id, run] : runs) {
                auto d = run.gap_deadline(options.seq_gap_timeout);
                deadline = d && (!deadline || *d < *deadline) ? d : deadline;
            }
            if (deadline) {
                cv.wait_until(lock, *deadline);
            } else {
                cv.wait(lock);
            }
        }
    }

    void expire_gaps_locked() {
        const auto now = RunQueue::Clock::now();
        for (auto & [run_id, run] : runs) {
            const int64_t next = run.next_seq();
            if (const int64_t given_up = run.expire_gap(now, options.seq_gap_timeout); given_up > 0) {
                LOG_WRN("worker",
                        "%s: run %s waited %g s (--seq-gap-timeout-seconds) for seq_id %lld, which never "
                        "arrived (its request was refused before its seq_id could be read, or its client gave "
                        "up); gave up %lld missing seq_id(s) from %lld to %lld: the %zu queued op(s) behind them "
                        "run now, and a late arrival gets 400",
                        name.c_str(), run_id.c_str(), options.seq_gap_timeout.count() / 1000.0,
                        static_cast<long long>(next), static_cast<long long>(given_up), static_cast<long long>(next),
                        static_cast<long long>(run.next_seq() - 1), run.queued());
            }
        }
    }

    void loop() {
        meter.note_sampling(engine.sample_stats(), 0);  // the KV budget before the first sampling step
        for (;;) {
            StepPlan plan;
            {
                std::unique_lock lock(mu);
                if (!wait_for_work_locked(lock)) {
                    return;
                }
                plan = plan_locked();
            }
            StepOutcome outcome;
            double busy = 0;  // the step's own time: not the wait for another model's step on a shared thread
            auto timed_execute = [&] {
                const auto t0 = std::chrono::steady_clock::now();
                outcome = execute(plan);
                busy = std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count();
            };
            if (options.compute) {
                options.compute->run(timed_execute);
            } else {
                timed_execute();
            }
            const auto t1 = std::chrono::steady_clock::now();
            update(plan, outcome);
            meter.note_step(busy + std::chrono::duration<double>(std::chrono::steady_clock::now() - t1).count());
        }
    }

    // The engine calls of a step, without the lock (generic ops and tasks complete inside their closure).
    StepOutcome execute(StepPlan & plan) {
        StepOutcome outcome;
        if (plan.kind == StepPlan::Kind::TASK) {
            run_task(plan.task);
        } else if (plan.kind == StepPlan::Kind::SAMPLE) {
            outcome.sample = sampling.execute(engine, plan.admit);
            sample_steps += outcome.sample.step ? 1 : 0;
        } else if (plan.fb_batch) {
            outcome.fb_results = run_fb_batch(plan, outcome.fb_seconds);
        } else {
            run_generic(plan.ops.front());
        }
        return outcome;
    }

    // A step's completions, without the lock: forward_backward results, sample events, adapters freed.
    void update(StepPlan & plan, StepOutcome & outcome) {
        if (plan.kind == StepPlan::Kind::SAMPLE) {
            sampling.update(engine, outcome.sample);
            meter.note_sampling(engine.sample_stats(), sampling.resident_adapters());
        } else if (plan.fb_batch) {
            for (size_t i = 0; i < plan.ops.size(); i++) {
                deliver_fb(plan.ops[i].queued.op, std::move(outcome.fb_results[i]), outcome.fb_seconds);
            }
        }
    }

    void run_task(Task & task) {
        try {
            task(engine);
        } catch (...) {
            LOG_ERR("worker", "%s: posted task threw: %s", name.c_str(),
                    exception_text(std::current_exception()).c_str());
        }
    }

    void run_generic(RunOp & run_op) {
        Op & op = run_op.queued.op;
        try {
            if (op.run) {
                op.run(engine);
            }
        } catch (...) {
            std::string what = exception_text(std::current_exception());
            LOG_ERR("worker", "%s: op %s of run %s threw: %s", name.c_str(), run_op.queued.request_id.c_str(),
                    run_op.run_id.c_str(), what.c_str());
            cancel_op(op, "internal error: " + what);
        }
    }

    // Calls the engine once for the whole batch; never throws, always one result per input.
    std::vector<FbResult> call_forward_backward(const std::vector<engine::ForwardBackwardInput> & inputs,
                                                bool backward) {
        std::vector<FbResult> results;
        std::string failure;
        try {
            results = engine.forward_backward(inputs, backward);
            if (results.size() != inputs.size()) {
                failure = "engine returned " + std::to_string(results.size()) + " results for " +
                          std::to_string(inputs.size()) + " inputs";
            }
        } catch (...) {
            failure = "forward_backward threw: " + exception_text(std::current_exception());
        }
        if (!failure.empty()) {
            LOG_ERR("worker", "%s: %s", name.c_str(), failure.c_str());
            results.clear();
            for (size_t i = 0; i < inputs.size(); i++) {
                results.push_back(internal_error(failure));
            }
        }
        return results;
    }

    std::vector<FbResult> run_fb_batch(StepPlan & work, double & seconds) {
        std::vector<engine::ForwardBackwardInput> inputs;
        std::set<std::string> run_ids;
        inputs.reserve(work.ops.size());
        for (auto & run_op : work.ops) {
            inputs.push_back(std::move(run_op.queued.op.fb_input));
            run_ids.insert(run_op.run_id);
        }
        auto t0 = std::chrono::steady_clock::now();
        std::vector<FbResult> results = call_forward_backward(inputs, !work.forward_only);
        seconds = std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count();
        record_batch(static_cast<int64_t>(run_ids.size()), static_cast<int64_t>(inputs.size()));
        LOG_DBG("worker", "%s: %s batch runs=%zu ops=%zu tokens=%lld %.1f ms", name.c_str(),
                work.forward_only ? "forward" : "forward_backward", run_ids.size(), inputs.size(),
                static_cast<long long>(work.tokens), seconds * 1e3);
        return results;
    }

    void record_batch(int64_t n_runs, int64_t n_ops) {
        batches++;
        fb_ops += n_ops;
        int64_t seen = max_runs.load();
        while (n_runs > seen && !max_runs.compare_exchange_weak(seen, n_runs)) {
        }
    }
};

EngineWorker::EngineWorker(engine::Engine & engine, std::string name, WorkerOptions options)
    : impl_(std::make_unique<Impl>(engine, std::move(name), options)) {}

EngineWorker::~EngineWorker() {
    stop();
}

void EngineWorker::start() {
    std::lock_guard lock(impl_->mu);
    if (impl_->started || impl_->stopping) {
        return;
    }
    impl_->started = true;
    impl_->thread = std::thread([this] { impl_->loop(); });
}

void EngineWorker::stop() {
    std::vector<QueuedOp> cancelled;
    std::vector<SampleJob> jobs;
    {
        std::lock_guard lock(impl_->mu);
        impl_->stopping = true;
        for (auto & [run_id, run] : impl_->runs) {
            for (auto & queued : run.drain()) {
                cancelled.push_back(std::move(queued));
            }
        }
        impl_->tasks.clear();
    }
    impl_->cv.notify_all();
    if (impl_->thread.joinable()) {
        impl_->thread.join();
    }
    for (auto & queued : cancelled) {
        cancel_op(queued.op, "server shutting down");
    }
    {
        std::lock_guard lock(impl_->mu);  // the engine thread is gone: its running jobs are ours now
        jobs = impl_->sampling.drain();
    }
    for (auto & job : jobs) {
        finish_job(job, unavailable("server shutting down"));
    }
}

void EngineWorker::open_run(const std::string & run_id, int64_t next_seq_id, const std::string & tenant) {
    std::lock_guard lock(impl_->mu);
    impl_->runs.try_emplace(run_id, next_seq_id, impl_->options.max_queued_ops_per_run);  // an open run keeps its state
    impl_->tenant_of.try_emplace(run_id, tenant);
}

bool EngineWorker::has_run(const std::string & run_id) const {
    std::lock_guard lock(impl_->mu);
    return impl_->runs.count(run_id) > 0;
}

void EngineWorker::close_run(const std::string & run_id, const std::string & reason) {
    std::vector<QueuedOp> cancelled;
    {
        std::lock_guard lock(impl_->mu);
        auto it = impl_->runs.find(run_id);
        if (it == impl_->runs.end()) {
            return;
        }
        cancelled = it->second.drain();
        impl_->runs.erase(it);
        impl_->tenant_of.erase(run_id);
    }
    for (auto & queued : cancelled) {
        cancel_op(queued.op, reason);
    }
}

Result<Admission> EngineWorker::submit(const std::string & run_id, int64_t seq_id, const std::string & body_hash,
                                       const std::string & request_id, Op op) {
    Admission admission;
    {
        std::lock_guard lock(impl_->mu);
        if (impl_->stopping) {
            return internal_error("the engine worker is stopped");
        }
        auto it = impl_->runs.find(run_id);
        if (it == impl_->runs.end()) {
            return not_found("training run '" + run_id + "' not found");
        }
        admission = it->second.admit(seq_id, body_hash, request_id, op);
    }
    if (admission.kind == Admission::Kind::ACCEPTED) {
        impl_->cv.notify_one();
    }
    return admission;
}

bool EngineWorker::skip(const std::string & run_id, int64_t seq_id) {
    {
        std::lock_guard lock(impl_->mu);
        auto it = impl_->runs.find(run_id);
        if (it == impl_->runs.end() || !it->second.skip(seq_id)) {
            return false;
        }
    }
    impl_->cv.notify_one();
    return true;
}

void EngineWorker::post(std::function<void(engine::Engine &)> task) {
    {
        std::lock_guard lock(impl_->mu);
        if (impl_->stopping) {
            LOG_WRN("worker", "%s: task posted after stop is dropped", impl_->name.c_str());
            return;
        }
        impl_->tasks.push_back(std::move(task));
    }
    impl_->cv.notify_one();
}

void EngineWorker::submit_sample(SampleJob job) {
    Result<void> queued = internal_error("the engine worker is stopped");
    {
        std::lock_guard lock(impl_->mu);
        if (!impl_->stopping) {
            queued = impl_->sampling.enqueue(job);
        }
    }
    if (!queued.ok()) {
        finish_job(job, queued.error());
        return;
    }
    impl_->cv.notify_one();
}

WorkerLoad EngineWorker::load() const {
    WorkerLoad load;
    {
        std::lock_guard lock(impl_->mu);
        for (const auto & [run_id, run] : impl_->runs) {
            load.queued_ops += static_cast<int64_t>(run.queued());
        }
        load.queued_samples = static_cast<int64_t>(impl_->sampling.queued());
    }
    impl_->meter.fill(load);
    return load;
}

int64_t EngineWorker::sample_steps_run() const {
    return impl_->sample_steps.load();
}

int64_t EngineWorker::batches_run() const {
    return impl_->batches.load();
}

int64_t EngineWorker::fb_ops_run() const {
    return impl_->fb_ops.load();
}

int64_t EngineWorker::max_runs_in_a_batch() const {
    return impl_->max_runs.load();
}

}  // namespace tinkerd::scheduler
