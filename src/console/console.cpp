// Serving the embedded console files: lookup by name, ETag revalidation, caching and security headers.
// The page loads only its own scripts and styles (CSP 'self', no inline code), so a server string that
// reached the DOM as markup could not run script even if a view forgot to escape it.
#include "console/console.h"

#include <algorithm>

#include <nlohmann/json.hpp>

namespace tinkerd::console {

namespace {

constexpr const char * CONTENT_SECURITY_POLICY =
    "default-src 'none'; script-src 'self'; style-src 'self'; img-src 'self' data:; connect-src 'self'; "
    "form-action 'none'; base-uri 'none'; frame-ancestors 'none'";

// Does an If-None-Match header ("\"a\", W/\"b\"" or "*") name this ETag?
bool etag_matches(const std::string & if_none_match, std::string_view etag) {
    if (if_none_match.empty()) {
        return false;
    }
    if (if_none_match.find('*') != std::string::npos) {
        return true;
    }
    return if_none_match.find(etag) != std::string::npos;
}

http::Response not_found(const std::string & name) {
    const nlohmann::json body = {{"detail", "console asset '" + name + "' not found"}, {"code", "not_found"}};
    return http::Response::json(404, body.dump(-1, ' ', false, nlohmann::json::error_handler_t::replace));
}

}  // namespace

const Asset * find_asset(std::string_view name) {
    if (name.empty() || name.find('/') != std::string_view::npos) {
        return nullptr;
    }
    const auto & table = assets();
    auto it = std::find_if(table.begin(), table.end(), [&](const Asset & a) { return a.name == name; });
    return it == table.end() ? nullptr : &*it;
}

http::Response asset_response(const std::string & name, const std::string & if_none_match) {
    const Asset * asset = find_asset(name);
    if (asset == nullptr) {
        return not_found(name);
    }
    http::Response response;
    response.content_type = std::string(asset->content_type);
    response.headers.emplace_back("ETag", std::string(asset->etag));
    // Revalidate every time: a new binary serves new files at the same names, and a 304 costs no body.
    response.headers.emplace_back("Cache-Control", "no-cache");
    response.headers.emplace_back("X-Content-Type-Options", "nosniff");
    if (asset->content_type.rfind("text/html", 0) == 0) {
        response.headers.emplace_back("Content-Security-Policy", CONTENT_SECURITY_POLICY);
        response.headers.emplace_back("Referrer-Policy", "no-referrer");
    }
    if (etag_matches(if_none_match, asset->etag)) {
        response.status = 304;
        return response;
    }
    response.body = std::string(asset->body);
    return response;
}

http::Response page_response(const std::string & if_none_match) {
    return asset_response("index.html", if_none_match);
}

}  // namespace tinkerd::console
