// Unit tests of the API's torch-free pieces: the router (run ids with ':' and checkpoint ids with '/'),
// API keys and tenants, tinker:// paths, checkpoint names, JSON field errors and error statuses.
#include <gtest/gtest.h>

#include "api/auth.h"
#include "api/json_util.h"
#include "api/router.h"

namespace tinkerd::api {
namespace {

TEST(Router, CapturesColonsAndTrailingSlashes) {
    Router<int> router;
    router.add("GET", "/api/v1/training_runs/{run_id}", 1);
    router.add("POST", "/api/v1/training_runs/{run_id}/checkpoints/{kind}/{name}/publish", 2);
    router.add("DELETE", "/api/v1/training_runs/{run_id}/checkpoints/{checkpoint_id...}", 3);
    auto m = router.match("GET", "/api/v1/training_runs/sess-1:train:0");
    ASSERT_NE(m.target, nullptr);
    EXPECT_EQ(*m.target, 1);
    EXPECT_EQ(m.params["run_id"], "sess-1:train:0");
    m = router.match("DELETE", "/api/v1/training_runs/s:train:2/checkpoints/weights/ckpt-1");
    ASSERT_NE(m.target, nullptr);
    EXPECT_EQ(*m.target, 3);
    EXPECT_EQ(m.params["checkpoint_id"], "weights/ckpt-1");
    m = router.match("POST", "/api/v1/training_runs/r/checkpoints/sampler_weights/x/publish");
    ASSERT_NE(m.target, nullptr);
    EXPECT_EQ(*m.target, 2);
    EXPECT_EQ(m.params["kind"], "sampler_weights");
    EXPECT_EQ(m.params["name"], "x");
}

TEST(Router, UnknownPathAndWrongMethod) {
    Router<int> router;
    router.add("POST", "/api/v1/create_model", 1);
    EXPECT_EQ(router.match("POST", "/api/v1/nope").target, nullptr);
    auto m = router.match("GET", "/api/v1/create_model");
    EXPECT_EQ(m.target, nullptr);
    EXPECT_TRUE(m.method_mismatch);
    EXPECT_EQ(router.match("POST", "/api/v1/create_model/extra").target, nullptr);
}

TEST(Auth, DevModeAcceptsTmlKeysOnly) {
    Auth auth;
    EXPECT_EQ(auth.tenant_of("tml-anything").value(), DEV_TENANT);
    EXPECT_FALSE(auth.tenant_of("sk-123").has_value());
    EXPECT_FALSE(auth.tenant_of("").has_value());
}

TEST(Auth, KeyFileMapsKeysToTenants) {
    auto auth = Auth::from_text("# comment\ntml-alice alice\n\ntml-bob bob\ntml-anon\n");
    ASSERT_TRUE(auth.ok()) << auth.error().message;
    EXPECT_EQ(auth->tenant_of("tml-alice").value(), "alice");
    EXPECT_EQ(auth->tenant_of("tml-bob").value(), "bob");
    EXPECT_EQ(auth->tenant_of("tml-anon").value(), "key-5");
    EXPECT_FALSE(auth->tenant_of("tml-mallory").has_value());
    EXPECT_FALSE(Auth::from_text("tml-a x\ntml-a y\n").ok());
    EXPECT_FALSE(Auth::from_text("\n# nothing\n").ok());
}

TEST(Auth, BearerFallback) {
    EXPECT_EQ(request_key("tml-x", "Bearer tml-y"), "tml-x");
    EXPECT_EQ(request_key("", "Bearer tml-y"), "tml-y");
    EXPECT_EQ(request_key("", "Basic abc"), "");
    // The scheme is case-insensitive (RFC 7235); extra spaces around the token are dropped.
    EXPECT_EQ(request_key("", "bearer tml-y"), "tml-y");
    EXPECT_EQ(request_key("", "BEARER tml-y"), "tml-y");
    EXPECT_EQ(request_key("", "bEaReR   tml-y  "), "tml-y");
    EXPECT_EQ(request_key("", "Bearer"), "");
    EXPECT_EQ(request_key("", "Bearer   "), "");
    EXPECT_EQ(request_key("", "Bearertml-y"), "");
}

TEST(TinkerPath, ParsesTheThreePartForm) {
    auto p = parse_tinker_path("tinker://sess-1:train:0/weights/000003");
    ASSERT_TRUE(p.ok()) << p.error().message;
    EXPECT_EQ(p->run_id, "sess-1:train:0");
    EXPECT_EQ(p->checkpoint_id(), "weights/000003");
    EXPECT_EQ(p->str(), "tinker://sess-1:train:0/weights/000003");
    EXPECT_TRUE(parse_tinker_path("tinker://r/sampler_weights/final").ok());
    EXPECT_FALSE(parse_tinker_path("tinker://r/weights/a/b").ok());  // extra segment
    EXPECT_FALSE(parse_tinker_path("tinker://r/optimizer/a").ok());
    EXPECT_FALSE(parse_tinker_path("http://r/weights/a").ok());
    EXPECT_FALSE(parse_tinker_path("tinker:///weights/a").ok());
    EXPECT_FALSE(parse_tinker_path("tinker://r/weights/..").ok());
    EXPECT_FALSE(parse_checkpoint_id("r", "ckpt-1").ok());  // a bare id
}

TEST(JsonUtil, FieldErrorsNameTheField) {
    json body = {{"lora_config", {{"rank", "eight"}}}, {"n", 3.0}, {"f", 2.5}};
    auto rank = get_int(body["lora_config"], "rank", "lora_config");
    ASSERT_FALSE(rank.ok());
    EXPECT_NE(rank.error().message.find("lora_config.rank"), std::string::npos);
    EXPECT_EQ(get_int(body, "n").value(), 3);
    EXPECT_FALSE(get_int(body, "f").ok());
    EXPECT_FALSE(get_string(body, "missing").ok());
    EXPECT_TRUE(get_optional_string(body, "missing").ok());
}

TEST(JsonUtil, ErrorStatusesAndBodies) {
    EXPECT_EQ(http_status(ErrorKind::INVALID_ARGUMENT), 400);
    EXPECT_EQ(http_status(ErrorKind::NOT_FOUND), 404);
    EXPECT_EQ(http_status(ErrorKind::TOO_LARGE), 413);
    auto response = error_response(invalid_argument("bad seq_id"));
    EXPECT_EQ(response.status, 400);
    EXPECT_EQ(json::parse(response.body)["detail"], "bad seq_id");
    EXPECT_TRUE(finite_or_null(std::nan("")).is_null());
    EXPECT_FALSE(parse_json_body("[1,2]").ok());
    EXPECT_FALSE(parse_json_body("{oops").ok());
    EXPECT_TRUE(parse_json_body("").ok());
}

TEST(JsonUtil, DigestsAndTimes) {
    EXPECT_EQ(body_digest("abc"), body_digest("abc"));
    EXPECT_NE(body_digest("abc"), body_digest("abd"));
    EXPECT_EQ(iso_time(0.5), "1970-01-01T00:00:00.500Z");
    EXPECT_EQ(random_hex(12).size(), 12u);
}

TEST(Sdk038, OptimizerConfigAdamwOrDimuonVersion1) {
    EXPECT_EQ(parse_optimizer_config(json::object()).value(), std::nullopt);
    EXPECT_EQ(parse_optimizer_config(json{{"optimizer_config", nullptr}}).value(), std::nullopt);
    EXPECT_EQ(parse_optimizer_config(json{{"optimizer_config", {{"type", "adamw"}}}}).value(), "adamw");
    EXPECT_EQ(parse_optimizer_config(json{{"optimizer_config", {{"type", "dimuon"}, {"version", 1}}}}).value(),
              "dimuon");
    auto v2 = parse_optimizer_config(json{{"optimizer_config", {{"type", "dimuon"}, {"version", 2}}}});
    ASSERT_FALSE(v2.ok());
    EXPECT_EQ(v2.error().message, "optimizer_config.version 2 of dimuon is not supported (version 1 is)");
    auto sgd = parse_optimizer_config(json{{"optimizer_config", {{"type", "sgd"}}}});
    ASSERT_FALSE(sgd.ok());
    EXPECT_EQ(http_status(sgd.error().kind), 400);
    auto malformed = parse_optimizer_config(json{{"optimizer_config", "adamw"}});
    ASSERT_FALSE(malformed.ok());
    EXPECT_EQ(malformed.error().kind, ErrorKind::INVALID_ARGUMENT);
    EXPECT_EQ(optimizer_config_json("dimuon"), json({{"type", "dimuon"}, {"version", 1}}));
}

TEST(Sdk038, UserMetadataIsBounded) {
    EXPECT_TRUE(get_string_map(json{{"user_metadata", {{"renderer_name", "qwen3"}}}}, "user_metadata").ok());
    json many = json::object();
    for (size_t i = 0; i <= MAX_METADATA_KEYS; ++i) {
        many["k" + std::to_string(i)] = "v";
    }
    auto too_many = get_string_map(json{{"user_metadata", many}}, "user_metadata");
    ASSERT_FALSE(too_many.ok());
    EXPECT_EQ(too_many.error().message, "user_metadata: at most 100 keys, got 101");
    auto long_value = get_string_map(json{{"user_metadata", {{"k", std::string(5000, 'x')}}}}, "user_metadata");
    ASSERT_FALSE(long_value.ok());
    EXPECT_NE(long_value.error().message.find("values at most 4096 bytes (key 'k')"), std::string::npos);
    EXPECT_FALSE(get_string_map(json{{"user_metadata", {{"", "v"}}}}, "user_metadata").ok());
}

TEST(Sdk038, FixedRoutesRegisteredFirstWinOverCaptures) {
    Router<int> router;
    router.add("POST", "/api/v1/sessions/search", 1);  // App registers the 0.38 refusals first
    router.add("GET", "/api/v1/sessions/{session_id}", 2);
    router.add("POST", "/api/v1/sessions/{session_id}/finish", 3);
    EXPECT_EQ(*router.match("POST", "/api/v1/sessions/search").target, 1);
    EXPECT_EQ(*router.match("GET", "/api/v1/sessions/sess-1").target, 2);
    auto m = router.match("POST", "/api/v1/sessions/sess-1/finish");
    ASSERT_NE(m.target, nullptr);
    EXPECT_EQ(*m.target, 3);
    EXPECT_EQ(m.params["session_id"], "sess-1");
}

}  // namespace
}  // namespace tinkerd::api
