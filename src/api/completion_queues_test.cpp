// Unit tests of CompletionQueues (retrieve_futures): events after the cursor, a held poll answered by the next
// event or by its timeout, seen and acknowledged events trimmed, queues kept apart, stop answering held polls.
#include "api/completion_queues.h"

#include <future>

#include <gtest/gtest.h>

namespace tinkerd::api {
namespace {

using json = nlohmann::json;
using namespace std::chrono_literals;

json poll_now(CompletionQueues & q, const std::string & key, int64_t prev, std::vector<std::string> acked = {}) {
    std::promise<json> got;
    q.poll(key, prev, acked, 0ms, [&](json page) { got.set_value(std::move(page)); });
    return got.get_future().get();
}

TEST(CompletionQueues, EventsAfterTheCursorInOrder) {
    CompletionQueues q;
    q.append("s#0", "r1", false, 120);
    q.append("s#0", "r2", true, 0);
    q.append("s#1", "other", false, 5);
    const json page = poll_now(q, "s#0", 0);
    ASSERT_EQ(page["completions"].size(), 2u);
    EXPECT_EQ(page["completions"][0],
              json({{"state", "finished"}, {"request_id", "r1"}, {"response_payload_uncompressed_size", 120}}));
    EXPECT_EQ(page["completions"][1], json({{"state", "failed"}, {"request_id", "r2"}}));
    const int64_t cursor = page["cursor"];
    EXPECT_GT(cursor, int64_t{1'700'000'000'000'000}) << "cursors start at the Unix time in microseconds";
    const json next = poll_now(q, "s#0", cursor);
    EXPECT_TRUE(next["completions"].empty());
    EXPECT_EQ(next["cursor"], cursor);
    CompletionQueues restarted;  // a later process: its cursors are above the last one's
    restarted.append("s#0", "r3", false, 1);
    EXPECT_EQ(poll_now(restarted, "s#0", cursor)["completions"].size(), 1u);
}

TEST(CompletionQueues, AHeldPollIsAnsweredByTheNextEventOrItsTimeout) {
    CompletionQueues q;
    std::promise<json> got;
    q.poll("s#0", 0, {}, 10s, [&](json page) { got.set_value(std::move(page)); });
    auto answer = got.get_future();
    EXPECT_EQ(answer.wait_for(50ms), std::future_status::timeout);
    q.append("s#0", "r1", false, 7);
    ASSERT_EQ(answer.wait_for(2s), std::future_status::ready);
    EXPECT_EQ(answer.get()["completions"][0]["request_id"], "r1");
    const int64_t cursor = poll_now(q, "s#0", 0)["cursor"];
    std::promise<json> timed;
    const auto t0 = std::chrono::steady_clock::now();
    q.poll("s#0", cursor, {}, 100ms, [&](json page) { timed.set_value(std::move(page)); });
    const json empty = timed.get_future().get();
    EXPECT_GE(std::chrono::steady_clock::now() - t0, 90ms);
    EXPECT_TRUE(empty["completions"].empty());
    EXPECT_EQ(empty["cursor"], cursor);
}

TEST(CompletionQueues, AcknowledgedEventsAreDroppedAndStopAnswersHeldPolls) {
    CompletionQueues q;
    q.append("s#0", "r1", false, 1);
    q.append("s#0", "r2", false, 1);
    const json page = poll_now(q, "s#0", 0, {"r1"});
    ASSERT_EQ(page["completions"].size(), 1u);
    EXPECT_EQ(page["completions"][0]["request_id"], "r2");
    std::promise<json> held;
    q.poll("s#9", 0, {}, 60s, [&](json p) { held.set_value(std::move(p)); });
    q.stop();
    auto answer = held.get_future();
    ASSERT_EQ(answer.wait_for(1s), std::future_status::ready);
    EXPECT_TRUE(answer.get()["completions"].empty());
}

}  // namespace
}  // namespace tinkerd::api
