// In-process tests of the monitoring routes on the FakeEngine: a run's metric points (ops, steps, every
// returned metric, num_tokens, learning_rate; since_step; another tenant's run is a 404; kept across a
// restart), server_status (the model's load, only the caller's samplers and sessions, sampler counts
// and latency quantiles, the same after a restart) and GET /metrics (no key; request counts by route pattern, tokens
// trained).
#include <map>
#include <string>

#include <gtest/gtest.h>

#include "api/app_test_fixture.h"
#include "common/version.h"

namespace tinkerd::api {
namespace {

using namespace std::chrono_literals;

class MonitoringTest : public testing_support::AppTest {
  protected:
    http::Response get(const std::string & path, const std::string & key = "tml-alice",
                       std::map<std::string, std::string> query = {}) {
        http::Request req;
        req.method = "GET";
        req.path = path;
        req.query = std::move(query);
        if (!key.empty()) {
            req.headers["x-api-key"] = key;
        }
        auto promise = std::make_shared<std::promise<http::Response>>();
        auto answer = promise->get_future();
        app_->handle(std::move(req), [promise](http::Response r) { promise->set_value(std::move(r)); });
        EXPECT_EQ(answer.wait_for(10s), std::future_status::ready) << path;
        return answer.get();
    }
    json get_json(const std::string & path, const std::string & key = "tml-alice",
                  std::map<std::string, std::string> query = {}) {
        auto r = get(path, key, std::move(query));
        EXPECT_EQ(r.status, 200) << path << ": " << r.body;
        return json::parse(r.body, nullptr, false);
    }
    // fb's datum with the last of its three positions weighted 0: two loss-bearing tokens.
    static json weighted_fb(const std::string & model, int64_t seq) {
        json body = fb(model, seq);
        body["forward_backward_input"]["data"][0]["loss_fn_inputs"]["weights"]["data"] = {1.0, 1.0, 0.0};
        return body;
    }
    // Trains fb, fb, optim_step(lr 1e-3), forward: the points' expected ops and steps.
    std::string train_a_step() {
        const std::string model = new_run();
        result(ok("forward_backward", weighted_fb(model, 1))["request_id"]);
        result(ok("forward_backward", fb(model, 2))["request_id"]);
        result(ok("optim_step", adam(model, 3, 1e-3))["request_id"]);
        json forward = fb(model, 4);
        forward["forward_input"] = forward["forward_backward_input"];
        forward.erase("forward_backward_input");
        result(ok("forward", forward)["request_id"]);
        return model;
    }
};

// What the console's run page and playground read beyond the SDK's fields: a run's lora_config (its owner
// only) and, per /v1/models entry, the base model behind it (root) and whether it can chat.
TEST_F(MonitoringTest, ARunNamesItsLoraConfigAndModelsSayWhetherTheyChat) {
    const std::string model = new_run();
    const json run = get_json("/api/v1/training_runs/" + model);
    ASSERT_TRUE(run.contains("lora_config")) << run.dump();
    const json & lora = run["lora_config"];
    EXPECT_EQ(lora["rank"], 8);
    EXPECT_EQ(lora["train_attn"], true);
    EXPECT_EQ(lora["train_mlp"], true);
    EXPECT_EQ(lora["train_unembed"], true);
    EXPECT_TRUE(lora["seed"].is_null());
    EXPECT_EQ(lora["optimizer_config"]["type"], "adamw");
    EXPECT_EQ(get_json("/api/v1/training_runs")["training_runs"][0]["lora_config"], lora);

    const json models = get_json("/v1/models")["data"];
    std::map<std::string, json> by_id;
    for (const json & m : models) {
        by_id[m["id"]] = m;
    }
    ASSERT_TRUE(by_id.count("fake") && by_id.count(model)) << models.dump();
    EXPECT_EQ(by_id["fake"]["root"], "fake");
    ASSERT_TRUE(by_id["fake"]["chat_template"].is_boolean()) << models.dump();
    EXPECT_EQ(by_id[model]["root"], "fake");
    EXPECT_EQ(by_id[model]["chat_template"], by_id["fake"]["chat_template"]);
}

TEST_F(MonitoringTest, ARunsPointsHoldEveryMetricInOrder) {
    const std::string model = train_a_step();
    const json got = get_json("/api/v1/training_runs/" + model + "/metrics");
    EXPECT_EQ(got["training_run_id"], model);
    EXPECT_EQ(got["downsampled"], false);
    const json & points = got["points"];
    ASSERT_EQ(points.size(), 4u) << got.dump();
    const std::vector<std::pair<std::string, int>> expected = {
        {"forward_backward", 0}, {"forward_backward", 0}, {"optim_step", 1}, {"forward", 1}};
    for (size_t i = 0; i < expected.size(); ++i) {
        EXPECT_EQ(points[i]["op"], expected[i].first) << i;
        EXPECT_EQ(points[i]["step"], expected[i].second) << i;
        EXPECT_GE(points[i]["duration_s"].get<double>(), 0.0);
        EXPECT_GT(points[i]["time"].get<double>(), 1.7e9);
    }
    EXPECT_EQ(points[0]["values"]["num_tokens"], 2.0);  // the zero-weight position bears no loss
    EXPECT_EQ(points[1]["values"]["num_tokens"], 3.0);
    EXPECT_TRUE(points[0]["values"].contains("adapter:sum"));  // every metric the engine returned
    EXPECT_EQ(points[0]["values"]["tag:sum"], -1.0);
    EXPECT_EQ(points[2]["values"]["learning_rate"], 1e-3);
    EXPECT_LE(points[0]["time"].get<double>(), points[3]["time"].get<double>());

    EXPECT_EQ(
        get_json("/api/v1/training_runs/" + model + "/metrics", "tml-alice", {{"since_step", "1"}})["points"].size(),
        2u);
    auto bad = get("/api/v1/training_runs/" + model + "/metrics", "tml-alice", {{"since_step", "-3"}});
    EXPECT_EQ(bad.status, 400);
    EXPECT_NE(bad.body.find("since_step"), std::string::npos) << bad.body;
    auto theirs = get("/api/v1/training_runs/" + model + "/metrics", "tml-bob");
    EXPECT_EQ(theirs.status, 404) << theirs.body;
    EXPECT_EQ(get("/api/v1/training_runs/nope:train:0/metrics").status, 404);

    start_app();  // a restart keeps every point
    EXPECT_EQ(get_json("/api/v1/training_runs/" + model + "/metrics")["points"].size(), 4u);
}

TEST_F(MonitoringTest, ServerStatusShowsTheModelAndOnlyTheCallersSamplersAndSessions) {
    train_a_step();
    const std::string session = ok("create_session", {{"tags", json::array()}})["session_id"];
    const json sampler = ok("create_sampling_session",
                            {{"session_id", session}, {"sampling_session_seq_id", 0}, {"base_model", "fake"}});
    const json prompt = {{"chunks", {{{"type", "encoded_text"}, {"tokens", {5}}}}}};
    result(ok("asample", {{"sampling_session_id", sampler["sampling_session_id"]},
                          {"prompt", prompt},
                          {"num_samples", 2},
                          {"sampling_params", {{"max_tokens", 3}}}})["request_id"]);
    const json status = get_json("/api/v1/server_status");
    EXPECT_EQ(status["version"], SERVER_VERSION);
    EXPECT_GE(status["uptime_s"].get<double>(), 0.0);
    EXPECT_EQ(status["futures_pending"], 0);
    EXPECT_TRUE(status["kernels"]["inputs"] == "fp32" || status["kernels"]["inputs"] == "bf16") << status["kernels"];
    EXPECT_FALSE(status["kernels"]["reason"].get<std::string>().empty());
    ASSERT_EQ(status["models"].size(), 1u);
    const json & m = status["models"][0];
    EXPECT_EQ(m["base_model"], "fake");
    EXPECT_EQ(m["queue_depth"], 0);
    EXPECT_EQ(m["adapters_resident"], 1);  // the trained run
    EXPECT_GT(m["tokens_per_s_trained"].get<double>(), 0.0);
    EXPECT_GT(m["tokens_per_s_sampled"].get<double>(), 0.0);
    for (const char * key :
         {"kv_cache_bytes_used", "kv_cache_bytes_total", "snapshots_resident", "engine_busy_fraction"}) {
        EXPECT_TRUE(m.contains(key)) << key;
    }
    EXPECT_EQ(m["data_parallel"], (json{{"ranks", 1}, {"world_size", 1}, {"generation", 0}})) << "a plain engine";
    ASSERT_EQ(status["samplers"].size(), 1u) << status.dump();
    const json & s = status["samplers"][0];
    EXPECT_EQ(s["sampler_id"], sampler["sampling_session_id"]);
    EXPECT_EQ(s["requests"], 1);
    EXPECT_EQ(s["tokens_sampled"], 6);  // 2 samples x 3 tokens
    EXPECT_GE(s["latency_p95_s"].get<double>(), s["latency_p50_s"].get<double>());
    EXPECT_EQ(status["sessions"].size(), 2u);  // the training run's session and the sampler's

    const json bobs = get_json("/api/v1/server_status", "tml-bob");
    EXPECT_TRUE(bobs["samplers"].empty()) << bobs.dump();
    EXPECT_TRUE(bobs["sessions"].empty()) << bobs.dump();
    EXPECT_EQ(get("/api/v1/server_status", "").status, 401);

    start_app();  // counts and latency quantiles survive a restart, the very same numbers
    const json after = get_json("/api/v1/server_status");
    ASSERT_EQ(after["samplers"].size(), 1u);
    EXPECT_EQ(after["samplers"][0]["tokens_sampled"], 6);
    ASSERT_TRUE(s["latency_p50_s"].is_number()) << s.dump();
    EXPECT_EQ(after["samplers"][0]["latency_p50_s"], s["latency_p50_s"]);
    EXPECT_EQ(after["samplers"][0]["latency_p95_s"], s["latency_p95_s"]);
}

TEST_F(MonitoringTest, PrometheusTextCountsRequestsByRoutePatternWithoutAKey) {
    const std::string model = train_a_step();
    get("/api/v1/training_runs/" + model);
    const auto response = get("/metrics", "");
    ASSERT_EQ(response.status, 200) << response.body;
    EXPECT_EQ(response.content_type.rfind("text/plain; version=0.0.4", 0), 0u);
    const std::string & text = response.body;
    auto has = [&](const std::string & line) {
        EXPECT_NE(text.find(line + "\n"), std::string::npos) << line << "\n" << text;
    };
    has(R"(tinkerd_http_requests_total{method="POST",route="/api/v1/forward_backward",status="200"} 2)");
    has(R"(tinkerd_http_requests_total{method="GET",route="/api/v1/training_runs/{run_id}",status="200"} 1)");
    has(R"(tinkerd_http_request_duration_seconds_count{method="POST",route="/api/v1/optim_step",status="200"} 1)");
    has(R"(tinkerd_tokens_trained_total{base_model="fake"} 6)");  // two forward_backwards of 3 tokens
    has(R"(tinkerd_adapters_resident{base_model="fake",kind="training"} 1)");
    has(R"(tinkerd_dp_ranks{base_model="fake"} 1)");
    has(R"(tinkerd_queue_depth{base_model="fake",kind="training"} 0)");
    EXPECT_EQ(text.find(model), std::string::npos) << "a run id leaked into a label";
    EXPECT_EQ(text.find("alice"), std::string::npos) << "a tenant leaked into a label";
    EXPECT_NE(text.find("tinkerd_sqlite_bytes "), std::string::npos);
    EXPECT_NE(text.find("tinkerd_process_resident_memory_bytes "), std::string::npos);
}

}  // namespace
}  // namespace tinkerd::api
