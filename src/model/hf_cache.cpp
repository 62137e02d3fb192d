// Resolving ORG/NAME to a snapshot directory of the local Hugging Face hub cache (no network).
#include "model/hf_cache.h"

#include <cstdlib>
#include <filesystem>
#include <fstream>
#include <vector>

namespace tinkerd::model {

namespace fs = std::filesystem;

std::string hf_hub_cache_dir() {
    if (const char * hub = std::getenv("HF_HUB_CACHE"); hub != nullptr && *hub != '\0') {
        return hub;
    }
    if (const char * home = std::getenv("HF_HOME"); home != nullptr && *home != '\0') {
        return std::string(home) + "/hub";
    }
    const char * user_home = std::getenv("HOME");
    return std::string(user_home != nullptr ? user_home : ".") + "/.cache/huggingface/hub";
}

static std::string read_first_line(const fs::path & path) {
    std::ifstream in(path);
    std::string line;
    std::getline(in, line);
    while (!line.empty() && (line.back() == '\n' || line.back() == '\r' || line.back() == ' ')) {
        line.pop_back();
    }
    return line;
}

Result<std::string> resolve_hf_snapshot(const std::string & cache_dir, const std::string & repo_id) {
    const auto slash = repo_id.find('/');
    if (slash == std::string::npos || slash == 0 || slash + 1 == repo_id.size() ||
        repo_id.find('/', slash + 1) != std::string::npos) {
        return invalid_argument("model '" + repo_id + "' is neither NAME=DIR nor ORG/NAME");
    }
    const fs::path repo_dir =
        fs::path(cache_dir) / ("models--" + repo_id.substr(0, slash) + "--" + repo_id.substr(slash + 1));
    const fs::path snapshots = repo_dir / "snapshots";
    std::error_code ec;
    if (!fs::is_directory(snapshots, ec)) {
        return not_found("model '" + repo_id + "' is not in the Hugging Face cache (looked in " + snapshots.string() +
                         "); download it there or pass --model NAME=DIR");
    }
    const std::string ref = read_first_line(repo_dir / "refs" / "main");
    if (!ref.empty() && fs::exists(snapshots / ref / "config.json", ec)) {
        return (snapshots / ref).string();
    }
    std::vector<fs::path> candidates;
    for (const auto & entry : fs::directory_iterator(snapshots, ec)) {
        if (fs::exists(entry.path() / "config.json", ec)) {
            candidates.push_back(entry.path());
        }
    }
    if (candidates.size() != 1) {
        return not_found("model '" + repo_id + "': " + std::to_string(candidates.size()) +
                         " snapshots with a config.json in " + snapshots.string() +
                         " and no usable refs/main; pass --model NAME=DIR");
    }
    return candidates[0].string();
}

}  // namespace tinkerd::model
