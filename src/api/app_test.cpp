// In-process tests of App with a FakeEngine (no torch, no sockets; built under ASan too): requests go
// through App::handle as the HTTP layer would send them. A training flow, and hostile inputs refused
// with 400s that leave the run usable: deep JSON, bad AdamW parameters, far and negative seq_ids, token
// ids outside the vocabulary, another tenant's run, and a seq_id hole given up after its timeout. Sampling
// through the SamplingService and the worker's loop: an asample answered with the fake engine's tokens,
// and an OpenAI stream whose client goes away frees its engine request. The console's page and files are
// routed without a key.
#include "api/app.h"

#include <chrono>
#include <cstdlib>
#include <filesystem>
#include <functional>
#include <future>
#include <mutex>
#include <string>
#include <thread>
#include <unistd.h>

#include <gtest/gtest.h>

#include "api/app_test_fixture.h"
#include "scheduler/fake_engine.h"

namespace tinkerd::api {
namespace {

namespace fs = std::filesystem;
using namespace std::chrono_literals;
using testing_support::AppTest;

// A client's end of a streamed response: collects chunks; hang_up() closes it as a vanished client would.
class FakeStream : public http::StreamWriter {
  public:
    bool write(std::string data) override {
        std::lock_guard lock(mutex_);
        body_ += data;
        return !closed_;
    }
    void finish() override {}
    bool closed() const override {
        std::lock_guard lock(mutex_);
        return closed_;
    }
    void on_close(std::function<void()> callback) override {
        std::lock_guard lock(mutex_);
        on_close_ = std::move(callback);
    }
    void hang_up() {
        std::function<void()> callback;
        {
            std::lock_guard lock(mutex_);
            closed_ = true;
            callback.swap(on_close_);
        }
        if (callback) {
            callback();
        }
    }
    size_t chunks() const {
        std::lock_guard lock(mutex_);
        size_t n = 0;
        for (size_t at = body_.find("data: "); at != std::string::npos; at = body_.find("data: ", at + 1)) {
            ++n;
        }
        return n;
    }

