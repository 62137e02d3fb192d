// AppTest: the fixture of the in-process App tests (app_test, monitoring_test): an App over a FakeEngine
// served as "fake" with stories260K's tokenizer, keys tml-alice / tml-bob, requests through App::handle as
// the HTTP layer sends them, and the request bodies those tests share.
#pragma once

#include <chrono>
#include <cstdlib>
#include <filesystem>
#include <future>
#include <string>
#include <unistd.h>
#include <vector>

#include <gtest/gtest.h>

#include "api/app.h"
#include "scheduler/fake_engine.h"

namespace tinkerd::api::testing_support {

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
        const fs::path tok_dir = dir_ / "tokenizer";  // stories260K's: the fake engine's 512-token vocabulary
        fs::create_directories(tok_dir);
        const char * source = std::getenv("TINKERD_SOURCE_DIR");  // set by ctest
        const fs::path root = source ? fs::path(source) : fs::path(__FILE__).parent_path() / "../..";
        fs::copy_file(root / "fuzz/data/stories260k_tokenizer.json", tok_dir / "tokenizer.json");
        auto tok = tokenizer::Tokenizer::load(tok_dir.string());
        ASSERT_TRUE(tok.ok()) << tok.error().message;
        tokenizer_ = std::move(*tok);
        ServedModelSpec spec;
        spec.name = "fake";
        spec.engine = &engine_;
        spec.tokenizer = tokenizer_.get();
        spec_ = spec;
        options_ = options;
        start_app();
    }
    // (Re)creates the App on the same data dir, as a restarted server would.
    void start_app() {
        app_.reset();
        auto auth = Auth::from_text("tml-alice alice\ntml-bob bob\n");
        ASSERT_TRUE(auth.ok());
        auto app = App::create(options_, std::move(*auth), {spec_});
        ASSERT_TRUE(app.ok()) << app.error().message;
        app_ = std::move(*app);
        app_->start();
    }
    void TearDown() override {
        app_.reset();
        fs::remove_all(dir_);
    }

    // One request through App::handle; the response, however late it comes (held polls).
    http::Response call(const std::string & path, const std::string & body, const std::string & key = "tml-alice",
                        const std::string & method = "POST") {
        http::Request req;
        req.method = method;
        req.path = path.front() == '/' ? path : "/api/v1/" + path;
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
    AppOptions options_;
    ServedModelSpec spec_;
    std::unique_ptr<tokenizer::Tokenizer> tokenizer_;
    scheduler::fakes::FakeEngine engine_{512};
    std::unique_ptr<App> app_;
};

}  // namespace tinkerd::api::testing_support
