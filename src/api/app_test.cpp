// In-process tests of App with a FakeEngine (no torch, no sockets; built under ASan too): requests go
// through App::handle as the HTTP layer would send them. A training flow, and hostile inputs refused
// with 400s that leave the run usable: deep JSON, bad AdamW parameters, far and negative seq_ids, token
// ids outside the vocabulary, another tenant's run, and a seq_id hole given up after its timeout.
#include "api/app.h"

#include <chrono>
#include <filesystem>
#include <future>
#include <string>
#include <unistd.h>

#include <gtest/gtest.h>

#include "scheduler/fake_engine.h"

namespace tinkerd::api {
namespace {

namespace fs = std::filesystem;
using namespace std::chrono_literals;

class AppTest : public ::testing::Test {
  protected:
    void SetUp() override {
        dir_ = fs::temp_directory_path() / ("tinkerd-app-test-" + std::to_string(::getpid()));
        fs::remove_all(dir_);
        AppOptions options;
        options.data_dir = dir_.string();
        options.poll_timeout = 2000ms;
        options.seq_gap_timeout = 300ms;
        options.disk_reserve_bytes = 0;
        auto auth = Auth::from_text("tml-alice alice\ntml-bob bob\n");
        ASSERT_TRUE(auth.ok());
        ServedModelSpec spec;
        spec.name = "fake";
        spec.engine = &engine_;
        auto app = App::create(options, std::move(*auth), {spec});
        ASSERT_TRUE(app.ok()) << app.error().message;
        app_ = std::move(*app);
        app_->start();
    }
    void TearDown() override {
        app_.reset();
        fs::remove_all(dir_);
    }

    // One request through App::handle; the response, however late it comes (held polls).
    http::Response call(const std::string & path, const std::string & body, const std::string & key = "tml-alice") {
        http::Request req;
        req.method = "POST";
        req.path = "/api/v1/" + path;
        req.headers["x-api-key"] = key;
        req.headers["content-type"] = "application/json";
        req.body = body;
        auto promise = std::make_shared<std::promise<http::Response>>();
        auto answer = promise->get_future();
        app_->handle(std::move(req), [promise](http::Response r) { promise->set_value(std::move(r)); });
        EXPECT_EQ(answer.wait_for(10s), std::future_status::ready) << path;
        return answer.get();
    }
    json ok(const std::string & path, const json & body, const std::string & key = "tml-alice") {
        auto r = call(path, body.dump(), key);
        EXPECT_EQ(r.status, 200) << path << ": " << r.body;
        return json::parse(r.body, nullptr, false);
    }
    json result(const std::string & request_id) { return ok("retrieve_future", {{"request_id", request_id}}); }

    // A session and a run of alice's: its model id, with create_model's future answered.
    std::string new_run() {
        const std::string session = ok("create_session", {{"tags", json::array()}})["session_id"];
        json created =
            ok("create_model",
               {{"session_id", session}, {"model_seq_id", 0}, {"base_model", "fake"}, {"lora_config", {{"rank", 8}}}});
        result(created["request_id"]);
        return created["model_id"];
    }
    static json fb(const std::string & model, int64_t seq, std::vector<int64_t> tokens = {1, 2, 3}) {
        const json datum = {{"model_input", {{"chunks", {{{"type", "encoded_text"}, {"tokens", tokens}}}}}},
                            {"loss_fn_inputs",
                             {{"target_tokens", {{"data", {2, 3, 4}}, {"dtype", "int64"}}},
                              {"weights", {{"data", {1.0, 1.0, 1.0}}, {"dtype", "float32"}}}}}};
        return {{"model_id", model},
                {"seq_id", seq},
                {"forward_backward_input", {{"data", {datum}}, {"loss_fn", "cross_entropy"}}}};
    }
    static json adam(const std::string & model, int64_t seq, double lr, double eps = 1e-8) {
        return {{"model_id", model}, {"seq_id", seq}, {"adam_params", {{"learning_rate", lr}, {"eps", eps}}}};
    }
    void expect_400(const std::string & path, const std::string & body, const std::string & words,
                    const std::string & key = "tml-alice") {
        auto r = call(path, body, key);
        EXPECT_EQ(r.status, 400) << path << ": " << r.body;
        EXPECT_NE(r.body.find(words), std::string::npos) << r.body;
    }

    fs::path dir_;
    scheduler::fakes::FakeEngine engine_{512};
    std::unique_ptr<App> app_;
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
    const json later = ok("forward_backward", fb(model, 2));  // seq 1 never comes
    const auto started = std::chrono::steady_clock::now();
    EXPECT_TRUE(result(later["request_id"]).contains("metrics"));
    EXPECT_GE(std::chrono::steady_clock::now() - started, 200ms);
    expect_400("forward_backward", fb(model, 1).dump(), "given up");
}

}  // namespace
}  // namespace tinkerd::api
