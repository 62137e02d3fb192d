// ComputeThread: calls from several threads all run on its one thread, in turn, each caller waiting for its own;
// exceptions reach the caller; a call from the compute thread itself runs at once. And EngineWorkers that share
// one run their engine calls on it.
#include "scheduler/compute_thread.h"

#include <atomic>
#include <set>
#include <stdexcept>
#include <thread>
#include <vector>

#include <gtest/gtest.h>

#include "scheduler/fake_engine.h"
#include "scheduler/worker.h"

namespace tinkerd::scheduler {
namespace {

TEST(ComputeThread, RunsEveryCallersWorkOnItsOneThreadOneAtATime) {
    ComputeThread compute;
    std::mutex mu;
    std::set<std::thread::id> ran_on;
    std::atomic<int> inside{0}, most_inside{0}, total{0};
    std::vector<std::thread> callers;
    for (int c = 0; c < 4; ++c) {
        callers.emplace_back([&] {
            for (int i = 0; i < 50; ++i) {
                compute.run([&] {
                    most_inside = std::max(most_inside.load(), ++inside);
                    {
                        std::lock_guard lock(mu);
                        ran_on.insert(std::this_thread::get_id());
                    }
                    ++total;
                    --inside;
                });
            }
        });
    }
    for (std::thread & t : callers) {
        t.join();
    }
    EXPECT_EQ(total.load(), 200);  // each run() returned after its own call ran
    EXPECT_EQ(most_inside.load(), 1);
    ASSERT_EQ(ran_on.size(), 1u);
    EXPECT_NE(*ran_on.begin(), std::this_thread::get_id());
}

TEST(ComputeThread, RethrowsAndRunsNestedCallsInPlace) {
    ComputeThread compute;
    EXPECT_THROW(compute.run([] { throw std::runtime_error("engine exploded"); }), std::runtime_error);
    int nested = 0;
    compute.run([&] { compute.run([&] { nested = 1; }); });  // would deadlock if queued
    EXPECT_EQ(nested, 1);
}

// A generic op that records the id of the thread it runs on.
Op thread_recording_op(std::mutex & mu, std::vector<std::thread::id> & ids, fakes::Recorder & rec) {
    Op op;
    op.kind = Op::Kind::GENERIC;
    op.run = [&](engine::Engine &) {
        {
            std::lock_guard lock(mu);
            ids.push_back(std::this_thread::get_id());
        }
        rec.add("ran");
    };
    op.on_cancel = [](const std::string &) {};
    return op;
}

std::vector<std::thread::id> thread_ids_of_two_workers(const std::shared_ptr<ComputeThread> & compute) {
    fakes::FakeEngine engine_a, engine_b;
    fakes::Recorder rec;
    std::mutex mu;
    std::vector<std::thread::id> ids;
    WorkerOptions options;
    options.compute = compute;
    EngineWorker a(engine_a, "a", options), b(engine_b, "b", options);
    for (EngineWorker * w : {&a, &b}) {
        w->open_run("R", 1);
        w->start();
        EXPECT_TRUE(w->submit("R", 1, "h1", "req-1", thread_recording_op(mu, ids, rec)).ok());
    }
    EXPECT_TRUE(rec.wait_for(2));
    std::lock_guard lock(mu);
    return ids;
}

TEST(ComputeThread, WorkersThatShareOneRunTheirEngineCallsOnIt) {
    const std::vector<std::thread::id> shared = thread_ids_of_two_workers(std::make_shared<ComputeThread>());
    ASSERT_EQ(shared.size(), 2u);
    EXPECT_EQ(shared[0], shared[1]);
    const std::vector<std::thread::id> own = thread_ids_of_two_workers(nullptr);  // the control: each its own
    ASSERT_EQ(own.size(), 2u);
    EXPECT_NE(own[0], own[1]);
}

}  // namespace
}  // namespace tinkerd::scheduler
