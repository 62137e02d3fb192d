// SampleScheduler: admission of queued sample jobs into the engine (adapter from the LRU, sample_submit),
// cancellation at the next step, one engine sample_step per sampling turn of the worker's loop, and the
// events of what it produced (tokens, then outcomes). The KV budget and preemption are the engine's.
#include "scheduler/sampling.h"

#include <exception>
#include <utility>

#include "common/log.h"

namespace tinkerd::scheduler {

namespace {

Error cancelled_error() {
    return invalid_argument("cancelled: the client went away");
}

bool is_cancelled(const SampleJob & job) {
    return job.cancelled && job.cancelled->load();
}

}  // namespace

void finish_job(SampleJob & job, Result<engine::SampleOutput> output) {
    if (!job.on_done) {
        return;
    }
    try {
        job.on_done(std::move(output));
    } catch (const std::exception & e) {
        LOG_ERR("worker", "a sample job's on_done threw: %s", e.what());
    }
    job.on_done = nullptr;  // exactly once
}

Result<void> SampleScheduler::enqueue(SampleJob & job) {
    if (queued_.size() >= max_queued_) {
        return unavailable("too many sample requests queued (" + std::to_string(max_queued_) + "); retry shortly");
    }
    queued_.push_back(std::move(job));
    return {};
}

std::vector<SampleJob> SampleScheduler::take_queued() {
    std::vector<SampleJob> taken(std::make_move_iterator(queued_.begin()), std::make_move_iterator(queued_.end()));
    queued_.clear();
    return taken;
}

SampleStepOutcome SampleScheduler::execute(engine::Engine & engine, std::vector<SampleJob> & admitted) {
    SampleStepOutcome outcome;
    for (SampleJob & job : admitted) {
        admit(engine, job, outcome);
    }
    for (auto it = running_.begin(); it != running_.end();) {
        if (is_cancelled(it->second.job)) {  // its KV cache is freed now
            engine.sample_cancel(it->first);
            outcome.dropped.emplace_back(std::move(it->second.job), cancelled_error());
            it = running_.erase(it);
        } else {
            ++it;
        }
    }
    if (running_.empty()) {
        return outcome;
    }
    try {
        outcome.step = engine.sample_step();
    } catch (const std::exception & e) {  // every running request fails; the engine drops them
        outcome.step = internal_error(std::string("engine error: ") + e.what());
        for (auto & [handle, running] : running_) {
            engine.sample_cancel(handle);
        }
    }
    return outcome;
}

// Submits one job to the engine (it admits it as its KV budget allows), or drops it with the reason.
void SampleScheduler::admit(engine::Engine & engine, SampleJob & job, SampleStepOutcome & outcome) {
    if (is_cancelled(job)) {
        outcome.dropped.emplace_back(std::move(job), cancelled_error());
        return;
    }
    auto adapter = resolve_adapter(engine, job);
    if (!adapter.ok()) {
        outcome.dropped.emplace_back(std::move(job), adapter.error());
        return;
    }
    Running running;
    job.request.adapter = *adapter;
    if (job.on_tokens) {
        running.tokens = std::make_shared<std::vector<SampleToken>>();
        job.request.on_token = [tokens = running.tokens](int64_t index, int64_t token, float logprob,
                                                         const engine::TopLogprobs & top) {
            tokens->push_back(SampleToken{index, token, logprob, top});
        };
    }
    Result<engine::SampleHandle> handle = internal_error("not submitted");
    try {
        handle = engine.sample_submit(job.request);
    } catch (const std::exception & e) {
        handle = internal_error(std::string("engine error: ") + e.what());
    }
    if (!handle.ok()) {
        outcome.dropped.emplace_back(std::move(job), handle.error());
        return;
    }
    job.request = {};  // the engine holds its own copy; keep only what trimming needs
    job.request.adapter = *adapter;
    running.job = std::move(job);
    running_.emplace(*handle, std::move(running));
}

Result<engine::AdapterId> SampleScheduler::resolve_adapter(engine::Engine & engine, SampleJob & job) {
    if (job.adapter_key.empty()) {
        return job.adapter;
    }
    return adapters_.acquire(engine, job.adapter_key, job.load_weights);
}

void SampleScheduler::update(engine::Engine & engine, SampleStepOutcome & outcome) {
    for (auto & [job, error] : outcome.dropped) {
        finish_job(job, std::move(error));
    }
    if (outcome.step && !outcome.step->ok()) {
        for (auto & [handle, running] : running_) {
            finish_job(running.job, outcome.step->error());
        }
        running_.clear();
    } else if (outcome.step) {
        for (engine::FinishedSample & f : **outcome.step) {  // their last tokens first, then the outcome
            auto it = running_.find(f.handle);
            if (it != running_.end()) {
                emit_tokens(it->second);
                finish_job(it->second.job, std::move(f.output));
                running_.erase(it);
            }
        }
        for (auto & [handle, running] : running_) {
            emit_tokens(running);
        }
    }
    adapters_.trim(engine, adapters_in_use());
}

void SampleScheduler::emit_tokens(Running & running) {
    if (!running.tokens || running.tokens->empty()) {
        return;
    }
    std::vector<SampleToken> step;
    step.swap(*running.tokens);
    try {
        running.job.on_tokens(std::move(step));
    } catch (const std::exception & e) {
        LOG_ERR("worker", "a sample job's on_tokens threw: %s", e.what());
    }
}

std::set<engine::AdapterId> SampleScheduler::adapters_in_use() const {
    std::set<engine::AdapterId> in_use;
    for (const auto & [handle, running] : running_) {
        in_use.insert(running.job.request.adapter);
    }
    return in_use;
}

std::vector<SampleJob> SampleScheduler::drain() {
    std::vector<SampleJob> jobs = take_queued();
    for (auto & [handle, running] : running_) {
        jobs.push_back(std::move(running.job));
    }
    running_.clear();
    return jobs;
}

}  // namespace tinkerd::scheduler
