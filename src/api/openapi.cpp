// The OpenAPI 3.1 document of a Router's routes: one operation per (method, path) from its RouteDoc
// (path parameters from the pattern, query parameters, request body, the 200 answer, the 4xx error shape
// of whoever checks the key, the security schemes), the merged component schemas, and the checks of
// openapi_problems().
#include "api/openapi.h"

#include <algorithm>
#include <cctype>
#include <functional>
#include <set>

#include "api/openapi_schemas.h"

namespace tinkerd::api {

namespace {

constexpr const char * SCHEMA_PREFIX = "#/components/schemas/";

json schema_ref(const std::string & name) {
    return json{{"$ref", SCHEMA_PREFIX + name}};
}

json merge_schema_texts() {
    json merged = json::object();
    std::vector<const char *> texts = detail::tinker_schema_texts();
    for (auto * group : {&detail::openai_schema_texts, &detail::console_schema_texts}) {
        const auto more = (*group)();
        texts.insert(texts.end(), more.begin(), more.end());
    }
    for (size_t i = 0; i < texts.size(); ++i) {
        json part = json::parse(texts[i], nullptr, false);
        if (part.is_discarded() || !part.is_object()) {
            merged["$invalid"].push_back("schema text " + std::to_string(i) + " does not parse");
            continue;
        }
        merged.update(part);
    }
    return merged;
}

std::string operation_id(const std::string & method, const std::string & path) {
    std::string id = method;
    std::transform(id.begin(), id.end(), id.begin(), [](unsigned char c) { return std::tolower(c); });
    for (char c : path) {
        const bool word = std::isalnum(static_cast<unsigned char>(c));
        if (word) {
            id += c;
        } else if (id.back() != '_') {
            id += '_';
        }
    }
    while (id.back() == '_') {
        id.pop_back();
    }
    return id;
}

json parameters_of(const std::string & pattern, const RouteDoc & doc) {
    json params = json::array();
    for (const auto & name : pattern_params(pattern)) {
        json param = {{"name", name}, {"in", "path"}, {"required", true}, {"schema", {{"type", "string"}}}};
        if (pattern.find("{" + name + "...}") != std::string::npos) {
            param["description"] = "The rest of the path, slashes included (weights/<name> or sampler_weights/<name>)";
        }
        params.push_back(param);
    }
    for (const auto & name : doc.query) {
        params.push_back({{"$ref", "#/components/parameters/" + name}});
    }
    return params;
}

json request_body_of(const RouteDoc & doc) {
    json content = json::object();
    content["application/json"] = {{"schema", schema_ref(doc.request)}};
    for (const auto & media : doc.request_media) {
        content[media] = {{"schema", {{"type", "string"}, {"contentMediaType", media}}}};
    }
    return json{{"required", false}, {"content", content}};
}

json json_content(const std::string & schema) {
    return json{{"application/json", {{"schema", schema_ref(schema)}}}};
}

// The 200 answer (when the route has one) and the errors: 4XX in the shape of whoever checks the key.
json responses_of(const RouteDoc & doc) {
    json responses = json::object();
    json content = doc.response.empty() ? json::object() : json_content(doc.response);
    for (const auto & media : doc.response_media) {
        content[media] = json::object();  // not JSON: described, not validated
    }
    if (!content.empty()) {
        responses["200"] = {{"description", "Success"}, {"content", content}};
    }
    const std::string error = doc.key == KeyCheck::OPENAI ? "OpenAIError" : "Error";
    if (doc.key != KeyCheck::NONE) {
        responses["401"] = {{"description", "Missing or invalid API key"}, {"content", json_content(error)}};
    }
    responses["4XX"] = {{"description", "Refused: the message names the field or the missing object"},
                        {"content", json_content(error)}};
    return responses;
}

json operation_of(const std::string & method, const std::string & pattern, const RouteDoc & doc) {
    json op = {{"operationId", operation_id(method, openapi_path(pattern))},
               {"summary", doc.summary},
               {"tags", json::array({doc.tag})},
               {"responses", responses_of(doc)}};
    if (!doc.description.empty()) {
        op["description"] = doc.description;
    }
    json params = parameters_of(pattern, doc);
    if (!params.empty()) {
        op["parameters"] = params;
    }
    if (!doc.request.empty()) {
        op["requestBody"] = request_body_of(doc);
    }
    op["security"] = doc.key == KeyCheck::NONE
                         ? json::array()
                         : json::array({{{"ApiKey", json::array()}}, {{"Bearer", json::array()}}});
    return op;
}

json components() {
    return json{{"schemas", openapi_schemas()},
                {"parameters", openapi_parameters()},
                {"securitySchemes",
                 {{"ApiKey", {{"type", "apiKey"}, {"in", "header"}, {"name", "X-API-Key"}}},
                  {"Bearer", {{"type", "http"}, {"scheme", "bearer"}}}}}};
}

// Every "$ref" string anywhere in `value`.
void collect_refs(const json & value, std::vector<std::string> & out) {
    if (value.is_object()) {
        for (const auto & [key, item] : value.items()) {
            if (key == "$ref" && item.is_string()) {
                out.push_back(item.get<std::string>());
            } else {
                collect_refs(item, out);
            }
        }
    } else if (value.is_array()) {
        for (const auto & item : value) {
            collect_refs(item, out);
        }
    }
}

}  // namespace

const json & openapi_schemas() {
    static const json schemas = merge_schema_texts();
    return schemas;
}

const json & openapi_parameters() {
    static const json parameters = [] {
        const auto query = [](const std::string & name, json schema, const std::string & text) {
            return json{
                {"name", name}, {"in", "query"}, {"required", false}, {"schema", schema}, {"description", text}};
        };
        const json count = {{"type", "integer"}, {"minimum", 0}};
        return json{
            {"limit", query("limit", count, "Page size (at most 1000)")},
            {"offset", query("offset", count, "Items to skip")},
            {"access_scope", query("access_scope", {{"enum", {"owned", "accessible"}}},
                                   "accessible: also other tenants' published runs")},
            {"since_step", query("since_step", count, "Only points from this optimizer step on")},
            {"project_id", query("project_id", {{"type", "string"}}, "Only checkpoints of this project's sessions")},
            {"topics",
             query("topics", {{"type", "string"}, {"pattern", "^(runs|status|metrics)(,(runs|status|metrics))*$"}},
                   "What to follow, comma-separated: runs, status, metrics")},
            {"run_ids",
             query("run_ids", {{"type", "string"}}, "topics=metrics: the runs to follow, comma-separated (at most 8)")},
            {"runs_limit", query("limit", {{"type", "integer"}, {"minimum", 1}, {"maximum", 200}},
                                 "topics=runs: how many of the newest runs (default 50)")},
            {"last_event_id",
             {{"name", "Last-Event-ID"},
              {"in", "header"},
              {"required", false},
              {"schema", {{"type", "string"}, {"pattern", "^[0-9]{1,18}$"}}},
              {"description", "Resume a stream after the `metrics` event with this id (no point is sent twice)"}}},
        };
    }();
    return parameters;
}

std::string openapi_path(const std::string & pattern) {
    std::string out = pattern;
    for (size_t at = out.find("...}"); at != std::string::npos; at = out.find("...}")) {
        out.erase(at, 3);
    }
    return out;
}

std::vector<std::string> pattern_params(const std::string & pattern) {
    std::vector<std::string> names;
    for (const auto & segment : Router<Route>::split(openapi_path(pattern))) {
        if (segment.size() > 2 && segment.front() == '{' && segment.back() == '}') {
            names.push_back(segment.substr(1, segment.size() - 2));
        }
    }
    return names;
}

json openapi_document(const Router<Route> & router) {
    json paths = json::object();
    std::set<std::string> tags;
    router.for_each([&](const std::string & method, const std::string & pattern, const Route & route) {
        std::string lower = method;
        std::transform(lower.begin(), lower.end(), lower.begin(), [](unsigned char c) { return std::tolower(c); });
        paths[openapi_path(pattern)][lower] = operation_of(method, pattern, route.doc);
        tags.insert(route.doc.tag);
    });
    json tag_list = json::array();
    for (const auto & tag : tags) {
        tag_list.push_back({{"name", tag}});
    }
    return json{{"openapi", "3.1.0"},
                {"info",
                 {{"title", "tinkerd"},
                  {"version", "1"},
                  {"description",
                   "The Tinker training API (/api/v1/) and the OpenAI-compatible API (/v1/, /oai/api/v1/) of "
                   "tinkerd, generated from the server's own route table."}}},
                {"jsonSchemaDialect", "https://spec.openapis.org/oas/3.1/dialect/base"},
                {"tags", tag_list},
                {"paths", paths},
                {"components", components()}};
}

std::vector<std::string> openapi_problems(const Router<Route> & router) {
    std::vector<std::string> problems;
    const json & schemas = openapi_schemas();
    const json & parameters = openapi_parameters();
    if (schemas.contains("$invalid")) {
        problems.push_back("schemas: " + schemas["$invalid"].dump());
    }
    std::set<std::string> seen;
    router.for_each([&](const std::string & method, const std::string & pattern, const Route & route) {
        const RouteDoc & doc = route.doc;
        const std::string name = method + " " + pattern;
        if (!seen.insert(method + " " + openapi_path(pattern)).second) {
            problems.push_back(name + ": a second route on the same method and path");
        }
        if (doc.summary.empty() || doc.tag.empty()) {
            problems.push_back(name + ": no summary or tag (register it with a RouteDoc)");
        }
        if (route.needs_auth != (doc.key == KeyCheck::TINKER)) {
            problems.push_back(name + ": RouteDoc.key disagrees with Route::needs_auth");
        }
        for (const auto & schema : {doc.request, doc.response}) {
            if (!schema.empty() && !schemas.contains(schema)) {
                problems.push_back(name + ": no schema named '" + schema + "'");
            }
        }
        for (const auto & query : doc.query) {
            if (!parameters.contains(query)) {
                problems.push_back(name + ": no query parameter named '" + query + "'");
            }
        }
    });
    std::vector<std::string> refs;
    collect_refs(schemas, refs);
    for (const auto & ref : refs) {
        if (ref.rfind(SCHEMA_PREFIX, 0) != 0 || !schemas.contains(ref.substr(std::string(SCHEMA_PREFIX).size()))) {
            problems.push_back("schemas: $ref to nothing: " + ref);
        }
    }
    return problems;
}

}  // namespace tinkerd::api
