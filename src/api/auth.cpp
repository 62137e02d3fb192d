// Auth: parsing the --api-keys file and mapping keys to tenants.
#include "api/auth.h"

#include <cctype>
#include <fstream>
#include <sstream>

namespace tinkerd::api {

Result<Auth> Auth::from_file(const std::string & path) {
    std::ifstream in(path);
    if (!in) {
        return invalid_argument("cannot read --api-keys file '" + path + "'");
    }
    std::stringstream text;
    text << in.rdbuf();
    return from_text(text.str());
}

Result<Auth> Auth::from_text(const std::string & text) {
    Auth auth;
    auth.dev_mode_ = false;
    std::istringstream lines(text);
    std::string line;
    int number = 0;
    while (std::getline(lines, line)) {
        ++number;
        std::istringstream words(line);
        std::string key;
        std::string name;
        if (!(words >> key) || key[0] == '#') {
            continue;
        }
        words >> name;
        if (auth.tenants_.count(key)) {
            return invalid_argument("--api-keys line " + std::to_string(number) + ": duplicate key");
        }
        auth.tenants_[key] = name.empty() ? "key-" + std::to_string(number) : name;
    }
    if (auth.tenants_.empty()) {
        return invalid_argument("--api-keys file has no keys");
    }
    return auth;
}

std::optional<std::string> Auth::tenant_of(const std::string & key) const {
    if (dev_mode_) {
        if (key.rfind("tml-", 0) == 0) {
            return std::string(DEV_TENANT);
        }
        return std::nullopt;
    }
    auto it = tenants_.find(key);
    if (it == tenants_.end()) {
        return std::nullopt;
    }
    return it->second;
}

std::string request_key(const std::string & x_api_key, const std::string & authorization) {
    if (!x_api_key.empty()) {
        return x_api_key;
    }
    // "Bearer" is an auth-scheme, matched case-insensitively (RFC 7235 §2.1), then 1*SP and the token.
    const std::string bearer = "bearer";
    if (authorization.size() <= bearer.size() || authorization[bearer.size()] != ' ') {
        return "";
    }
    for (size_t i = 0; i < bearer.size(); ++i) {
        if (std::tolower(static_cast<unsigned char>(authorization[i])) != bearer[i]) {
            return "";
        }
    }
    const size_t begin = authorization.find_first_not_of(' ', bearer.size());
    if (begin == std::string::npos) {
        return "";
    }
    const size_t end = authorization.find_last_not_of(" \t");
    return authorization.substr(begin, end + 1 - begin);
}

}  // namespace tinkerd::api
