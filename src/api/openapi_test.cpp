// GET /openapi.json: every route App registers has a RouteDoc and the description names only schemas and
// parameters that exist; the served document has OpenAPI 3.1's structure (operations with responses,
// unique operationIds, every path parameter declared, every $ref resolving); every described operation
// reaches a route of App::handle; and openapi_problems() catches an undocumented route or a bad name.
#include "api/openapi.h"

#include <chrono>
#include <filesystem>
#include <future>
#include <regex>
#include <set>
#include <unistd.h>

#include <gtest/gtest.h>

#include "api/app.h"
#include "api/openapi_schemas.h"
#include "scheduler/fake_engine.h"

namespace tinkerd::api {
namespace {

namespace fs = std::filesystem;
using namespace std::chrono_literals;

class OpenApiTest : public ::testing::Test {
  protected:
    void SetUp() override {
        dir_ = fs::temp_directory_path() / ("tinkerd-openapi-test-" + std::to_string(::getpid()));
        fs::remove_all(dir_);
        AppOptions options;
        options.data_dir = dir_.string();
        options.poll_timeout = 200ms;
        options.disk_reserve_bytes = 0;
        auto auth = Auth::from_text("tml-alice alice\n");
        ASSERT_TRUE(auth.ok());
        ServedModelSpec spec;
        spec.name = "fake";
        spec.engine = &engine_;
        auto app = App::create(options, std::move(*auth), {spec});
        ASSERT_TRUE(app.ok()) << app.error().message;
        app_ = std::move(*app);
    }
    void TearDown() override {
        app_.reset();
        fs::remove_all(dir_);
    }

    http::Response get(const std::string & method, const std::string & path) {
        http::Request req;
        req.method = method;
        req.path = path;
        auto promise = std::make_shared<std::promise<http::Response>>();
        auto answer = promise->get_future();
        app_->handle(std::move(req), [promise](http::Response r) { promise->set_value(std::move(r)); });
        EXPECT_EQ(answer.wait_for(10s), std::future_status::ready) << method << " " << path;
        return answer.get();
    }

    json document() {
        auto r = get("GET", "/openapi.json");  // no key: the description is public
        EXPECT_EQ(r.status, 200) << r.body;
        json doc = json::parse(r.body, nullptr, false);
        EXPECT_TRUE(doc.is_object()) << r.body.substr(0, 200);
        return doc;
    }

