// In-process tests of GET /api/v1/training_runs/{run_id}/events (run_events.cpp, event_streams.cpp) through a
// real http::Server and the blocking test client: a recorded point and a saved (then deleted) checkpoint
// arrive as events, a reconnect with Last-Event-ID (or since_step) sends no point twice, another tenant's
// run is a 404, the stream limit answers 429 and frees a slot when a client goes, heartbeats flow, and
// stopping the server or the App with streams open (console streams too) neither hangs nor leaves a stream
// unended.
#include <string>
#include <vector>

#include "api/event_stream_test_fixture.h"

namespace tinkerd::api {
namespace {

using namespace std::chrono_literals;
using testing_support::Event;
using testing_support::TestClient;

class RunEventsTest : public testing_support::EventStreamTest {
  protected:
    // Opens the run's stream on `client`; the response head.
    std::optional<http::test_util::Reply> open(TestClient & client, const std::string & run,
                                               const std::string & headers = "", const std::string & query = "",
                                               const std::string & key = "tml-alice") {
        return open_target(client, "/api/v1/training_runs/" + run + "/events" + query, headers, key);
    }
    std::optional<http::test_util::Reply> refused(const std::string & run, const std::string & headers,
                                                  const std::string & key = "tml-alice") {
        return refused_target("/api/v1/training_runs/" + run + "/events", headers, key);
    }
};

TEST_F(RunEventsTest, NewPointsAndCheckpointsArriveAsTheyAreRecorded) {
    const std::string model = trained_run();
    TestClient client(server_->port());
    auto head = open(client, model);
    ASSERT_TRUE(head);
    EXPECT_EQ(head->status, 200);
    EXPECT_EQ(head->headers["content-type"], "text/event-stream");
    auto first = next(client, "metrics");
    ASSERT_TRUE(first);
    ASSERT_EQ(first->data["points"].size(), 1u);
    EXPECT_EQ(first->data["points"][0]["op"], "forward_backward");
    auto run = next(client, "run");
    ASSERT_TRUE(run);
    EXPECT_EQ(run->data["training_run_id"], model);
    EXPECT_EQ(run->data["loaded"], true);

    result(ok("optim_step", adam(model, 2, 1e-3))["request_id"]);
    auto second = next(client, "metrics");
    ASSERT_TRUE(second);
    ASSERT_EQ(second->data["points"].size(), 1u);  // only what is new
    EXPECT_EQ(second->data["points"][0]["op"], "optim_step");
    EXPECT_GT(std::stoll(second->id), std::stoll(first->id));

    result(ok("save_weights", {{"model_id", model}, {"seq_id", 3}, {"path", "pushed"}})["request_id"]);
    std::optional<Event> listed;
    while ((listed = next(client, "checkpoints")) && listed->data["checkpoints"].empty()) {
    }
    ASSERT_TRUE(listed);
    EXPECT_EQ(listed->data["checkpoints"][0]["checkpoint_id"], "weights/pushed");

    auto deleted = call("/api/v1/training_runs/" + model + "/checkpoints/weights/pushed", "", "tml-alice", "DELETE");
    ASSERT_EQ(deleted.status, 200) << deleted.body;
    auto emptied = next(client, "checkpoints");
    ASSERT_TRUE(emptied);
    EXPECT_TRUE(emptied->data["checkpoints"].empty());
}

TEST_F(RunEventsTest, AReconnectResumesWithoutDuplicates) {
    const std::string model = trained_run();
    std::string last_id;
    {
        TestClient client(server_->port());
        ASSERT_TRUE(open(client, model));
        auto metrics = next(client, "metrics");
        ASSERT_TRUE(metrics);
        last_id = metrics->id;
    }
    result(ok("optim_step", adam(model, 2, 1e-3))["request_id"]);
    result(ok("forward_backward", fb(model, 3))["request_id"]);
    TestClient again(server_->port());
    pending_.clear();
    ASSERT_TRUE(open(again, model, "Last-Event-ID: " + last_id + "\r\n"));
    auto resumed = next(again, "metrics");
    ASSERT_TRUE(resumed);
    EXPECT_TRUE(resumed->data["since_step"].is_null());
    // The points are recorded asynchronously (the telemetry writer), so the last one may come in a later event.
    std::vector<nlohmann::json> points(resumed->data["points"].begin(), resumed->data["points"].end());
    while (points.size() < 2) {
        auto later = next(again, "metrics");
        ASSERT_TRUE(later) << points.size() << " point(s) arrived";
        points.insert(points.end(), later->data["points"].begin(), later->data["points"].end());
    }
    ASSERT_EQ(points.size(), 2u);  // the two after the id, not the first one again
    EXPECT_EQ(points[0]["op"], "optim_step");
    EXPECT_EQ(points[1]["op"], "forward_backward");

    TestClient by_step(server_->port());
    pending_.clear();
    ASSERT_TRUE(open(by_step, model, "", "?since_step=1"));
    auto from_step = next(by_step, "metrics");
    ASSERT_TRUE(from_step);
    EXPECT_EQ(from_step->data["since_step"], 1);
    EXPECT_EQ(from_step->data["points"].size(), 2u);  // step 1's optim_step and forward_backward
}

TEST_F(RunEventsTest, AnotherTenantsRunIsNotFoundAndBadResumePointsAre400) {
    const std::string model = trained_run();
    auto bob = refused(model, "", "tml-bob");
    ASSERT_TRUE(bob);
    EXPECT_EQ(bob->status, 404);
    EXPECT_EQ(json::parse(bob->body)["code"], "not_found");
    auto bad_id = refused(model, "Last-Event-ID: abc\r\n");
    ASSERT_TRUE(bad_id);
    EXPECT_EQ(bad_id->status, 400);
    EXPECT_NE(bad_id->body.find("Last-Event-ID"), std::string::npos) << bad_id->body;
    auto no_key = refused(model, "", "");
    ASSERT_TRUE(no_key);
    EXPECT_EQ(no_key->status, 401);
    EXPECT_EQ(app_->open_event_streams(), 0u);
}

TEST_F(RunEventsTest, TheStreamLimitAnswers429AndAClosedStreamFreesItsSlot) {
    const std::string model = trained_run();
    std::vector<std::unique_ptr<TestClient>> open_clients;
    for (int i = 0; i < 3; ++i) {
        open_clients.push_back(std::make_unique<TestClient>(server_->port()));
        auto head = open(*open_clients.back(), model);
        ASSERT_TRUE(head);
        ASSERT_EQ(head->status, 200);
    }
    auto busy = refused(model, "");
    ASSERT_TRUE(busy);
    EXPECT_EQ(busy->status, 429);
    EXPECT_EQ(busy->headers["retry-after"], "30");
    EXPECT_EQ(json::parse(busy->body)["code"], "unavailable");
    EXPECT_NE(busy->body.find("--max-event-streams"), std::string::npos) << busy->body;

    open_clients.pop_back();  // the client goes away: its slot is free again
    const auto deadline = std::chrono::steady_clock::now() + 5s;
    while (app_->open_event_streams() > 2 && std::chrono::steady_clock::now() < deadline) {
        std::this_thread::sleep_for(20ms);
    }
    EXPECT_EQ(app_->open_event_streams(), 2u);
    TestClient admitted(server_->port());
    auto head = open(admitted, model);
    ASSERT_TRUE(head);
    EXPECT_EQ(head->status, 200);
}

TEST_F(RunEventsTest, NoStreamsWhenPushIsOff) {
    options_.max_event_streams = 0;
    restart();
    auto busy = refused(trained_run(), "");
    ASSERT_TRUE(busy);
    EXPECT_EQ(busy->status, 429);
    EXPECT_NE(busy->body.find("push streams are off"), std::string::npos) << busy->body;
}

TEST_F(RunEventsTest, QuietStreamsGetHeartbeats) {
    options_.event_heartbeat = 300ms;
    restart();
    const std::string model = trained_run();
    TestClient client(server_->port());
    ASSERT_TRUE(open(client, model));
    ASSERT_TRUE(next(client, "run"));
    auto heartbeat = next(client, "comment");
    ASSERT_TRUE(heartbeat);
}

// App::stop ends every stream with its last chunk (a clean end, the client may reconnect), a console stream
// (GET /api/v1/events) as a run's; then the server stops at once although the connections were open.
TEST_F(RunEventsTest, StoppingWithOpenStreamsEndsThemAndDoesNotHang) {
    const std::string model = trained_run();
    TestClient client(server_->port());
    ASSERT_TRUE(open(client, model));
    ASSERT_TRUE(next(client, "run"));
    TestClient console(server_->port());
    ASSERT_TRUE(open_target(console, "/api/v1/events?topics=runs,status"));
    ASSERT_TRUE(next(console, "status"));
    TestClient other(server_->port());
    ASSERT_TRUE(open(other, model));
    EXPECT_EQ(app_->open_event_streams(), 3u);
    const auto started = std::chrono::steady_clock::now();
    app_->stop();
    for (TestClient * stream : {&client, &console}) {
        std::optional<std::string> chunk;
        while ((chunk = stream->read_chunk()) && !chunk->empty()) {
        }
        ASSERT_TRUE(chunk) << "a stream was cut rather than ended";
    }
    server_->stop();
    EXPECT_LT(http::test_util::seconds_since(started), 3.0);
    EXPECT_TRUE(other.peer_closed(2000));
}

// The server stopping first (main's order) closes the open streams' connections without waiting for them.
TEST_F(RunEventsTest, TheServerStopsWithAnOpenStream) {
    const std::string model = trained_run();
    TestClient client(server_->port());
    ASSERT_TRUE(open(client, model));
    ASSERT_TRUE(next(client, "run"));
    TestClient console(server_->port());
    ASSERT_TRUE(open_target(console, "/api/v1/events?topics=metrics&run_ids=" + model));
    ASSERT_TRUE(next(console, "metrics"));
    const auto started = std::chrono::steady_clock::now();
    server_->stop();
    app_->stop();
    EXPECT_LT(http::test_util::seconds_since(started), 3.0);
    EXPECT_TRUE(client.peer_closed(2000));
    EXPECT_TRUE(console.peer_closed(2000));
    EXPECT_EQ(app_->open_event_streams(), 0u);
}

}  // namespace
}  // namespace tinkerd::api
