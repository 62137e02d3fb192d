// In-process tests of GET /api/v1/events (console_events.cpp) and of EventStreams' topic sets and
// coalescing (event_streams.cpp): the runs topic lists the caller's runs only, summarised, and follows
// training and new runs; the status topic follows sessions; the metrics topic sends only new points of each
// named run; bad or misplaced parameters are 400s naming them, another tenant's run a 404; console streams
// count against --max-event-streams with run streams; an ANY_TOPIC stream is woken by every topic, coalesced.
#include <atomic>
#include <string>
#include <thread>

#include "api/event_stream_test_fixture.h"

namespace tinkerd::api {
namespace {

using namespace std::chrono_literals;
using testing_support::Event;
using testing_support::TestClient;

class ConsoleEventsTest : public testing_support::EventStreamTest {
  protected:
    std::optional<http::test_util::Reply> open(TestClient & client, const std::string & query) {
        return open_target(client, "/api/v1/events" + query);
    }
    // The next event `name` whose data satisfies `done` (10 s at most per event read).
    template <typename Pred>
    std::optional<Event> next_where(TestClient & client, const std::string & name, Pred done) {
        std::optional<Event> e;
        while ((e = next(client, name)) && !done(e->data)) {
        }
        return e;
    }
    void expect_400(const std::string & query, const std::string & words) {
        auto reply = refused_target("/api/v1/events" + query);
        ASSERT_TRUE(reply) << query;
        EXPECT_EQ(reply->status, 400) << query << ": " << reply->body;
        EXPECT_NE(reply->body.find(words), std::string::npos) << query << ": " << reply->body;
    }
};

json run_in(const json & data, const std::string & run_id) {
    for (const auto & row : data["training_runs"]) {
        if (row["training_run_id"] == run_id) {
            return row;
        }
    }
    return nullptr;
}

TEST_F(ConsoleEventsTest, TheRunsTopicSummarisesTheCallersRunsAndFollowsTraining) {
    const std::string model = trained_run();
    const std::string bobs = run_of("tml-bob");
    TestClient client(server_->port());
    auto head = open(client, "?topics=runs");
    ASSERT_TRUE(head);
    ASSERT_EQ(head->status, 200);
    EXPECT_EQ(head->headers["content-type"], "text/event-stream");
    auto first = next(client, "runs");
    ASSERT_TRUE(first);
    EXPECT_EQ(first->data["total_count"], 1);
    const json row = run_in(first->data, model);
    ASSERT_TRUE(row.is_object()) << first->data.dump();
    EXPECT_TRUE(run_in(first->data, bobs).is_null());  // bob's run is not alice's to see
    EXPECT_EQ(row["base_model"], "fake");
    EXPECT_EQ(row["lora_rank"], 8);
    EXPECT_EQ(row["loaded"], true);
    EXPECT_EQ(row["steps"], 0);
    EXPECT_TRUE(row["last_loss"].is_null()) << row.dump();  // the fake engine records no loss:sum (e2e_console does)
    EXPECT_TRUE(row["first_time"].is_number());
    EXPECT_TRUE(row["last_time"].is_number());

    result(ok("optim_step", adam(model, 2, 1e-3))["request_id"]);
    result(ok("forward_backward", fb(model, 3))["request_id"]);
    auto stepped = next_where(client, "runs", [&](const json & d) { return run_in(d, model)["steps"] == 1; });
    ASSERT_TRUE(stepped) << "the step never arrived";
    EXPECT_GE(run_in(stepped->data, model)["last_time"].get<double>(), row["last_time"].get<double>());

    const std::string second = new_run();  // a new run shows up (by the tick: creating one wakes nothing)
    auto listed = next_where(client, "runs", [&](const json & d) { return run_in(d, second).is_object(); });
    ASSERT_TRUE(listed);
    EXPECT_EQ(listed->data["total_count"], 2);
    EXPECT_TRUE(run_in(listed->data, second)["last_time"].is_null());  // nothing recorded yet
}

TEST_F(ConsoleEventsTest, TheRunsTopicHonoursItsLimitAndSendsOnlyChanges) {
    trained_run();
    const std::string newest = new_run();
    TestClient client(server_->port());
    ASSERT_TRUE(open(client, "?topics=runs&limit=1"));
    auto first = next(client, "runs");
    ASSERT_TRUE(first);
    ASSERT_EQ(first->data["training_runs"].size(), 1u);
    EXPECT_EQ(first->data["training_runs"][0]["training_run_id"], newest);
    EXPECT_EQ(first->data["total_count"], 2);
    std::this_thread::sleep_for(700ms);  // three ticks without a change: nothing more than heartbeats
    result(ok("forward_backward", fb(newest, 1))["request_id"]);
    auto changed = next(client, "runs");
    ASSERT_TRUE(changed);
    EXPECT_TRUE(changed->data["training_runs"][0]["last_time"].is_number()) << changed->data.dump();
}

TEST_F(ConsoleEventsTest, TheStatusTopicFollowsSessions) {
    TestClient client(server_->port());
    ASSERT_TRUE(open(client, "?topics=status"));
    auto first = next(client, "status");
    ASSERT_TRUE(first);
    EXPECT_TRUE(first->data["status"]["models"].is_array());
    EXPECT_EQ(first->data["status"]["models"][0]["base_model"], "fake");
    EXPECT_TRUE(first->data["status"]["sessions"].empty());
    const std::string session = ok("create_session", {{"tags", json::array()}})["session_id"];
    auto with_session = next_where(client, "status", [](const json & d) { return !d["session_ids"].empty(); });
    ASSERT_TRUE(with_session);
    ASSERT_EQ(with_session->data["status"]["sessions"].size(), 1u);
    EXPECT_EQ(with_session->data["status"]["sessions"][0]["session_id"], session);
    EXPECT_EQ(with_session->data["session_ids"], json::array({session}));
}

TEST_F(ConsoleEventsTest, TheMetricsTopicSendsEachNamedRunsNewPointsOnly) {
    const std::string a = trained_run();
    const std::string b = trained_run();
    TestClient client(server_->port());
    ASSERT_TRUE(open(client, "?topics=metrics&run_ids=" + a + "," + b + "," + a));
    std::map<std::string, json> first;
    for (int i = 0; i < 2; ++i) {
        auto e = next(client, "metrics");
        ASSERT_TRUE(e);
        EXPECT_TRUE(e->id.empty());  // no Last-Event-ID resume on a several-run stream
        first[e->data["training_run_id"]] = e->data;
    }
    ASSERT_EQ(first.size(), 2u);
    EXPECT_EQ(first[a]["points"].size(), 1u);
    EXPECT_EQ(first[b]["points"].size(), 1u);
    result(ok("optim_step", adam(b, 2, 1e-3))["request_id"]);
    auto more = next(client, "metrics");
    ASSERT_TRUE(more);
    EXPECT_EQ(more->data["training_run_id"], b);
    ASSERT_EQ(more->data["points"].size(), 1u);
    EXPECT_EQ(more->data["points"][0]["op"], "optim_step");
    EXPECT_TRUE(more->data["since_step"].is_null());

    TestClient resumed(server_->port());
    pending_.clear();
    ASSERT_TRUE(open(resumed, "?topics=metrics&run_ids=" + b + "&since_step=1"));
    auto from_step = next(resumed, "metrics");
    ASSERT_TRUE(from_step);
    EXPECT_EQ(from_step->data["since_step"], 1);
    ASSERT_EQ(from_step->data["points"].size(), 1u);  // step 1's optim_step, not step 0's forward_backward
}

TEST_F(ConsoleEventsTest, BadParametersAre400sNamingThemAndOthersRunsAre404) {
    const std::string model = trained_run();
    expect_400("", "topics: required");
    expect_400("?topics=", "topics: required");
    expect_400("?topics=runs,bogus", "topics: unknown topic 'bogus'");
    expect_400("?topics=metrics", "run_ids: required");
    expect_400("?topics=metrics&run_ids=" + model + ",,x", "run_ids: an empty run id");
    std::string nine;
    for (int i = 0; i < 9; ++i) {
        nine += (i ? "," : "") + std::string("r") + std::to_string(i);
    }
    expect_400("?topics=metrics&run_ids=" + nine, "run_ids: at most 8 runs, got 9");
    expect_400("?topics=runs&run_ids=" + model, "run_ids: only with topics=metrics");
    expect_400("?topics=status&limit=5", "limit: only with topics=runs");
    expect_400("?topics=runs&limit=0", "limit: expected an integer from 1 to 200");
    expect_400("?topics=runs&limit=201", "limit: expected an integer from 1 to 200");
    expect_400("?topics=metrics&run_ids=" + model + "&since_step=-1", "since_step");
    auto bobs = refused_target("/api/v1/events?topics=metrics&run_ids=" + model, "", "tml-bob");
    ASSERT_TRUE(bobs);
    EXPECT_EQ(bobs->status, 404);
    EXPECT_EQ(json::parse(bobs->body)["code"], "not_found");
    auto no_key = refused_target("/api/v1/events?topics=runs", "", "");
    ASSERT_TRUE(no_key);
    EXPECT_EQ(no_key->status, 401);
    EXPECT_EQ(app_->open_event_streams(), 0u);
}

TEST_F(ConsoleEventsTest, ConsoleAndRunStreamsShareTheStreamLimit) {
    const std::string model = trained_run();
    std::vector<std::unique_ptr<TestClient>> held;
    for (const std::string target :
         {"/api/v1/training_runs/" + model + "/events", std::string("/api/v1/events?topics=runs"),
          std::string("/api/v1/events?topics=status")}) {
        held.push_back(std::make_unique<TestClient>(server_->port()));
        auto head = open_target(*held.back(), target);
        ASSERT_TRUE(head);
        ASSERT_EQ(head->status, 200) << target;
    }
    auto busy = refused_target("/api/v1/events?topics=runs,status");
    ASSERT_TRUE(busy);
    EXPECT_EQ(busy->status, 429);
    EXPECT_EQ(busy->headers["retry-after"], "30");
    EXPECT_NE(busy->body.find("/api/v1/server_status"), std::string::npos) << busy->body;
    auto run_busy = refused_target("/api/v1/training_runs/" + model + "/events");
    ASSERT_TRUE(run_busy);
    EXPECT_EQ(run_busy->status, 429);
}

// A fake stream writer: counts what is written.
struct CountingWriter : http::StreamWriter {
    std::atomic<int> writes{0};
    bool write(std::string) override { return ++writes, true; }
    void finish() override {}
    bool closed() const override { return false; }
    void on_close(std::function<void()>) override {}
};

TEST(EventStreamsTopics, AnAnyTopicStreamIsWokenByEveryTopicAtMostOncePerGap) {
    EventStreams streams(EventStreamOptions{4, 60s, 60s, 300ms});  // no tick, no heartbeat within the test
    std::atomic<int> any_refreshes{0};
    std::atomic<int> a_refreshes{0};
    auto any = streams.reserve({EventStreams::ANY_TOPIC}, [&] { return ++any_refreshes, std::string("x"); });
    auto on_a = streams.reserve({"a", "c"}, [&] { return ++a_refreshes, std::string("y"); });
    ASSERT_TRUE(any && on_a);
    streams.attach(any, std::make_shared<CountingWriter>());
    streams.attach(on_a, std::make_shared<CountingWriter>());
    const auto settle = [](const std::atomic<int> & n, int at_least) {
        for (int i = 0; i < 200 && n.load() < at_least; ++i) {
            std::this_thread::sleep_for(10ms);
        }
        return n.load();
    };
    EXPECT_EQ(settle(any_refreshes, 1), 1);  // the first refresh, at attach
    EXPECT_EQ(settle(a_refreshes, 1), 1);
    for (int i = 0; i < 10; ++i) {
        streams.wake({"b"});  // no stream names b: only the ANY one, coalesced
        std::this_thread::sleep_for(20ms);
    }
    std::this_thread::sleep_for(500ms);
    EXPECT_GE(any_refreshes.load(), 2);
    EXPECT_LE(any_refreshes.load(), 3) << "an ANY stream refreshed on every wake-up";
    EXPECT_EQ(a_refreshes.load(), 1);
    streams.wake({"c"});  // the second of its topics
    EXPECT_EQ(settle(a_refreshes, 2), 2);
    streams.stop();
}

}  // namespace
}  // namespace tinkerd::api
