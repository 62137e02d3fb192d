// The embedded console: every file is served with the Content-Type of its extension, an ETag and a 304
// on revalidation; the page is index.html under a strict CSP; unknown names and paths with directories
// are 404 JSON; every file the page and scripts reference is embedded; no script writes markup.
#include "console/console.h"

#include <map>
#include <regex>
#include <set>

#include <gtest/gtest.h>
#include <nlohmann/json.hpp>

namespace tinkerd::console {
namespace {

std::string header(const http::Response & r, const std::string & name) {
    for (const auto & [key, value] : r.headers) {
        if (key == name) {
            return value;
        }
    }
    return "";
}

std::string expected_type(std::string_view name) {
    static const std::map<std::string, std::string> types = {{"html", "text/html; charset=utf-8"},
                                                             {"css", "text/css; charset=utf-8"},
                                                             {"js", "text/javascript; charset=utf-8"},
                                                             {"svg", "image/svg+xml"},
                                                             {"png", "image/png"}};
    const auto ext = std::string(name.substr(name.rfind('.') + 1));
    auto it = types.find(ext);
    return it == types.end() ? "(unexpected extension ." + ext + ")" : it->second;
}

TEST(Console, EveryAssetServedWithItsTypeAndEtag) {
    ASSERT_GE(assets().size(), 5u) << "the page, its styles and its scripts";
    for (const Asset & asset : assets()) {
        const auto r = asset_response(std::string(asset.name), "");
        EXPECT_EQ(r.status, 200) << asset.name;
        EXPECT_EQ(r.content_type, expected_type(asset.name)) << asset.name;
        EXPECT_EQ(r.body, asset.body) << asset.name;
        EXPECT_FALSE(r.body.empty()) << asset.name;
        EXPECT_EQ(header(r, "ETag"), asset.etag) << asset.name;
        EXPECT_EQ(header(r, "Cache-Control"), "no-cache") << asset.name;
        EXPECT_EQ(header(r, "X-Content-Type-Options"), "nosniff") << asset.name;
    }
}

TEST(Console, RevalidationAnswers304WithoutBody) {
    const Asset * app = find_asset("app.js");
    ASSERT_NE(app, nullptr);
    const auto same = asset_response("app.js", "W/\"x\", " + std::string(app->etag));
    EXPECT_EQ(same.status, 304);
    EXPECT_TRUE(same.body.empty());
    EXPECT_EQ(asset_response("app.js", "\"0000\"").status, 200);
}

TEST(Console, PageIsIndexHtmlUnderStrictCsp) {
    const auto page = page_response("");
    EXPECT_EQ(page.status, 200);
    EXPECT_EQ(page.content_type, "text/html; charset=utf-8");
    EXPECT_NE(page.body.find("<!doctype html>"), std::string::npos);
    const std::string csp = header(page, "Content-Security-Policy");
    EXPECT_NE(csp.find("script-src 'self'"), std::string::npos) << csp;
    EXPECT_EQ(csp.find("unsafe-inline"), std::string::npos) << csp;
}

TEST(Console, UnknownAssetsAre404Json) {
    for (const std::string name : {"nope.js", "../index.html", "a/app.js", "", "index.html/"}) {
        const auto r = asset_response(name, "");
        EXPECT_EQ(r.status, 404) << name;
        EXPECT_EQ(r.content_type, "application/json") << name;
        const auto body = nlohmann::json::parse(r.body);
        EXPECT_EQ(body["code"], "not_found") << name;
        EXPECT_NE(body["detail"].get<std::string>().find("not found"), std::string::npos) << name;
    }
}

// Every /console/<name> the page links and every module a script imports is embedded.
TEST(Console, ReferencedFilesAreEmbedded) {
    const std::regex page_ref(R"re((?:src|href)="/console/([^"]+)")re");
    const std::regex import_ref(R"re(from "\./([^"]+)")re");
    std::set<std::string> referenced;
    for (const Asset & asset : assets()) {
        const std::string text(asset.body);
        for (const auto * re : {&page_ref, &import_ref}) {
            for (std::sregex_iterator it(text.begin(), text.end(), *re), end; it != end; ++it) {
                referenced.insert((*it)[1].str());
            }
        }
    }
    EXPECT_GE(referenced.size(), 4u);
    for (const auto & name : referenced) {
        EXPECT_NE(find_asset(name), nullptr) << name << " is referenced but not embedded";
    }
}

// Server strings reach the DOM as text only: no script assigns markup or evaluates strings.
TEST(Console, ScriptsNeverWriteMarkup) {
    for (const Asset & asset : assets()) {
        if (expected_type(asset.name).rfind("text/javascript", 0) != 0) {
            continue;
        }
        const std::string text(asset.body);
        for (const char * banned : {"innerHTML", "outerHTML", "insertAdjacentHTML", "document.write", "eval("}) {
            EXPECT_EQ(text.find(banned), std::string::npos) << asset.name << " uses " << banned;
        }
    }
}

}  // namespace
}  // namespace tinkerd::console
