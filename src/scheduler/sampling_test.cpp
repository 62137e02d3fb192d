// Tests of the sampling side of the EngineWorker's one loop against the FakeEngine (no torch): the
// policy's alternation of sampling steps and training ops (no starvation either way), per-run order with
// sampling in between, tokens then outcome per job, cancellation at the next step, the sampler-adapter
// LRU (its cap, never evicting an adapter in use, failed loads), bounded queues, a throwing step, stop.
#include <algorithm>
#include <atomic>
#include <memory>
#include <set>
#include <string>
#include <thread>
#include <vector>

#include <gtest/gtest.h>

#include "scheduler/adapter_lru.h"
#include "scheduler/fake_engine.h"
#include "scheduler/worker.h"

namespace tinkerd::scheduler {
namespace {

using namespace std::chrono_literals;
using fakes::FakeEngine;
using fakes::Recorder;

// A job sampling `max_tokens` tokens from prompt {first}; its outcome lands in `rec` as
// "done<label>:<tokens of sample 0, comma-separated>" or "done<label>:error:<message>".
SampleJob job(Recorder & rec, const std::string & label, int64_t max_tokens, int64_t first = 1) {
    SampleJob j;
    j.request.prompt = {first};
    j.request.params.max_tokens = max_tokens;
    j.on_done = [&rec, label](Result<engine::SampleOutput> out) {
        if (!out.ok()) {
            rec.add("done" + label + ":error:" + out.error().message);
            return;
        }
        std::string tokens;
        for (int64_t t : out->sequences.at(0).tokens) {
            tokens += (tokens.empty() ? "" : ",") + std::to_string(t);
        }
        rec.add("done" + label + ":" + tokens);
    };
    return j;
}

// A job on the sampler adapter `key` (imported through a loader that counts its calls).
SampleJob sampler_job(Recorder & rec, const std::string & key, int64_t max_tokens, std::atomic<int> & loads) {
    SampleJob j = job(rec, key, max_tokens);
    j.adapter_key = key;
    j.load_weights = [&loads]() -> Result<AdapterWeights> {
        ++loads;
        return AdapterWeights{};
    };
    return j;
}

Op generic_op(Recorder & rec, const std::string & label) {
    Op op;
    op.run = [&rec, label](engine::Engine &) { rec.add(label); };
    op.on_cancel = [&rec, label](const std::string & reason) { rec.add("cancel:" + label + ":" + reason); };
    return op;
}

Op fb_op(int64_t tokens = 4) {
    Op op;
    op.kind = Op::Kind::FORWARD_BACKWARD;
    op.fb_input.datums.push_back(engine::Datum{std::vector<int64_t>(static_cast<size_t>(tokens), 7), {}});
    return op;
}

// The longest run of `kind` in `log` between two entries of another kind, before `other` is exhausted.
int longest_streak(const std::vector<std::string> & log, const std::string & kind) {
    const auto last_other = std::find_if(log.rbegin(), log.rend(), [&](const auto & e) { return e != kind; });
    const size_t end = static_cast<size_t>(log.rend() - last_other);
    int longest = 0, streak = 0;
    for (size_t i = 0; i < end; ++i) {
        streak = log[i] == kind ? streak + 1 : 0;
        longest = std::max(longest, streak);
    }
    return longest;
}

TEST(Sampling, StepsAndTrainingBatchesAlternateWhenBothAreQueued) {
    FakeEngine engine;
    Recorder rec;
    WorkerOptions options;
    options.max_batch_tokens = 4;  // one op per batch
    EngineWorker worker(engine, "test", options);
    worker.open_run("A", 1);
    worker.submit_sample(job(rec, "s", 10));  // ten sample steps
    for (int seq = 1; seq <= 10; ++seq) {
        ASSERT_TRUE(worker.submit("A", seq, "h" + std::to_string(seq), "r" + std::to_string(seq), fb_op()).ok());
    }
    worker.start();
    ASSERT_TRUE(rec.wait_for(1));
    while (engine.calls().size() < 10) {
        std::this_thread::sleep_for(1ms);
    }
    const auto log = engine.log();
    EXPECT_EQ(std::count(log.begin(), log.end(), "sample"), 10);
    EXPECT_EQ(std::count(log.begin(), log.end(), "fb"), 10);
    EXPECT_LE(longest_streak(log, "sample"), 1) << "a training batch waited for more than one sample step";
    EXPECT_LE(longest_streak(log, "fb"), 1) << "a sample step waited for more than one training batch";
    EXPECT_EQ(worker.sample_steps_run(), 10);
}

TEST(Sampling, ARunsOrderHoldsWithSamplingInBetween) {
    FakeEngine engine;
    Recorder rec;
    EngineWorker worker(engine, "test");
    worker.open_run("A", 1);
    for (int seq = 5; seq >= 1; --seq) {  // submitted backwards
        (void)worker.submit("A", seq, "h" + std::to_string(seq), "r" + std::to_string(seq),
                            generic_op(rec, "op" + std::to_string(seq)));
    }
    worker.submit_sample(job(rec, "s", 8));
    worker.start();
    ASSERT_TRUE(rec.wait_for(6));
    std::vector<std::string> ops;
    for (const auto & e : rec.events()) {
        if (e.rfind("op", 0) == 0) {
            ops.push_back(e);
        }
    }
    EXPECT_EQ(ops, (std::vector<std::string>{"op1", "op2", "op3", "op4", "op5"}));
}

TEST(Sampling, TokensEachStepThenTheOutcome) {
    FakeEngine engine;
    Recorder rec;
    EngineWorker worker(engine, "test");
    SampleJob streamed = job(rec, "a", 3, 20);
    streamed.request.num_samples = 2;
    streamed.on_tokens = [&rec](std::vector<SampleToken> tokens) {
        for (const auto & t : tokens) {
            rec.add("tok" + std::to_string(t.index) + ":" + std::to_string(t.token));
        }
    };
    worker.submit_sample(std::move(streamed));
    worker.submit_sample(job(rec, "b", 2, 30));  // no on_tokens: only its outcome
    worker.start();
    ASSERT_TRUE(rec.wait_for(8));
    const auto events = rec.events();
    EXPECT_EQ(std::vector<std::string>(events.begin(), events.begin() + 2),
              (std::vector<std::string>{"tok0:21", "tok1:22"}));
    EXPECT_NE(std::find(events.begin(), events.end(), "donea:21,22,23"), events.end());
    EXPECT_NE(std::find(events.begin(), events.end(), "doneb:31,32"), events.end());
    EXPECT_EQ(events.back(), "donea:21,22,23");  // its last tokens came before it
}

TEST(Sampling, ACancelledRequestIsFreedAtTheNextStep) {
    FakeEngine engine;
    Recorder rec;
    EngineWorker worker(engine, "test");
    SampleJob long_job = job(rec, "long", 1000000);
    auto cancelled = std::make_shared<std::atomic<bool>>(false);
    long_job.cancelled = cancelled;
    std::atomic<int> steps{0};
    long_job.on_tokens = [&steps](std::vector<SampleToken>) { ++steps; };
    worker.submit_sample(std::move(long_job));
    worker.start();
    while (steps < 3) {
        std::this_thread::sleep_for(1ms);
    }
    cancelled->store(true);
    ASSERT_TRUE(rec.wait_for(1));
    EXPECT_EQ(rec.events()[0], "donelong:error:cancelled: the client went away");
    EXPECT_EQ(engine.sampling_requests(), 0u);  // its KV cache (here: the fake's state) is gone
    EXPECT_EQ(engine.cancelled().size(), 1u);
    // A job cancelled while still queued never reaches the engine.
    SampleJob queued = job(rec, "queued", 5);
    queued.cancelled = std::make_shared<std::atomic<bool>>(true);
    worker.submit_sample(std::move(queued));
    ASSERT_TRUE(rec.wait_for(2));
    EXPECT_EQ(rec.events()[1], "donequeued:error:cancelled: the client went away");
}

TEST(Sampling, TheAdapterLruHonoursItsCapAndNeverEvictsOneInUse) {
    FakeEngine engine;
    Recorder rec;
    WorkerOptions options;
    options.max_sampler_adapters = 2;
    EngineWorker worker(engine, "test", options);
    std::atomic<int> loads{0};
    SampleJob first = sampler_job(rec, "s1", 1000000, loads);  // samples while s2..s4 come and go
    auto cancelled = std::make_shared<std::atomic<bool>>(false);
    first.cancelled = cancelled;
    worker.submit_sample(std::move(first));
    worker.start();
    for (const char * key : {"s2", "s3", "s4"}) {
        worker.submit_sample(sampler_job(rec, key, 1, loads));
    }
    ASSERT_TRUE(rec.wait_for(3));
    EXPECT_EQ(loads.load(), 4);
    // s1 is the least recently used but in use: kept; the cap is met by evicting s2 and s3.
    const auto deadline = std::chrono::steady_clock::now() + 5s;
    while (engine.live_adapters().size() > 2 && std::chrono::steady_clock::now() < deadline) {
        std::this_thread::sleep_for(1ms);
    }
    const auto live = engine.live_adapters();
    EXPECT_EQ(live.size(), 2u);
    EXPECT_EQ(live.count(1), 1u) << "s1's adapter was evicted while in use";
    cancelled->store(true);
    ASSERT_TRUE(rec.wait_for(4));
    worker.submit_sample(sampler_job(rec, "s4", 1, loads));  // still cached: no new import
    ASSERT_TRUE(rec.wait_for(5));
    EXPECT_EQ(loads.load(), 4);
    EXPECT_LE(engine.live_adapters().size(), 2u);
}

TEST(Sampling, AFailedLoadFailsOnlyItsJob) {
    FakeEngine engine;
    Recorder rec;
    EngineWorker worker(engine, "test");
    SampleJob bad = job(rec, "bad", 2);
    bad.adapter_key = "gone";
    bad.load_weights = []() -> Result<AdapterWeights> { return not_found("sampler 'gone' not found"); };
    worker.submit_sample(std::move(bad));
    worker.submit_sample(job(rec, "good", 2));
    worker.start();
    ASSERT_TRUE(rec.wait_for(2));
    auto events = rec.events();
    std::sort(events.begin(), events.end());
    EXPECT_EQ(events, (std::vector<std::string>{"donebad:error:sampler 'gone' not found", "donegood:2,3"}));
    EXPECT_TRUE(engine.live_adapters().empty());
}

TEST(Sampling, TheQueueIsBounded) {
    FakeEngine engine;
    Recorder rec;
    WorkerOptions options;
    options.max_queued_samples = 2;
    EngineWorker worker(engine, "test", options);
    for (const char * label : {"1", "2", "3"}) {
        worker.submit_sample(job(rec, label, 1));
    }
    ASSERT_TRUE(rec.wait_for(1));
    EXPECT_EQ(rec.events()[0], "done3:error:too many sample requests queued (2); retry shortly");
    worker.start();
    ASSERT_TRUE(rec.wait_for(3));
}

TEST(Sampling, AThrowingStepFailsTheRunningJobsAndTheWorkerGoesOn) {
    FakeEngine engine;
    Recorder rec;
    EngineWorker worker(engine, "test");
    worker.submit_sample(job(rec, "boom", 3, FakeEngine::kThrowingToken));
    worker.start();
    ASSERT_TRUE(rec.wait_for(1));
    EXPECT_EQ(rec.events()[0], "doneboom:error:engine error: sampling exploded");
    worker.submit_sample(job(rec, "after", 1));
    ASSERT_TRUE(rec.wait_for(2));
    EXPECT_EQ(rec.events()[1], "doneafter:2");
}

TEST(Sampling, StopAnswersQueuedAndRunningJobs) {
    FakeEngine engine;
    Recorder rec;
    auto worker = std::make_unique<EngineWorker>(engine, "test");
    std::atomic<int> steps{0};
    SampleJob running = job(rec, "running", 1000000);
    running.on_tokens = [&steps](std::vector<SampleToken>) { ++steps; };
    worker->submit_sample(std::move(running));
    worker->start();
    while (steps < 1) {
        std::this_thread::sleep_for(1ms);
    }
    worker->stop();
    worker->submit_sample(job(rec, "late", 1));
    ASSERT_TRUE(rec.wait_for(2));
    EXPECT_EQ(rec.events()[0], "donerunning:error:server shutting down");
    EXPECT_EQ(rec.events()[1], "donelate:error:the engine worker is stopped");
}

TEST(AdapterLru, EvictsTheLeastRecentlyUsedNotInUse) {
    FakeEngine engine;
    AdapterLru lru(2);
    auto load = []() -> Result<AdapterWeights> { return AdapterWeights{}; };
    auto acquire = [&](AdapterLru & cache, const std::string & key) {
        auto id = cache.acquire(engine, key, load);
        EXPECT_TRUE(id.ok());
        return id.ok() ? *id : engine::AdapterId{-1};
    };
    const auto a = acquire(lru, "a");
    const auto b = acquire(lru, "b");
    const auto c = acquire(lru, "c");
    EXPECT_EQ(acquire(lru, "a"), a);  // a hit makes `a` the most recent
    lru.trim(engine, {});
    EXPECT_EQ(lru.size(), 2u);
    EXPECT_EQ(engine.live_adapters(), (std::set<engine::AdapterId>{a, c}));  // b was the oldest
    lru.trim(engine, {a, c});
    EXPECT_EQ(lru.size(), 2u);
    AdapterLru tight(0);
    const auto d = acquire(tight, "d");
    tight.trim(engine, {d});  // over the cap but in use: kept
    EXPECT_EQ(tight.size(), 1u);
    tight.trim(engine, {});
    EXPECT_EQ(tight.size(), 0u);
    (void)b;
}

}  // namespace
}  // namespace tinkerd::scheduler
