// The named pieces GET /openapi.json refers to: components.schemas (JSON Schema 2020-12; the Tinker
// bodies in openapi_schemas_tinker.cpp, the OpenAI ones in openapi_schemas_openai.cpp, the console
// contract's in openapi_schemas_console.cpp) and components.parameters (the query parameters a RouteDoc
// names). Parsed once from their text; a text that does not parse is a bug the unit test reports.
#pragma once

#include <string>
#include <vector>

#include "api/json_util.h"
#include "api/route_doc.h"

namespace tinkerd::api {

// Every named schema; {"$invalid": [...]} lists texts that failed to parse (openapi_problems reports it).
const json & openapi_schemas();
// The query parameters by name: limit, offset, access_scope, since_step.
const json & openapi_parameters();

// The RouteDoc of one route of the console data contract (issue 14), by "METHOD /pattern" (e.g.
// "GET /api/v1/server_status"), so the routes added on other branches get theirs at merge. An unknown
// name gets a RouteDoc without a summary, which openapi_problems reports.
RouteDoc console_route_doc(const std::string & method_and_pattern);

namespace detail {
// Each a JSON object text: schema name -> schema.
std::vector<const char *> tinker_schema_texts();
std::vector<const char *> openai_schema_texts();
std::vector<const char *> console_schema_texts();
}  // namespace detail

}  // namespace tinkerd::api
