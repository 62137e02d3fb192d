// Router: maps (method, path) to a handler. Patterns are "/"-separated segments where "{name}" captures
// one segment and a final "{name...}" captures the rest, slashes included (checkpoint ids such as
// "weights/ckpt-1" keep their slash; run ids such as "sess-1:train:0" keep their colons). Call and
// Route: what every route part (App's Tinker routes, OpenAiRoutes) registers and App::handle dispatches,
// with its RouteDoc (route_doc.h), from which GET /openapi.json is generated (openapi.h).
#pragma once

#include <functional>
#include <map>
#include <optional>
#include <string>
#include <vector>

#include "api/json_util.h"
#include "api/route_doc.h"
#include "common/status.h"
#include "http/server.h"

namespace tinkerd::api {

using PathParams = std::map<std::string, std::string>;

template <typename Target>
class Router {
  public:
    void add(const std::string & method, const std::string & pattern, Target target) {
        routes_.push_back({method, pattern, split(pattern), std::move(target)});
    }

    // Calls visit(method, pattern, target) for every route, in the order they were added.
    template <typename Visit>
    void for_each(Visit visit) const {
        for (const auto & route : routes_) {
            visit(route.method, route.pattern, route.target);
        }
    }

    struct Match {
        const Target * target = nullptr;
        const std::string * pattern = nullptr;  // the matched route's pattern (metrics label it by this)
        PathParams params;
        bool method_mismatch = false;  // some route has this path under another method (405)
    };

    // The first route whose pattern matches, in the order they were added.
    Match match(const std::string & method, const std::string & path) const {
        Match result;
        const auto segments = split(path);
        for (const auto & route : routes_) {
            PathParams params;
            if (!match_segments(route.segments, segments, params)) {
                continue;
            }
            if (route.method != method) {
                result.method_mismatch = true;
                continue;
            }
            result.target = &route.target;
            result.pattern = &route.pattern;
            result.params = std::move(params);
            return result;
        }
        return result;
    }

    static std::vector<std::string> split(const std::string & path) {
        std::vector<std::string> out;
        size_t start = 0;
        while (start <= path.size()) {
            size_t end = path.find('/', start);
            if (end == std::string::npos)
                end = path.size();
            if (end > start)
                out.push_back(path.substr(start, end - start));
            start = end + 1;
        }
        return out;
    }

  private:
    struct Route {
        std::string method;
        std::string pattern;  // as added: "/api/v1/training_runs/{run_id}"
        std::vector<std::string> segments;
        Target target;
    };

    static bool match_segments(const std::vector<std::string> & pattern, const std::vector<std::string> & path,
                               PathParams & params) {
        for (size_t i = 0; i < pattern.size(); ++i) {
            const std::string & p = pattern[i];
            const bool capture = p.size() > 2 && p.front() == '{' && p.back() == '}';
            if (capture && p.size() > 5 && p.compare(p.size() - 4, 4, "...}") == 0) {
                if (i >= path.size())
                    return false;
                std::string rest = path[i];
                for (size_t j = i + 1; j < path.size(); ++j)
                    rest += "/" + path[j];
                params[p.substr(1, p.size() - 5)] = rest;
                return true;
            }
            if (i >= path.size())
                return false;
            if (capture) {
                params[p.substr(1, p.size() - 2)] = path[i];
            } else if (p != path[i]) {
                return false;
            }
        }
        return pattern.size() == path.size();
    }

    std::vector<Route> routes_;
};

// One matched request as its handler sees it.
struct Call {
    const http::Request & req;
    std::string tenant;  // set when the route needs a key
    PathParams params;
    json body;  // parsed JSON body ({} for GET and protobuf bodies)
};

// What a route runs: a handler answering at once (sync) or through `respond` later (async).
struct Route {
    std::function<Result<json>(Call &)> sync;
    std::function<void(Call &, http::Respond)> async;
    bool needs_auth = true;
    bool json_body = true;
    RouteDoc doc;  // what GET /openapi.json says about it; every registered route has one
};

}  // namespace tinkerd::api
