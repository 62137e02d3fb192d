// Internal to src/http: splits a request target ("/a%3Ab/c?x=1&y=a+b") into a percent-decoded path
// and percent-decoded query parameters. Free of Beast so it is cheap to include and to test.
#pragma once

#include <map>
#include <string>

namespace tinkerd::http {

// Path: percent-decoded ('+' kept, "%2F" becomes '/'). Query: names and values percent-decoded with
// '+' as a space. A fragment is dropped; an absolute-form target ("http://host/p") keeps only "/p".
void parse_target(const std::string & target, std::string & path, std::map<std::string, std::string> & query);

}  // namespace tinkerd::http