    fs::path dir_;
    scheduler::fakes::FakeEngine engine_{512};
    std::unique_ptr<App> app_;
};

// Every "$ref" in `value` with where it is.
void collect_refs(const json & value, const std::string & at, std::vector<std::pair<std::string, std::string>> & out) {
    if (value.is_object()) {
        for (const auto & [key, item] : value.items()) {
            if (key == "$ref" && item.is_string()) {
                out.emplace_back(item.get<std::string>(), at);
            } else {
                collect_refs(item, at + "/" + key, out);
            }
        }
    } else if (value.is_array()) {
        for (size_t i = 0; i < value.size(); ++i) {
            collect_refs(value[i], at + "/" + std::to_string(i), out);
        }
    }
}

// "#/a/b" -> doc["a"]["b"], or nullptr.
const json * resolve(const json & doc, const std::string & ref) {
    if (ref.rfind("#/", 0) != 0) {
        return nullptr;
    }
    const json * node = &doc;
    for (const auto & part : Router<Route>::split(ref.substr(2))) {
        if (!node->is_object() || !node->contains(part)) {
            return nullptr;
        }
        node = &(*node)[part];
    }
    return node;
}

TEST_F(OpenApiTest, EveryRouteIsDocumentedWithExistingNames) {
    const auto problems = app_->openapi_problems();
    std::string all;
    for (const auto & p : problems) {
        all += p + "\n";
    }
    EXPECT_TRUE(problems.empty()) << all;
}

TEST_F(OpenApiTest, DocumentHasOpenApi31Structure) {
    const json doc = document();
    EXPECT_EQ(doc.value("openapi", ""), "3.1.0");
    ASSERT_TRUE(doc["info"].is_object());
    EXPECT_TRUE(doc["info"]["title"].is_string());
    EXPECT_TRUE(doc["info"]["version"].is_string());
    ASSERT_TRUE(doc["paths"].is_object());
    EXPECT_GE(doc["paths"].size(), 40u);
    std::set<std::string> operation_ids;
    const std::set<std::string> methods = {"get", "put", "post", "delete"};
    for (const auto & [path, item] : doc["paths"].items()) {
        ASSERT_EQ(path.front(), '/') << path;
        std::set<std::string> templated;
        for (const auto & segment : Router<Route>::split(path)) {
            if (segment.front() == '{') {
                EXPECT_EQ(segment.back(), '}') << path;
                EXPECT_EQ(segment.find("..."), std::string::npos) << path;
                templated.insert(segment.substr(1, segment.size() - 2));
            }
        }
        for (const auto & [method, op] : item.items()) {
            const std::string where = method + " " + path;
            EXPECT_TRUE(methods.count(method)) << where;
            EXPECT_TRUE(operation_ids.insert(op.value("operationId", "")).second) << "duplicate id at " << where;
            EXPECT_FALSE(op.value("summary", "").empty()) << where;
            ASSERT_TRUE(op["responses"].is_object() && !op["responses"].empty()) << where;
            EXPECT_TRUE(op["responses"].contains("4XX")) << where;
            for (const auto & [status, response] : op["responses"].items()) {
                EXPECT_TRUE(std::regex_match(status, std::regex("[1-5](XX|[0-9][0-9])|default"))) << where;
                EXPECT_TRUE(response["description"].is_string()) << where << " " << status;
            }
            std::set<std::string> declared;
            for (const auto & param : op.value("parameters", json::array())) {
                if (param.contains("$ref")) {
                    continue;
                }
                EXPECT_EQ(param["in"], "path") << where;
                EXPECT_EQ(param["required"], true) << where;
                declared.insert(param["name"].get<std::string>());
            }
            EXPECT_EQ(declared, templated) << where;
        }
    }
}

TEST_F(OpenApiTest, EveryRefResolvesAndSchemasAreObjects) {
    const json doc = document();
    std::vector<std::pair<std::string, std::string>> refs;
    collect_refs(doc, "", refs);
    EXPECT_GT(refs.size(), 100u);
    for (const auto & [ref, at] : refs) {
        EXPECT_NE(resolve(doc, ref), nullptr) << ref << " at " << at;
    }
    for (const auto & [name, schema] : doc["components"]["schemas"].items()) {
        EXPECT_TRUE(schema.is_object()) << name;
        EXPECT_FALSE(schema.empty()) << name;
    }
}

// Each described operation, with "x" in its path parameters, reaches a route (not the router's own
// 404 / 405), and the key check it describes is the one App::handle does.
TEST_F(OpenApiTest, EveryOperationReachesARoute) {
    const json doc = document();
    for (const auto & [path, item] : doc["paths"].items()) {
        const std::string concrete = std::regex_replace(path, std::regex("\\{[a-z_]+\\}"), "x");
        for (const auto & [method, op] : item.items()) {
            std::string upper = method;
            for (auto & c : upper) {
                c = static_cast<char>(std::toupper(static_cast<unsigned char>(c)));
            }
            const auto r = get(upper, concrete);
            EXPECT_EQ(r.body.find("no such endpoint"), std::string::npos) << upper << " " << concrete;
            EXPECT_EQ(r.body.find("method not allowed"), std::string::npos) << upper << " " << concrete;
            const bool keyed = !op["security"].empty();
            if (keyed) {
                EXPECT_EQ(r.status, 401) << upper << " " << concrete << ": " << r.body;
            } else {
                EXPECT_NE(r.status, 401) << upper << " " << concrete;
            }
        }
    }
}

TEST_F(OpenApiTest, DescribesTheRoutesTheSdksAndConsoleUse) {
    const json doc = document();
    const auto & paths = doc["paths"];
    EXPECT_TRUE(paths["/api/v1/training_runs/{run_id}/checkpoints/{checkpoint_id}"].contains("delete"));
    EXPECT_EQ(paths["/api/v1/retrieve_future"]["post"]["requestBody"]["content"]["application/json"]["schema"]["$ref"],
              "#/components/schemas/RetrieveFutureRequest");
    EXPECT_TRUE(paths["/v1/chat/completions"]["post"]["responses"]["200"]["content"].contains("text/event-stream"));
    EXPECT_EQ(paths["/v1/models"]["get"]["responses"]["401"]["content"]["application/json"]["schema"]["$ref"],
              "#/components/schemas/OpenAIError");
    EXPECT_TRUE(paths["/openapi.json"]["get"]["security"].empty());
    EXPECT_TRUE(paths["/api/v1/healthz"]["get"]["security"].empty());
    EXPECT_EQ(paths["/api/v1/training_runs"]["get"]["parameters"].size(), 3u);
    for (const char * schema : {"TrainingRunMetrics", "ServerStatus", "MetricPoint"}) {  // the console contract
        EXPECT_TRUE(doc["components"]["schemas"].contains(schema)) << schema;
    }
    EXPECT_FALSE(console_route_doc("GET /api/v1/server_status").summary.empty());
}

Result<json> no_answer(Call &) {
    return json::object();
}

TEST(OpenApiProblems, UndocumentedRoutesAndUnknownNamesAreReported) {
    Router<Route> router;
    Route documented;
    documented.sync = no_answer;
    documented.doc = route_doc("meta", "fine", "", "Health");
    router.add("GET", "/fine", documented);
    EXPECT_TRUE(openapi_problems(router).empty());
    Route bare;
    bare.sync = no_answer;
    router.add("GET", "/bare", bare);
    Route misnamed = documented;
    misnamed.doc.response = "NoSuchSchema";
    misnamed.doc.query = {"no_such_parameter"};
    router.add("POST", "/misnamed/{id...}", misnamed);
    Route open = documented;  // needs_auth but documented as keyless
    open.doc.key = KeyCheck::NONE;
    router.add("PUT", "/open", open);
    const auto problems = openapi_problems(router);
    ASSERT_EQ(problems.size(), 4u);
    EXPECT_NE(problems[0].find("GET /bare: no summary"), std::string::npos) << problems[0];
    EXPECT_NE(problems[1].find("NoSuchSchema"), std::string::npos) << problems[1];
    EXPECT_NE(problems[2].find("no_such_parameter"), std::string::npos) << problems[2];
    EXPECT_NE(problems[3].find("needs_auth"), std::string::npos) << problems[3];
    EXPECT_EQ(openapi_path("/misnamed/{id...}"), "/misnamed/{id}");
    EXPECT_EQ(pattern_params("/a/{run_id}/b/{checkpoint_id...}"),
              (std::vector<std::string>{"run_id", "checkpoint_id"}));
}

}  // namespace
}  // namespace tinkerd::api
