// OutputStage: per-request order, one consumer thread, a bounded queue that makes the producer wait,
// token events dropped once a sink is cancelled (its outcome still delivered), nothing lost at stop.
#include "api/output_stage.h"

#include <atomic>
#include <chrono>
#include <future>
#include <map>
#include <mutex>
#include <thread>
#include <vector>

#include <gtest/gtest.h>

namespace tinkerd::api {
namespace {

std::vector<GeneratedToken> tokens_of(int64_t index, std::vector<int64_t> ids) {
    std::vector<GeneratedToken> out;
    for (int64_t id : ids) {
        out.push_back(GeneratedToken{index, id, -0.5f, {{id, -0.5f}}});
    }
    return out;
}

engine::SampleOutput output_with(int64_t n_tokens) {
    engine::SampleOutput out;
    out.sequences.resize(1);
    out.sequences[0].tokens.assign(static_cast<size_t>(n_tokens), 7);
    return out;
}

// Records what one request's sink saw, in order, and on which thread.
struct Recorder {
    std::mutex mutex;
    std::vector<int64_t> tokens;
    std::vector<std::thread::id> threads;
    int done = 0;
    bool done_after_tokens = true;
    bool ok = false;
    std::shared_ptr<SampleSink> sink(std::function<bool()> cancelled = nullptr) {
        return std::make_shared<FunctionSink>(
            [this](Result<engine::SampleOutput> out) {
                std::lock_guard<std::mutex> lock(mutex);
                ++done;
                ok = out.ok();
                threads.push_back(std::this_thread::get_id());
            },
            [this](std::vector<GeneratedToken> batch) {
                std::lock_guard<std::mutex> lock(mutex);
                if (done > 0) {
                    done_after_tokens = false;
                }
                for (const GeneratedToken & t : batch) {
                    tokens.push_back(t.token);
                }
                threads.push_back(std::this_thread::get_id());
            },
            std::move(cancelled));
    }
};

TEST(OutputStage, KeepsEachRequestsEventsInOrderOnOneThread) {
    std::vector<Recorder> recorders(8);
    {
        OutputStage stage(16);  // small: the producers often wait for room
        std::vector<std::shared_ptr<SampleSink>> sinks;
        for (auto & r : recorders) {
            sinks.push_back(r.sink());
        }
        // Two producers (two engine workers), each with its own requests, interleaving steps.
        auto produce = [&](size_t first) {
            for (int64_t step = 0; step < 200; ++step) {
                for (size_t r = first; r < first + 4; ++r) {
                    stage.push_tokens(sinks[r], tokens_of(0, {2 * step, 2 * step + 1}));
                }
            }
            for (size_t r = first; r < first + 4; ++r) {
                stage.push_done(sinks[r], output_with(400));
            }
        };
        std::thread a(produce, 0);
        std::thread b(produce, 4);
        a.join();
        b.join();
        stage.stop();
    }
    for (auto & r : recorders) {
        ASSERT_EQ(r.tokens.size(), 400u);
        for (int64_t i = 0; i < 400; ++i) {
            EXPECT_EQ(r.tokens[static_cast<size_t>(i)], i);
        }
        EXPECT_EQ(r.done, 1);
        EXPECT_TRUE(r.ok);
        EXPECT_TRUE(r.done_after_tokens);
        for (const auto & id : r.threads) {
            EXPECT_EQ(id, recorders[0].threads[0]);  // one output thread for everything
            EXPECT_NE(id, std::this_thread::get_id());
        }
    }
}

TEST(OutputStage, AFullQueueMakesTheProducerWaitUntilTheStageDrains) {
    std::promise<void> release;
    std::shared_future<void> released = release.get_future().share();
    std::atomic<int> handled{0};
    OutputStage stage(2);
    auto blocking = std::make_shared<FunctionSink>([&](Result<engine::SampleOutput>) {
        released.wait();  // the stage is busy with this event
        ++handled;
    });
    auto counting = std::make_shared<FunctionSink>([&](Result<engine::SampleOutput>) { ++handled; });
    stage.push_done(blocking, output_with(1));
    // The stage may or may not have taken the first event yet: fill until a push would wait.
    std::atomic<int> pushed{0};
    std::thread producer([&] {
        for (int i = 0; i < 4; ++i) {
            stage.push_done(counting, output_with(1));
            ++pushed;
        }
    });
    std::this_thread::sleep_for(std::chrono::milliseconds(200));
    EXPECT_GE(pushed.load(), 1);
    EXPECT_LE(pushed.load(), 2);  // at most the capacity (2) queued behind the busy event
    EXPECT_EQ(handled.load(), 0);
    EXPECT_GT(stage.full_waits(), 0);
    release.set_value();
    producer.join();
    stage.stop();
    EXPECT_EQ(pushed.load(), 4);
    EXPECT_EQ(handled.load(), 5);
}

TEST(OutputStage, DropsTokensAfterCancelButStillDeliversTheOutcome) {
    Recorder r;
    std::atomic<bool> cancelled{false};
    OutputStage stage(64);
    auto sink = r.sink([&] { return cancelled.load(); });
    stage.push_tokens(sink, tokens_of(0, {1, 2}));
    // Wait until the first batch is handled, then cancel: later token events are dropped.
    for (int i = 0; i < 500; ++i) {
        {
            std::lock_guard<std::mutex> lock(r.mutex);
            if (r.tokens.size() == 2) {
                break;
            }
        }
        std::this_thread::sleep_for(std::chrono::milliseconds(2));
    }
    cancelled = true;
    stage.push_tokens(sink, tokens_of(0, {3, 4}));
    stage.push_done(sink, invalid_argument("cancelled: the client went away"));
    stage.stop();
    EXPECT_EQ(r.tokens, (std::vector<int64_t>{1, 2}));
    EXPECT_EQ(r.done, 1);
    EXPECT_FALSE(r.ok);
}

TEST(OutputStage, EventsPushedAfterStopAreHandledOnTheCaller) {
    Recorder r;
    OutputStage stage(4);
    stage.stop();
    stage.push_tokens(r.sink(), tokens_of(0, {5}));
    auto sink = r.sink();
    stage.push_tokens(sink, {});  // an empty step is not an event
    stage.push_done(sink, output_with(1));
    EXPECT_EQ(r.tokens, (std::vector<int64_t>{5}));
    EXPECT_EQ(r.done, 1);
    EXPECT_EQ(r.threads.back(), std::this_thread::get_id());
}

TEST(OutputStage, AThrowingSinkDoesNotStopTheStage) {
    Recorder r;
    OutputStage stage(4);
    stage.push_done(std::make_shared<FunctionSink>([](Result<engine::SampleOutput>) { throw std::runtime_error("x"); }),
                    output_with(1));
    stage.push_done(r.sink(), output_with(1));
    stage.stop();
    EXPECT_EQ(r.done, 1);
}

}  // namespace
}  // namespace tinkerd::api
