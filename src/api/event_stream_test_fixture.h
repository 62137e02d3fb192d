// The fixture of the push-stream tests (run_events_test.cpp, console_events_test.cpp): an App behind a real
// http::Server (small tick, 3 stream slots), opening a stream on its own connection, reading its events by
// name (parsed SSE blocks; comments as "comment"), a refused stream's whole reply, and a run trained one op.
#pragma once

#include <map>
#include <string>
#include <vector>

#include <gtest/gtest.h>

#include "api/app_test_fixture.h"
#include "http/test_client.h"

namespace tinkerd::api::testing_support {

using namespace std::chrono_literals;
using http::test_util::TestClient;

struct Event {
    std::string name;
    std::string id;
    json data;
};

class EventStreamTest : public AppTest {
  protected:
    void SetUp() override {
        AppTest::SetUp();
        options_.event_tick = 200ms;
        options_.event_heartbeat = 60s;
        options_.max_event_streams = 3;
        restart();
    }
    void TearDown() override {
        server_.reset();  // before the App its handler calls
        AppTest::TearDown();
    }
    void restart() {
        server_.reset();
        start_app();
        server_ = http::test_util::start_server(
            [this](http::Request && req, http::Respond respond) { app_->handle(std::move(req), std::move(respond)); });
    }
    // GET `target` (path and query) on `client`, the stream left open; the response head.
    std::optional<http::test_util::Reply> open_target(TestClient & client, const std::string & target,
                                                      const std::string & headers = "",
                                                      const std::string & key = "tml-alice") {
        EXPECT_TRUE(
            client.send_all(http::test_util::make_request("GET", target, "", "X-API-Key: " + key + "\r\n" + headers)));
        return client.read_head();
    }
    // A refused stream's whole reply (a JSON body with a Content-Length); no key header when `key` is "".
    std::optional<http::test_util::Reply> refused_target(const std::string & target, const std::string & headers = "",
                                                         const std::string & key = "tml-alice") {
        TestClient client(server_->port());
        const std::string auth = key.empty() ? "" : "X-API-Key: " + key + "\r\n";
        EXPECT_TRUE(client.send_all(http::test_util::make_request("GET", target, "", auth + headers)));
        return client.read_reply();
    }
    // Reads chunks until an event named `name` arrives (10 s at most); nullopt if the stream ends first.
    std::optional<Event> next(TestClient & client, const std::string & name) {
        const auto deadline = std::chrono::steady_clock::now() + 10s;
        while (std::chrono::steady_clock::now() < deadline) {
            while (!pending_.empty()) {
                Event e = pending_.front();
                pending_.erase(pending_.begin());
                if (e.name == name) {
                    return e;
                }
            }
            auto chunk = client.read_chunk();
            if (!chunk || chunk->empty()) {
                return std::nullopt;
            }
            parse(*chunk);
        }
        return std::nullopt;
    }
    void parse(const std::string & text) {
        size_t start = 0;
        for (size_t end; (end = text.find("\n\n", start)) != std::string::npos; start = end + 2) {
            Event e;
            std::string block = text.substr(start, end - start);
            for (size_t at = 0; at <= block.size();) {
                size_t line_end = std::min(block.find('\n', at), block.size());
                const std::string line = block.substr(at, line_end - at);
                if (line.rfind("event: ", 0) == 0)
                    e.name = line.substr(7);
                if (line.rfind("id: ", 0) == 0)
                    e.id = line.substr(4);
                if (line.rfind("data: ", 0) == 0)
                    e.data = json::parse(line.substr(6));
                if (line.rfind(": ", 0) == 0)
                    e.name = "comment";
                at = line_end + 1;
            }
            pending_.push_back(e);
        }
    }
    std::string trained_run() {
        const std::string model = new_run();
        result(ok("forward_backward", fb(model, 1))["request_id"]);
        return model;
    }
    // A run of `key`'s tenant (new_run's, for another key).
    std::string run_of(const std::string & key) {
        const std::string session = ok("create_session", {{"tags", json::array()}}, key)["session_id"];
        json created =
            ok("create_model",
               {{"session_id", session}, {"model_seq_id", 0}, {"base_model", "fake"}, {"lora_config", {{"rank", 8}}}},
               key);
        ok("retrieve_future", {{"request_id", created["request_id"]}}, key);
        return created["model_id"];
    }

    std::unique_ptr<http::Server> server_;
    std::vector<Event> pending_;
};

}  // namespace tinkerd::api::testing_support
