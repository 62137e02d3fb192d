// self_path / spawn_self (test_processes.h): readlink of /proc/self/exe, posix_spawn with the environment.
#include "dist/test_processes.h"

#include <spawn.h>
#include <stdexcept>
#include <unistd.h>

extern char ** environ;

namespace tinkerd::testing {

const std::string & self_path() {
    static const std::string path = [] {
        char buffer[4096];
        const ssize_t n = readlink("/proc/self/exe", buffer, sizeof buffer - 1);
        return n > 0 ? std::string(buffer, static_cast<size_t>(n)) : std::string("/proc/self/exe");
    }();
    return path;
}

pid_t spawn_self(const std::vector<std::string> & args) {
    std::vector<std::string> all = {self_path()};
    all.insert(all.end(), args.begin(), args.end());
    std::vector<char *> argv;
    for (auto & a : all) {
        argv.push_back(a.data());
    }
    argv.push_back(nullptr);
    pid_t pid = 0;
    if (posix_spawn(&pid, self_path().c_str(), nullptr, nullptr, argv.data(), environ) != 0) {
        throw std::runtime_error("posix_spawn of the test binary failed");
    }
    return pid;
}

}  // namespace tinkerd::testing
