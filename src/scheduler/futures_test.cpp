// Tests for FutureTable: immediate and held polls, completion from another thread, timeouts, unknown ids,
// eviction with DB lookup fallback, on_finish, and 10,000 concurrent held polls.
#include "scheduler/futures.h"

#include <atomic>
#include <future>
#include <map>
#include <mutex>
#include <thread>
#include <vector>

#include <gtest/gtest.h>

namespace tinkerd::scheduler {
namespace {

using namespace std::chrono_literals;
using State = FutureOutcome::State;

// Collects one poll's answer; get() blocks until it arrives.
struct PollResult {
    std::promise<FutureOutcome> promise;
    std::future<FutureOutcome> future = promise.get_future();
    std::atomic<int> calls{0};
    std::thread::id thread;

    std::function<void(FutureOutcome)> callback() {
        return [this](FutureOutcome outcome) {
            thread = std::this_thread::get_id();
            if (calls.fetch_add(1) == 0) {
                promise.set_value(std::move(outcome));
            }
        };
    }
    FutureOutcome get() {
        EXPECT_EQ(future.wait_for(5s), std::future_status::ready);
        return future.get();
    }
};

TEST(FutureTable, IdsAreUniqueAndWellFormed) {
    FutureTable table({});
    std::string a = table.create("t", "OptimStep");
    std::string b = table.create("t", "OptimStep");
    EXPECT_NE(a, b);
    ASSERT_EQ(a.size(), 4u + 32u);
    EXPECT_EQ(a.substr(0, 4), "req-");
    EXPECT_EQ(a.find_first_not_of("0123456789abcdef", 4), std::string::npos);
    EXPECT_EQ(table.pending_futures(), 2u);
    EXPECT_EQ(table.peek(a).state, State::PENDING);
    EXPECT_EQ(table.peek(a).request_type, "OptimStep");
}

TEST(FutureTable, CompleteBeforeWaitAnswersAtOnce) {
    FutureTable table({});
    std::string id = table.create("tenant-a", "ForwardBackward");
    table.complete(id, "{\"x\":1}", "PROTO");
    PollResult poll;
    table.wait(id, 10s, poll.callback());
    EXPECT_EQ(poll.thread, std::this_thread::get_id());  // answered inline
    FutureOutcome outcome = poll.get();
    EXPECT_EQ(outcome.state, State::DONE);
    EXPECT_EQ(outcome.json, "{\"x\":1}");
    EXPECT_EQ(outcome.proto, "PROTO");
    EXPECT_EQ(outcome.tenant, "tenant-a");
    EXPECT_EQ(outcome.request_type, "ForwardBackward");
    EXPECT_EQ(table.pending_futures(), 0u);
}

TEST(FutureTable, WaitThenCompleteCallsBackFromCompletingThread) {
    FutureTable table({});
    std::string id = table.create("t", "OptimStep");
    PollResult poll;
    table.wait(id, 10s, poll.callback());
    EXPECT_EQ(table.waiting_polls(), 1u);
    std::thread::id completer;
    std::thread worker([&] {
        completer = std::this_thread::get_id();
        table.complete(id, "{}");
    });
    worker.join();
    EXPECT_EQ(poll.get().state, State::DONE);
    EXPECT_EQ(poll.thread, completer);
    EXPECT_EQ(table.waiting_polls(), 0u);
}

TEST(FutureTable, FailCarriesMessageAndCategory) {
    FutureTable table({});
    std::string id = table.create("t", "OptimStep");
    PollResult poll;
    table.wait(id, 10s, poll.callback());
    table.fail(id, "bad loss_fn", "user");
    FutureOutcome outcome = poll.get();
    EXPECT_EQ(outcome.state, State::FAILED);
    EXPECT_EQ(outcome.error, "bad loss_fn");
    EXPECT_EQ(outcome.category, "user");
    // Finishing twice changes nothing.
    table.complete(id, "{}");
    EXPECT_EQ(table.peek(id).state, State::FAILED);
}

TEST(FutureTable, TimeoutAnswersPending) {
    FutureTable table({});
    std::string id = table.create("t", "Sample");
    PollResult poll;
    auto t0 = std::chrono::steady_clock::now();
    table.wait(id, 50ms, poll.callback());
    FutureOutcome outcome = poll.get();
    auto elapsed = std::chrono::steady_clock::now() - t0;
    EXPECT_EQ(outcome.state, State::PENDING);
    EXPECT_EQ(outcome.request_type, "Sample");
    EXPECT_GE(elapsed, 50ms);
    EXPECT_LT(elapsed, 1s);
    EXPECT_EQ(table.waiting_polls(), 0u);
    // A later completion does not call the expired poll again.
    table.complete(id, "{}");
    EXPECT_EQ(poll.calls.load(), 1);
}

TEST(FutureTable, EarlierDeadlineWakesTimer) {
    FutureTable table({});
    std::string id = table.create("t", "Sample");
    PollResult slow, fast;
    table.wait(id, 10s, slow.callback());
    auto t0 = std::chrono::steady_clock::now();
    table.wait(id, 30ms, fast.callback());
    EXPECT_EQ(fast.get().state, State::PENDING);
    EXPECT_LT(std::chrono::steady_clock::now() - t0, 1s);
    EXPECT_EQ(slow.calls.load(), 0);
    table.complete(id, "{}");
    EXPECT_EQ(slow.get().state, State::DONE);
}

TEST(FutureTable, UnknownIdAnswersUnknownAtOnce) {
    FutureTable table({});
    PollResult poll;
    table.wait("req-doesnotexist", 10s, poll.callback());
    EXPECT_EQ(poll.calls.load(), 1);
    EXPECT_EQ(poll.get().state, State::UNKNOWN);
    EXPECT_EQ(table.peek("req-nope").state, State::UNKNOWN);
    table.complete("req-nope", "{}");  // no effect, no crash
    EXPECT_EQ(table.pending_futures(), 0u);
}

TEST(FutureTable, OnFinishOnceAndLookupAfterEviction) {
    std::mutex db_mu;
    std::map<std::string, FutureOutcome> db;
    std::atomic<int> finish_calls{0};
    FutureTableOptions options;
    options.max_finished_in_memory = 2;
    options.on_finish = [&](const std::string & id, const FutureOutcome & outcome) {
        finish_calls++;
        std::lock_guard lock(db_mu);
        db[id] = outcome;
    };
    options.lookup = [&](const std::string & id) -> std::optional<FutureOutcome> {
        std::lock_guard lock(db_mu);
        auto it = db.find(id);
        if (it == db.end()) {
            return std::nullopt;
        }
        return it->second;
    };
    FutureTable table(options);
    std::vector<std::string> ids;
    for (int i = 0; i < 5; i++) {
        ids.push_back(table.create("t", "OptimStep"));
        table.complete(ids.back(), "{\"i\":" + std::to_string(i) + "}");
        table.complete(ids.back(), "again");  // ignored: on_finish stays once per future
    }
    EXPECT_EQ(finish_calls.load(), 5);
    // The first ids are evicted from memory but answered from the "DB".
    PollResult poll;
    table.wait(ids[0], 10s, poll.callback());
    FutureOutcome outcome = poll.get();
    EXPECT_EQ(outcome.state, State::DONE);
    EXPECT_EQ(outcome.json, "{\"i\":0}");
    EXPECT_EQ(table.peek(ids[4]).json, "{\"i\":4}");
    // A completion of an evicted id does not finish it again.
    table.complete(ids[0], "late");
    EXPECT_EQ(finish_calls.load(), 5);
}

TEST(FutureTable, CreateWithIdRegistersPending) {
    FutureTable table({});
    table.create_with_id("req-fixed", "t", "LoadWeights");
    EXPECT_EQ(table.peek("req-fixed").state, State::PENDING);
    table.complete("req-fixed", "{}");
    EXPECT_EQ(table.peek("req-fixed").state, State::DONE);
}

TEST(FutureTable, TenThousandWaitersAnsweredOnCompletion) {
    constexpr int kWaiters = 10000;
    std::atomic<int> done{0};
    std::atomic<int> other{0};
    FutureTable table({});
    std::vector<std::string> ids;
    for (int i = 0; i < 10; i++) {
        ids.push_back(table.create("t", "Sample"));
    }
    for (int i = 0; i < kWaiters; i++) {
        table.wait(ids[i % ids.size()], 30s,
                   [&](FutureOutcome outcome) { (outcome.state == State::DONE ? done : other)++; });
    }
    EXPECT_EQ(table.waiting_polls(), static_cast<size_t>(kWaiters));
    std::vector<std::thread> completers;
    for (const auto & id : ids) {
        completers.emplace_back([&table, id] { table.complete(id, "{}"); });
    }
    for (auto & t : completers) {
        t.join();
    }
    EXPECT_EQ(done.load(), kWaiters);
    EXPECT_EQ(other.load(), 0);
    EXPECT_EQ(table.waiting_polls(), 0u);
}

TEST(FutureTable, TenThousandWaitersAnsweredPendingOnDestruction) {
    constexpr int kWaiters = 10000;
    std::vector<std::atomic<int>> calls(kWaiters);
    std::atomic<int> pending{0};
    {
        FutureTable table({});
        std::string id = table.create("t", "Sample");
        for (int i = 0; i < kWaiters; i++) {
            table.wait(id, 30s, [&, i](FutureOutcome outcome) {
                calls[i]++;
                if (outcome.state == State::PENDING) {
                    pending++;
                }
            });
        }
    }
    EXPECT_EQ(pending.load(), kWaiters);
    for (auto & c : calls) {
        EXPECT_EQ(c.load(), 1);
    }
}

TEST(FutureTable, RacingTimeoutsAndCompletionsCallEachPollOnce) {
    constexpr int kFutures = 200;
    std::vector<std::atomic<int>> calls(kFutures * 5);  // outlives the table
    FutureTable table({});
    std::vector<std::string> ids;
    for (int i = 0; i < kFutures; i++) {
        ids.push_back(table.create("t", "Sample"));
    }
    for (int i = 0; i < kFutures * 5; i++) {
        table.wait(ids[i % kFutures], std::chrono::milliseconds(1 + i % 20),
                   [&calls, i](FutureOutcome) { calls[i]++; });
    }
    std::this_thread::sleep_for(10ms);
    for (const auto & id : ids) {
        table.complete(id, "{}");
    }
    std::this_thread::sleep_for(50ms);
    for (auto & c : calls) {
        EXPECT_EQ(c.load(), 1);
    }
}

}  // namespace
}  // namespace tinkerd::scheduler