  private:
    mutable std::mutex mutex_;
    std::string body_;
    bool closed_ = false;
    std::function<void()> on_close_;
};

TEST_F(AppTest, TrainingFlowRunsInOrderThroughTheEngine) {
    const std::string model = new_run();
    const json f = ok("forward_backward", fb(model, 1));
    const json o = ok("optim_step", adam(model, 2, 1e-3));
    EXPECT_TRUE(result(f["request_id"]).contains("metrics"));
    EXPECT_TRUE(result(o["request_id"]).contains("metrics"));
    ASSERT_EQ(engine_.calls().size(), 1u);
    EXPECT_EQ(engine_.calls()[0].tokens, 3);
}

TEST_F(AppTest, HostileInputsAre400sAndTheRunKeepsWorking) {
    const std::string model = new_run();
    expect_400("create_session", std::string(100000, '[') + std::string(100000, ']'), "nested deeper than 64");
    expect_400("optim_step", adam(model, 1, 1e-3, 0.0).dump(), "eps");
    expect_400("optim_step", adam(model, 2, 1e308).dump(), "learning_rate");
    expect_400("forward_backward", fb(model, int64_t{1} << 40).dump(), "ahead of the run's next");
    expect_400("forward_backward", fb(model, -1).dump(), "seq_id: must be >= 0");
    expect_400("forward_backward", fb(model, 3, {1, 512}).dump(), "outside the vocabulary");
    expect_400("create_model", R"({"session_id": "s", "model_seq_id": -1, "base_model": "fake"})", "model_seq_id");
    // Refused ops released their seq_ids (1-3): seq 4 runs at once.
    const json f = ok("forward_backward", fb(model, 4));
    EXPECT_TRUE(result(f["request_id"]).contains("metrics"));
    // Bob cannot see alice's run: the same 404 as a run that does not exist.
    auto theirs = call("forward_backward", fb(model, 5).dump(), "tml-bob");
    auto missing = call("forward_backward", fb("sess-nope:train:0", 5).dump(), "tml-bob");
    EXPECT_EQ(theirs.status, 404);
    EXPECT_EQ(missing.status, 404);
}

TEST_F(AppTest, AHoleInTheOrderIsGivenUpAndTheLateOpRefused) {
    const std::string model = new_run();
    const auto started = std::chrono::steady_clock::now();    // before the op: its gap clock starts when it arrives
    const json later = ok("forward_backward", fb(model, 2));  // seq 1 never comes
    EXPECT_TRUE(result(later["request_id"]).contains("metrics"));
    EXPECT_GE(std::chrono::steady_clock::now() - started, 200ms);
    expect_400("forward_backward", fb(model, 1).dump(), "given up");
}

// A training op refused unread (413) whose first bytes name its run and seq_id: that seq_id is released at
// once (not after --seq-gap-timeout-seconds), the 413's note says so, the op behind it runs, and the
// released seq_id arriving later is a 400. Another tenant's refused body releases nothing.
TEST_F(AppTest, ATrainingOpRefusedUnreadReleasesTheSeqIdItsFirstBytesName) {
    options_.seq_gap_timeout = 60s;  // only a release can unblock the run within this test
    start_app();
    const std::string model = new_run();
    auto refused = [&](const std::string & key, const std::string & type, const std::string & prefix) {
        http::Request req;
        req.method = "POST";
        req.path = "/api/v1/forward_backward";
        req.headers["x-api-key"] = key;
        req.headers["content-type"] = type;
        req.body = prefix;
        return app_->refused_body(req);
    };
    const std::string json_prefix =
        R"({"model_id":")" + model + R"(","seq_id":1,"forward_backward_input":{"data":[{"model_input":{"chu)";
    EXPECT_EQ(refused("tml-bob", "application/json", json_prefix), "");  // not bob's run
    EXPECT_EQ(refused("tml-alice", "application/json", R"({"forward_backward_input":{"data":[{"mo)"), "");
    const json later = ok("forward_backward", fb(model, 2));
    EXPECT_EQ(refused("tml-alice", "application/json", json_prefix),
              "; seq_id 1 of model " + model + " is released: the model's later operations run without it");
    EXPECT_TRUE(result(later["request_id"]).contains("metrics"));          // within one 2 s poll
    EXPECT_EQ(refused("tml-alice", "application/json", json_prefix), "");  // consumed: nothing more to release
    expect_400("forward_backward", fb(model, 1).dump(), "released");
    // The SDK's protobuf body: model_id (field 1) and seq_id (field 2) lead; seq 3 waits behind seq 4's op.
    const json after = ok("optim_step", adam(model, 4, 1e-3));
    const std::string proto =
        std::string("\x0a") + static_cast<char>(model.size()) + model + std::string("\x10\x03\x1a\xff", 4);
    EXPECT_NE(refused("tml-alice", "application/x-protobuf", proto).find("seq_id 3 of model"), std::string::npos);
    EXPECT_TRUE(result(after["request_id"]).contains("metrics"));
}

TEST_F(AppTest, AnAsampleIsAnsweredWithTheEnginesTokens) {
    const std::string session = ok("create_session", {{"tags", json::array()}})["session_id"];
    const json sampler = ok("create_sampling_session",
                            {{"session_id", session}, {"sampling_session_seq_id", 0}, {"base_model", "fake"}});
    const json prompt = {{"chunks", {{{"type", "encoded_text"}, {"tokens", {5}}}}}};
    const json sample = ok("asample", {{"sampling_session_id", sampler["sampling_session_id"]},
                                       {"prompt", prompt},
                                       {"num_samples", 2},
                                       {"sampling_params", {{"max_tokens", 3}}}});
    const json answer = result(sample["request_id"]);
    ASSERT_EQ(answer["sequences"].size(), 2u) << answer.dump();
    EXPECT_EQ(answer["sequences"][0]["tokens"], json({6, 7, 8}));
    EXPECT_EQ(answer["sequences"][1]["tokens"], json({7, 8, 9}));
    EXPECT_EQ(answer["sequences"][0]["stop_reason"], "length");
    // Another tenant's sampler is a 404, like a missing one.
    auto theirs = call(
        "asample", json{{"sampling_session_id", sampler["sampling_session_id"]}, {"prompt", prompt}}.dump(), "tml-bob");
    EXPECT_EQ(theirs.status, 404);
}

TEST_F(AppTest, AnOpenAiStreamWhoseClientGoesAwayFreesItsRequest) {
    engine_.set_sample_step_delay(2ms);  // 4000 instant steps could finish before the hang-up (seen under load)
    http::Request req;
    req.method = "POST";
    req.path = "/v1/completions";
    req.headers["authorization"] = "Bearer tml-alice";
    req.body = json{{"model", "fake"}, {"prompt", {5}}, {"max_tokens", 4000}, {"stream", true}}.dump();
    std::promise<http::Response> promise;
    app_->handle(std::move(req), [&promise](http::Response r) { promise.set_value(std::move(r)); });
    http::Response response = promise.get_future().get();
    ASSERT_EQ(response.status, 200) << response.body;
    ASSERT_TRUE(response.stream);
    auto stream = std::make_shared<FakeStream>();
    response.stream(stream);
    const auto deadline = std::chrono::steady_clock::now() + 10s;
    while (stream->chunks() < 3 && std::chrono::steady_clock::now() < deadline) {
        std::this_thread::sleep_for(1ms);
    }
    ASSERT_GE(stream->chunks(), 3u) << "no tokens streamed";
    stream->hang_up();
    while ((engine_.sampling_requests() > 0 || engine_.cancelled().empty()) &&
           std::chrono::steady_clock::now() < deadline) {
        std::this_thread::sleep_for(1ms);
    }
    EXPECT_EQ(engine_.sampling_requests(), 0u) << "the engine still samples for a client that went away";
    EXPECT_EQ(engine_.cancelled().size(), 1u);
}

// The console (src/console/) is wired into the router: the page and its files need no key, an unknown
// file is a 404 JSON body, while the API next to it still asks for one.
TEST_F(AppTest, ConsoleServedWithoutKey) {
    const auto get = [&](const std::string & path) {
        http::Request req;
        req.method = "GET";
        req.path = path;
        std::promise<http::Response> answer;
        app_->handle(std::move(req), [&answer](http::Response r) { answer.set_value(std::move(r)); });
        return answer.get_future().get();
    };
    const auto page = get("/");
    EXPECT_EQ(page.status, 200);
    EXPECT_EQ(page.content_type, "text/html; charset=utf-8");
    const auto script = get("/console/app.js");
    EXPECT_EQ(script.status, 200);
    EXPECT_EQ(script.content_type, "text/javascript; charset=utf-8");
    const auto missing = get("/console/missing.js");
    EXPECT_EQ(missing.status, 404);
    EXPECT_EQ(json::parse(missing.body)["code"], "not_found");
    EXPECT_EQ(get("/api/v1/training_runs").status, 401);
}

}  // namespace
}  // namespace tinkerd::api
