// The data-directory redaction of client-facing messages (see redact.h).
#include "common/redact.h"

#include <filesystem>
#include <vector>

namespace tinkerd {

namespace {

std::vector<std::string> & redacted() {
    static std::vector<std::string> prefixes;
    return prefixes;
}

void replace_all(std::string & text, const std::string & from, const std::string & to) {
    for (size_t at = text.find(from); at != std::string::npos; at = text.find(from, at + to.size())) {
        text.replace(at, from.size(), to);
    }
}

}  // namespace

void set_redacted_data_dir(const std::string & data_dir) {
    std::error_code ec;
    std::string absolute = std::filesystem::weakly_canonical(std::filesystem::absolute(data_dir, ec), ec).string();
    auto & prefixes = redacted();
    prefixes.clear();
    for (std::string path : {absolute, data_dir}) {
        while (path.size() > 1 && path.back() == '/') {
            path.pop_back();
        }
        if (path.size() > 1) {  // never "/" or "": that would mangle every message
            prefixes.push_back(path);
        }
    }
}

std::string redact_paths(std::string message) {
    for (const auto & prefix : redacted()) {
        replace_all(message, prefix, "DATA_DIR");
    }
    return message;
}

}  // namespace tinkerd
