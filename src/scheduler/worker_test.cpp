// Tests for EngineWorker against a FakeEngine (no torch): seq_id order, gaps, DUPLICATE / CONFLICT / STALE,
// skip, cross-run batching of forward_backward, forward-only separation, barriers, the token cap,
// close_run / stop cancellation, fairness, exceptions and posted tasks.
#include "scheduler/worker.h"

#include <algorithm>
#include <atomic>
#include <condition_variable>
#include <cstring>
#include <map>
#include <mutex>
#include <stdexcept>
#include <thread>
#include <vector>

#include <gtest/gtest.h>

#include "scheduler/fake_engine.h"
#include "scheduler/run_queue.h"

namespace tinkerd::scheduler {
namespace {

using namespace std::chrono_literals;
using engine::AdapterId;
using engine::ForwardBackwardInput;
using engine::ForwardBackwardOutput;
using fakes::FakeEngine;
using fakes::Recorder;

// A host tensor built by hand (the engine's helpers live in the torch library).
engine::HostTensor i64_tensor(const std::vector<int64_t> & values) {
    engine::HostTensor tensor;
    tensor.dtype = model::DType::I64;
    tensor.shape = {static_cast<int64_t>(values.size())};
    tensor.bytes.resize(values.size() * sizeof(int64_t));
    std::memcpy(tensor.bytes.data(), values.data(), tensor.bytes.size());
    return tensor;
}

// A forward_backward op on `adapter` with `tokens` tokens; its result lands in `rec` as
// "fb<tag>:a<adapter>" or "fb<tag>:error:<message>", a cancel as "cancel<tag>:<reason>".
Op fb_op(Recorder & rec, AdapterId adapter, int tag, int64_t tokens = 4, bool forward_only = false) {
    Op op;
    op.kind = Op::Kind::FORWARD_BACKWARD;
    op.forward_only = forward_only;
    op.fb_input.adapter = adapter;
    op.fb_input.loss_fn_config["tag"] = tag;
    engine::Datum datum;
    datum.tokens.assign(static_cast<size_t>(tokens), 7);
    datum.loss_inputs["target_tokens"] = i64_tensor(datum.tokens);
    op.fb_input.datums.push_back(std::move(datum));
    op.on_fb_done = [&rec, tag](Result<ForwardBackwardOutput> result, double) {
        std::string prefix = std::string("fb") + std::to_string(tag) + ":";
        if (!result.ok()) {
            rec.add(prefix + "error:" + result.error().message);
            return;
        }
        rec.add(prefix + "a" + std::to_string(int(result->metrics.at("adapter:sum"))) + "/t" +
                std::to_string(int(result->metrics.at("tag:sum"))));
    };
    op.on_cancel = [&rec, tag](const std::string & reason) {
        rec.add(std::string("cancel") + std::to_string(tag) + ":" + reason);
    };
    return op;
}

// A generic op that records `label` when it runs and "cancel:<label>:<reason>" when cancelled.
Op generic_op(Recorder & rec, const std::string & label) {
    Op op;
    op.kind = Op::Kind::GENERIC;
    op.run = [&rec, label](engine::Engine &) { rec.add(label); };
    op.on_cancel = [&rec, label](const std::string & reason) { rec.add("cancel:" + label + ":" + reason); };
    return op;
}

Admission::Kind submit_kind(EngineWorker & worker, const std::string & run, int64_t seq, Op op,
                            const std::string & hash = "") {
    std::string h = hash.empty() ? std::string("h") + std::to_string(seq) : hash;
    auto admission = worker.submit(run, seq, h, run + "-req-" + std::to_string(seq), std::move(op));
    EXPECT_TRUE(admission.ok());
    return admission.ok() ? admission->kind : Admission::Kind::STALE;
}

TEST(EngineWorker, RunsOneRunsOpsInSeqOrder) {
    FakeEngine engine;
    Recorder rec;
    EngineWorker worker(engine, "test");
    worker.open_run("A", 1);
    worker.start();
    for (int seq : {3, 4, 2}) {
        EXPECT_EQ(submit_kind(worker, "A", seq, generic_op(rec, std::string("op") + std::to_string(seq))),
                  Admission::Kind::ACCEPTED);
    }
    std::this_thread::sleep_for(30ms);
    EXPECT_TRUE(rec.events().empty());  // nothing runs before seq 1 arrives
    EXPECT_EQ(submit_kind(worker, "A", 1, generic_op(rec, "op1")), Admission::Kind::ACCEPTED);
    ASSERT_TRUE(rec.wait_for(4));
    EXPECT_EQ(rec.events(), (std::vector<std::string>{"op1", "op2", "op3", "op4"}));
}

TEST(EngineWorker, GapBlocksOnlyItsOwnRun) {
    FakeEngine engine;
    Recorder rec;
    EngineWorker worker(engine, "test");
    worker.open_run("A", 1);
    worker.open_run("B", 1);
    worker.start();
    submit_kind(worker, "A", 1, generic_op(rec, "A1"));
    submit_kind(worker, "A", 3, generic_op(rec, "A3"));
    submit_kind(worker, "B", 1, generic_op(rec, "B1"));
    ASSERT_TRUE(rec.wait_for(2));
    std::this_thread::sleep_for(30ms);
    auto events = rec.events();
    ASSERT_EQ(events.size(), 2u);  // A3 waits for A2, B1 ran meanwhile
    EXPECT_NE(std::find(events.begin(), events.end(), "B1"), events.end());
    submit_kind(worker, "A", 2, generic_op(rec, "A2"));
    ASSERT_TRUE(rec.wait_for(4));
    events = rec.events();
    EXPECT_EQ(events[2], "A2");
    EXPECT_EQ(events[3], "A3");
}

TEST(EngineWorker, DuplicateReturnsOriginalIdAndRunsOnce) {
    FakeEngine engine;
    Recorder rec;
    EngineWorker worker(engine, "test");
    worker.open_run("A", 1);
    auto first = worker.submit("A", 1, "hash", "req-original", generic_op(rec, "once"));
    ASSERT_TRUE(first.ok());
    EXPECT_EQ(first->kind, Admission::Kind::ACCEPTED);
    EXPECT_EQ(first->request_id, "req-original");
    auto again = worker.submit("A", 1, "hash", "req-second", generic_op(rec, "twice"));
    ASSERT_TRUE(again.ok());
    EXPECT_EQ(again->kind, Admission::Kind::DUPLICATE);
    EXPECT_EQ(again->request_id, "req-original");
    worker.start();
    ASSERT_TRUE(rec.wait_for(1));
    // Still a duplicate after it executed.
    auto late = worker.submit("A", 1, "hash", "req-third", generic_op(rec, "thrice"));
    ASSERT_TRUE(late.ok());
    EXPECT_EQ(late->kind, Admission::Kind::DUPLICATE);
    EXPECT_EQ(late->request_id, "req-original");
    std::this_thread::sleep_for(20ms);
    EXPECT_EQ(rec.events(), std::vector<std::string>{"once"});
}

TEST(EngineWorker, ConflictStaleAndUnknownRun) {
    FakeEngine engine;
    Recorder rec;
    EngineWorker worker(engine, "test");
    worker.open_run("A", 5);
    EXPECT_EQ(submit_kind(worker, "A", 5, generic_op(rec, "x"), "one"), Admission::Kind::ACCEPTED);
    EXPECT_EQ(submit_kind(worker, "A", 5, generic_op(rec, "y"), "two"), Admission::Kind::CONFLICT);
    EXPECT_EQ(submit_kind(worker, "A", 3, generic_op(rec, "z")), Admission::Kind::STALE);
    auto missing = worker.submit("nope", 1, "h", "r", generic_op(rec, "w"));
    ASSERT_FALSE(missing.ok());
    EXPECT_EQ(missing.error().kind, ErrorKind::NOT_FOUND);
}

TEST(EngineWorker, SkipUnblocksTheRun) {
    FakeEngine engine;
    Recorder rec;
    EngineWorker worker(engine, "test");
    worker.open_run("A", 1);
    worker.start();
    submit_kind(worker, "A", 2, generic_op(rec, "A2"));
    worker.skip("A", 4);  // ahead of next_seq: consumed when reached
    submit_kind(worker, "A", 5, generic_op(rec, "A5"));
    submit_kind(worker, "A", 3, generic_op(rec, "A3"));
    std::this_thread::sleep_for(20ms);
    EXPECT_TRUE(rec.events().empty());
    worker.skip("A", 1);
    ASSERT_TRUE(rec.wait_for(3));
    EXPECT_EQ(rec.events(), (std::vector<std::string>{"A2", "A3", "A5"}));
    EXPECT_EQ(submit_kind(worker, "A", 4, generic_op(rec, "A4")), Admission::Kind::STALE);
    EXPECT_EQ(submit_kind(worker, "A", 1, generic_op(rec, "A1")), Admission::Kind::STALE);
}

TEST(EngineWorker, SeqIdFarAheadIsRefusedAndItsSkipIgnored) {
    FakeEngine engine;
    Recorder rec;
    EngineWorker worker(engine, "test");
    worker.open_run("A", 1);
    const int64_t far = int64_t{1} << 40;
    EXPECT_EQ(submit_kind(worker, "A", far, generic_op(rec, "far")), Admission::Kind::TOO_FAR);
    EXPECT_EQ(submit_kind(worker, "A", 1 + RunQueue::kMaxAhead + 1, generic_op(rec, "x")), Admission::Kind::TOO_FAR);
    EXPECT_EQ(submit_kind(worker, "A", 1 + RunQueue::kMaxAhead, generic_op(rec, "edge")), Admission::Kind::ACCEPTED);
    worker.skip("A", far);  // nothing is remembered for it
    worker.start();
    submit_kind(worker, "A", 1, generic_op(rec, "A1"));
    ASSERT_TRUE(rec.wait_for(1));
    EXPECT_EQ(rec.events(), std::vector<std::string>{"A1"});
}

// A seq_id that never arrives is given up after the gap timeout; the ops behind it run in order, the
// late arrival is STALE, and another run's hole keeps its own clock.
TEST(EngineWorker, AHoleInTheOrderIsGivenUpAfterTheTimeout) {
    FakeEngine engine;
    Recorder rec;
    WorkerOptions options;
    options.seq_gap_timeout = 1s;  // far past the 60 ms look below, even on a loaded machine
    EngineWorker worker(engine, "test", options);
    worker.open_run("A", 1);
    worker.start();
    submit_kind(worker, "A", 1, generic_op(rec, "A1"));
    submit_kind(worker, "A", 4, generic_op(rec, "A4"));  // 2 and 3 never come
    submit_kind(worker, "A", 5, generic_op(rec, "A5"));
    ASSERT_TRUE(rec.wait_for(1));
    std::this_thread::sleep_for(60ms);
    EXPECT_EQ(rec.events(), std::vector<std::string>{"A1"});  // still waiting
    ASSERT_TRUE(rec.wait_for(3));
    EXPECT_EQ(rec.events(), (std::vector<std::string>{"A1", "A4", "A5"}));
    EXPECT_EQ(submit_kind(worker, "A", 2, generic_op(rec, "A2")), Admission::Kind::STALE);
    EXPECT_EQ(submit_kind(worker, "A", 6, generic_op(rec, "A6")), Admission::Kind::ACCEPTED);
    ASSERT_TRUE(rec.wait_for(4));
}

TEST(EngineWorker, BatchesForwardBackwardAcrossRuns) {
    FakeEngine engine;
    engine.hold_first_call();
    Recorder rec;
    EngineWorker worker(engine, "test");
    for (const char * run : {"A", "B", "C", "D"}) {
        worker.open_run(run, 1);
    }
    worker.start();
    submit_kind(worker, "D", 1, fb_op(rec, 4, 40));
    engine.wait_entered(1);  // the engine is busy with D's op
    submit_kind(worker, "A", 1, fb_op(rec, 1, 10));
    submit_kind(worker, "B", 1, fb_op(rec, 2, 20));
    submit_kind(worker, "C", 1, fb_op(rec, 3, 30));
    engine.release();
    ASSERT_TRUE(rec.wait_for(4));
    auto calls = engine.calls();
    ASSERT_EQ(calls.size(), 2u);
    EXPECT_EQ(calls[1].adapters.size(), 3u);
    EXPECT_TRUE(calls[1].backward);
    EXPECT_EQ(worker.max_runs_in_a_batch(), 3);
    EXPECT_EQ(worker.batches_run(), 2);
    EXPECT_EQ(worker.fb_ops_run(), 4);
    auto events = rec.events();
    for (const char * expected : {"fb40:a4/t40", "fb10:a1/t10", "fb20:a2/t20", "fb30:a3/t30"}) {
        EXPECT_NE(std::find(events.begin(), events.end(), expected), events.end()) << expected;
    }
}

TEST(EngineWorker, LoadCountsQueuedOpsAndBusyTime) {
    FakeEngine engine;
    engine.hold_first_call();
    Recorder rec;
    EngineWorker worker(engine, "test");
    worker.open_run("A", 1);
    worker.start();
    submit_kind(worker, "A", 1, fb_op(rec, 1, 10));
    engine.wait_entered(1);  // the engine is busy with seq 1: seq 2 and 3 wait
    submit_kind(worker, "A", 2, fb_op(rec, 2, 10));
    submit_kind(worker, "A", 3, generic_op(rec, "optim"));
    EXPECT_EQ(worker.load().queued_ops, 2);
    std::this_thread::sleep_for(20ms);
    engine.release();
    ASSERT_TRUE(rec.wait_for(3));
    std::this_thread::sleep_for(20ms);  // the last step's time is noted after its callbacks
    const WorkerLoad load = worker.load();
    EXPECT_EQ(load.queued_ops, 0);
    EXPECT_GE(load.busy_seconds, 0.015);  // the held call counts as engine time
    EXPECT_GT(load.busy_fraction, 0.0);
    EXPECT_LE(load.busy_fraction, 1.0);
}

TEST(EngineWorker, ConsecutiveChunksOfOneRunJoinOneBatch) {
    FakeEngine engine;
    Recorder rec;
    EngineWorker worker(engine, "test");
    worker.open_run("A", 1);
    for (int seq : {3, 2, 1}) {
        submit_kind(worker, "A", seq, fb_op(rec, 1, seq));
    }
    worker.start();
    ASSERT_TRUE(rec.wait_for(3));
    auto calls = engine.calls();
    ASSERT_EQ(calls.size(), 1u);
    EXPECT_EQ(calls[0].tags, (std::vector<std::string>{"1", "2", "3"}));
    EXPECT_EQ(rec.events(), (std::vector<std::string>{"fb1:a1/t1", "fb2:a1/t2", "fb3:a1/t3"}));
}

TEST(EngineWorker, ForwardOnlyAndBackwardAreNotMixed) {
    FakeEngine engine;
    engine.hold_first_call();
    Recorder rec;
    EngineWorker worker(engine, "test");
    for (const char * run : {"A", "B", "C", "D"}) {
        worker.open_run(run, 1);
    }
    worker.start();
    submit_kind(worker, "D", 1, fb_op(rec, 4, 40));
    engine.wait_entered(1);
    submit_kind(worker, "A", 1, fb_op(rec, 1, 10, 4, /*forward_only=*/true));
    submit_kind(worker, "B", 1, fb_op(rec, 2, 20, 4, /*forward_only=*/false));
    submit_kind(worker, "C", 1, fb_op(rec, 3, 30, 4, /*forward_only=*/true));
    submit_kind(worker, "C", 2, fb_op(rec, 3, 31, 4, /*forward_only=*/false));
    engine.release();
    ASSERT_TRUE(rec.wait_for(5));
    auto calls = engine.calls();
    ASSERT_EQ(calls.size(), 3u);  // [D], [A, C1] forward-only, [B, C2] with backward
    for (const auto & call : calls) {
        for (const auto & tag : call.tags) {
            bool forward_only = tag == "10" || tag == "30";
            EXPECT_EQ(call.backward, !forward_only) << "tag " << tag;
        }
    }
}

TEST(EngineWorker, OptimStepIsABarrierWithinARun) {
    FakeEngine engine;
    Recorder rec;
    EngineWorker worker(engine, "test");
    worker.open_run("A", 1);
    submit_kind(worker, "A", 1, fb_op(rec, 1, 1));
    submit_kind(worker, "A", 2, generic_op(rec, "optim2"));
    submit_kind(worker, "A", 3, fb_op(rec, 1, 3));
    submit_kind(worker, "A", 4, generic_op(rec, "optim4"));
    worker.start();
    ASSERT_TRUE(rec.wait_for(4));
    EXPECT_EQ(rec.events(), (std::vector<std::string>{"fb1:a1/t1", "optim2", "fb3:a1/t3", "optim4"}));
    EXPECT_EQ(engine.calls().size(), 2u);
}

TEST(EngineWorker, RespectsMaxBatchTokens) {
    FakeEngine engine;
    engine.hold_first_call();
    Recorder rec;
    WorkerOptions options;
    options.max_batch_tokens = 10;
    EngineWorker worker(engine, "test", options);
    for (const char * run : {"A", "B", "C", "D"}) {
        worker.open_run(run, 1);
    }
    worker.start();
    submit_kind(worker, "D", 1, fb_op(rec, 4, 40, 50));  // over the cap alone: still runs
    engine.wait_entered(1);
    submit_kind(worker, "A", 1, fb_op(rec, 1, 10, 6));
    submit_kind(worker, "B", 1, fb_op(rec, 2, 20, 6));
    submit_kind(worker, "C", 1, fb_op(rec, 3, 30, 3));
    engine.release();
    ASSERT_TRUE(rec.wait_for(4));
    auto calls = engine.calls();
    EXPECT_EQ(calls.front().tokens, 50);
    size_t inputs = 0;
    for (const auto & call : calls) {
        EXPECT_TRUE(call.tokens <= 10 || call.adapters.size() == 1) << call.tokens;
        inputs += call.adapters.size();
    }
    EXPECT_EQ(inputs, 4u);
    EXPECT_EQ(calls.size(), 3u);  // [D], [A, C] (9 tokens), [B]
}

TEST(EngineWorker, CloseRunCancelsQueuedOps) {
    FakeEngine engine;
    Recorder rec;
    EngineWorker worker(engine, "test");
    worker.open_run("A", 1);
    worker.start();
    submit_kind(worker, "A", 2, generic_op(rec, "A2"));
    submit_kind(worker, "A", 3, fb_op(rec, 1, 3));
    worker.close_run("A", "model unloaded");
    EXPECT_FALSE(worker.has_run("A"));
    EXPECT_EQ(rec.events(), (std::vector<std::string>{"cancel:A2:model unloaded", "cancel3:model unloaded"}));
    auto later = worker.submit("A", 1, "h", "r", generic_op(rec, "A1"));
    ASSERT_FALSE(later.ok());
    EXPECT_EQ(later.error().kind, ErrorKind::NOT_FOUND);
}

TEST(EngineWorker, StopCancelsQueuedOps) {
    FakeEngine engine;
    Recorder rec;
    EngineWorker worker(engine, "test");
    worker.open_run("A", 1);
    worker.start();
    submit_kind(worker, "A", 2, generic_op(rec, "A2"));
    worker.stop();
    EXPECT_EQ(rec.events(), std::vector<std::string>{"cancel:A2:server shutting down"});
    EXPECT_FALSE(worker.submit("A", 1, "h", "r", generic_op(rec, "A1")).ok());
}

TEST(EngineWorker, ExceptionsAreCaughtAndTheWorkerGoesOn) {
    FakeEngine engine;
    Recorder rec;
    EngineWorker worker(engine, "test");
    worker.open_run("A", 1);
    worker.open_run("B", 1);
    Op throwing;
    throwing.run = [](engine::Engine &) { throw std::runtime_error("boom"); };
    throwing.on_cancel = [&rec](const std::string & reason) { rec.add("cancel:" + reason); };
    submit_kind(worker, "A", 1, std::move(throwing));
    submit_kind(worker, "A", 2, generic_op(rec, "A2"));
    Op bad_callback = fb_op(rec, 2, 1);
    bad_callback.on_fb_done = [](Result<ForwardBackwardOutput>, double) { throw std::logic_error("callback"); };
    submit_kind(worker, "B", 1, std::move(bad_callback));
    submit_kind(worker, "B", 2, generic_op(rec, "B2"));
    worker.start();
    ASSERT_TRUE(rec.wait_for(3));
    submit_kind(worker, "A", 3, fb_op(rec, FakeEngine::kThrowingAdapter, 3));
    ASSERT_TRUE(rec.wait_for(4));
    auto events = rec.events();
    EXPECT_NE(std::find(events.begin(), events.end(), "cancel:internal error: boom"), events.end());
    EXPECT_NE(std::find(events.begin(), events.end(), "A2"), events.end());
    EXPECT_NE(std::find(events.begin(), events.end(), "B2"), events.end());
    EXPECT_EQ(events.back(), "fb3:error:forward_backward threw: engine exploded");
}

TEST(EngineWorker, RoundRobinIsFairAcrossRuns) {
    FakeEngine engine;
    Recorder rec;
    EngineWorker worker(engine, "test");
    worker.open_run("A", 1);
    worker.open_run("B", 1);
    for (int seq = 1; seq <= 5; seq++) {
        submit_kind(worker, "A", seq, generic_op(rec, std::string("A") + std::to_string(seq)));
    }
    submit_kind(worker, "B", 1, generic_op(rec, "B1"));
    worker.start();
    ASSERT_TRUE(rec.wait_for(6));
    auto events = rec.events();
    auto position = std::find(events.begin(), events.end(), "B1") - events.begin();
    EXPECT_LE(position, 1);
}

// Fairness is per tenant, not per run: tenant "many" with 4 busy runs and tenant "one" with 1 alternate,
// so "one" gets half of the picks (stated ratio 1:1, checked within 10% over the first 40), and each
// run's ops still run in seq_id order.
TEST(EngineWorker, TenantsShareThePicksWhateverTheirNumberOfRuns) {
    FakeEngine engine;
    Recorder rec;
    EngineWorker worker(engine, "test");
    for (const char * run : {"m1", "m2", "m3", "m4"}) {
        worker.open_run(run, 1, "many");
        for (int seq = 1; seq <= 40; ++seq) {
            submit_kind(worker, run, seq, generic_op(rec, std::string("many:") + run + ":" + std::to_string(seq)));
        }
    }
    worker.open_run("o1", 1, "one");
    for (int seq = 1; seq <= 40; ++seq) {
        submit_kind(worker, "o1", seq, generic_op(rec, "one:o1:" + std::to_string(seq)));
    }
    worker.start();
    ASSERT_TRUE(rec.wait_for(200));
    const auto events = rec.events();
    const auto ones = std::count_if(events.begin(), events.begin() + 40,
                                    [](const std::string & e) { return e.rfind("one:", 0) == 0; });
    EXPECT_GE(ones, 18) << "tenant 'one' got " << ones << " of the first 40 picks";
    EXPECT_LE(ones, 22);
    std::map<std::string, int> last_seq;  // order per run
    for (const auto & e : events) {
        const auto cut = e.rfind(':');
        const std::string run = e.substr(0, cut);
        const int seq = std::stoi(e.substr(cut + 1));
        EXPECT_EQ(seq, last_seq[run] + 1) << e;
        last_seq[run] = seq;
    }
}

// No starvation: a run that arrives behind 200 queued ops of another tenant runs within two picks.
TEST(EngineWorker, ARunBehindABusyTenantIsNotStarved) {
    FakeEngine engine;
    Recorder rec;
    EngineWorker worker(engine, "test");
    worker.open_run("busy", 1, "a");
    for (int seq = 1; seq <= 200; ++seq) {
        submit_kind(worker, "busy", seq, generic_op(rec, "busy" + std::to_string(seq)));
    }
    worker.open_run("late", 1, "b");
    submit_kind(worker, "late", 1, generic_op(rec, "late1"));
    worker.start();
    ASSERT_TRUE(rec.wait_for(201));
    const auto events = rec.events();
    EXPECT_LE(std::find(events.begin(), events.end(), "late1") - events.begin(), 1);
}

// Bounded queues: a run holds at most max_queued_ops_per_run waiting ops; a resend of a queued one is
// still a DUPLICATE, and room comes back as ops run.
TEST(EngineWorker, ARunsQueueIsBounded) {
    FakeEngine engine;
    Recorder rec;
    WorkerOptions options;
    options.max_queued_ops_per_run = 3;
    EngineWorker worker(engine, "test", options);
    worker.open_run("A", 1, "t");
    for (int seq = 2; seq <= 4; ++seq) {  // seq 1 missing: nothing can run yet
        EXPECT_EQ(submit_kind(worker, "A", seq, generic_op(rec, "A" + std::to_string(seq))), Admission::Kind::ACCEPTED);
    }
    EXPECT_EQ(submit_kind(worker, "A", 5, generic_op(rec, "A5")), Admission::Kind::QUEUE_FULL);
    EXPECT_EQ(submit_kind(worker, "A", 3, generic_op(rec, "again")), Admission::Kind::DUPLICATE);
    // The op everything waits for is admitted even when full (else a full queue behind a hole deadlocks).
    EXPECT_EQ(submit_kind(worker, "A", 1, generic_op(rec, "A1")), Admission::Kind::ACCEPTED);
    worker.start();
    ASSERT_TRUE(rec.wait_for(4));
    EXPECT_EQ(submit_kind(worker, "A", 5, generic_op(rec, "A5")), Admission::Kind::ACCEPTED);
    ASSERT_TRUE(rec.wait_for(5));
}

TEST(EngineWorker, PostedTasksRunInOrder) {
    FakeEngine engine;
    Recorder rec;
    EngineWorker worker(engine, "test");
    worker.open_run("A", 1);
    for (int i = 0; i < 3; i++) {
        worker.post([&rec, i](engine::Engine & e) {
            rec.add(std::string("task") + std::to_string(i) + ":" + e.compute_dtype_name());
        });
    }
    submit_kind(worker, "A", 1, generic_op(rec, "A1"));
    worker.post([](engine::Engine &) { throw std::runtime_error("task failure"); });
    worker.post([&rec](engine::Engine &) { rec.add("task3"); });
    worker.start();
    ASSERT_TRUE(rec.wait_for(5));
    std::vector<std::string> tasks;
    for (const auto & event : rec.events()) {
        if (event.rfind("task", 0) == 0) {
            tasks.push_back(event);
        }
    }
    EXPECT_EQ(tasks, (std::vector<std::string>{"task0:fp32", "task1:fp32", "task2:fp32", "task3"}));
}

// The interleaving policy (`next_work_locked`): a burst of 20 sampling tasks queued together with 5
// training steps of one run neither starves the training steps nor is starved by them — they alternate.
TEST(EngineWorker, SamplingBurstAndTrainingStepsInterleave) {
    FakeEngine engine;
    Recorder rec;
    EngineWorker worker(engine, "test");
    worker.open_run("A", 1);
    for (int i = 0; i < 20; i++) {
        worker.post([&rec](engine::Engine &) { rec.add("sample"); });
    }
    for (int seq = 1; seq <= 5; seq++) {
        submit_kind(worker, "A", seq, generic_op(rec, "step"));
    }
    worker.start();
    ASSERT_TRUE(rec.wait_for(25));
    const auto events = rec.events();
    int max_samples_between_steps = 0, samples_in_a_row = 0, steps_seen = 0;
    for (const auto & event : events) {
        if (event == "step") {
            ++steps_seen;
            max_samples_between_steps = std::max(max_samples_between_steps, samples_in_a_row);
            samples_in_a_row = 0;
        } else if (steps_seen < 5) {
            ++samples_in_a_row;
        }
    }
    EXPECT_EQ(steps_seen, 5);
    EXPECT_LE(max_samples_between_steps, 1) << "a training step waited for more than one sampling task";
    // and the sampling burst was not held back until training finished: samples ran between the steps
    const auto first_sample = std::find(events.begin(), events.end(), "sample") - events.begin();
    const auto last_step = std::find(events.rbegin(), events.rend(), "step").base() - events.begin();
    EXPECT_LT(first_sample, last_step);
}

}  // namespace
}  // namespace tinkerd::scheduler
