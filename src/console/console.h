// The web console's files as the binary carries them (assets(), generated from web/ by embed_assets.cmake)
// and the HTTP responses that serve them: GET / is index.html, GET /console/<name> any other file, with
// its Content-Type, an ETag (304 on If-None-Match), no-cache revalidation and a strict CSP; 404 JSON else.
#pragma once

#include <string>
#include <string_view>
#include <vector>

#include "http/server.h"

namespace tinkerd::console {

struct Asset {
    std::string_view name;          // file name under web/, e.g. "app.js"
    std::string_view content_type;  // "text/javascript; charset=utf-8"
    std::string_view body;          // the file's bytes
    std::string_view etag;          // quoted: "\"<first 20 hex digits of its SHA-1>\""
};

// Every embedded file, sorted by name (generated code).
const std::vector<Asset> & assets();

// The asset named `name` (no directories: "a/b" and ".." are never found), or nullptr.
const Asset * find_asset(std::string_view name);

// The response for GET /console/<name>: the asset (200, or 304 when `if_none_match` lists its ETag), or a
// 404 JSON body {"detail": ..., "code": "not_found"} naming the asset.
http::Response asset_response(const std::string & name, const std::string & if_none_match);

// The response for GET /: the console page itself.
http::Response page_response(const std::string & if_none_match);

}  // namespace tinkerd::console
