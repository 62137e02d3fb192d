// RouteDoc: what GET /openapi.json says about one route (summary, tag, who checks the key, request and
// response schemas by their names in openapi_schemas.h, query parameters, other media types). Every route
// registration carries one (Route::doc), so the description is generated from the very table App::handle
// dispatches (openapi.h) and cannot drift from it.
#pragma once

#include <string>
#include <vector>

namespace tinkerd::api {

// Who checks the API key, which decides the 401's shape.
enum class KeyCheck {
    TINKER,  // App::handle before the handler: 401 {"detail"} (Route::needs_auth)
    OPENAI,  // the OpenAI handler itself: 401 {"error": {...}} (Route::needs_auth is false)
    NONE,    // no key needed (health, the description itself, one-time archive links)
};

struct RouteDoc {
    std::string summary;  // one line
    std::string tag;      // the group in the description: "sessions", "training", "openai", ...
    KeyCheck key = KeyCheck::TINKER;
    std::string request;                      // schema of the JSON request body; "" when the route takes none
    std::string response;                     // schema of the 200 JSON body; "" when 200 is not JSON or never answered
    std::vector<std::string> query;           // query parameters, names in openapi_parameters()
    std::vector<std::string> request_media;   // other request media types ("application/x-protobuf")
    std::vector<std::string> response_media;  // other (or, without `response`, the only) 200 media types
    std::string description;                  // longer text, optional
};

// A RouteDoc with the usual fields; the rest are set on the result where needed.
inline RouteDoc route_doc(const std::string & tag, const std::string & summary, const std::string & request,
                          const std::string & response, KeyCheck key = KeyCheck::TINKER) {
    RouteDoc doc;
    doc.tag = tag;
    doc.summary = summary;
    doc.request = request;
    doc.response = response;
    doc.key = key;
    return doc;
}

}  // namespace tinkerd::api
