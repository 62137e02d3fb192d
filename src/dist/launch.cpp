// Data-parallel start-up (launch.h): flags, spawning followers, joining groups.
#include "dist/launch.h"

#include <csignal>
#include <cstdlib>
#include <sched.h>
#include <sys/prctl.h>
#include <sys/wait.h>
#include <thread>
#include <unistd.h>

#include "common/log.h"
#include "dist/distributed_engine.h"
#include "dist/process_group.h"

namespace tinkerd::dist {

namespace {

std::vector<pid_t> g_followers;
std::string g_store_dir;

GroupOptions group_options(const DistFlags & flags, size_t model_index) {
    GroupOptions o;
    o.init = flags.init;
    o.rank = flags.rank;
    o.world_size = flags.world_size;
    o.prefix = "model" + std::to_string(model_index);
    o.timeout = std::chrono::milliseconds(static_cast<long long>(flags.timeout_seconds * 1000));
    return o;
}

}  // namespace

bool parse_dist_flag(const std::string & flag, const std::string & value, DistFlags & flags, std::string & error) {
    if (flag == "--dp") {
        flags.dp = std::atoi(value.c_str());
    } else if (flag == "--dist-init") {
        flags.init = value;
    } else if (flag == "--rank") {
        flags.rank = std::atoi(value.c_str());
    } else if (flag == "--world-size") {
        flags.world_size = std::atoi(value.c_str());
    } else if (flag == "--dist-timeout-seconds") {
        flags.timeout_seconds = std::atof(value.c_str());
    } else {
        return false;
    }
    if (flags.dp < 1 || flags.dp > 256 || flags.world_size < 1 || flags.rank < 0 || !(flags.timeout_seconds > 0)) {
        error = "error: --dp and --world-size must be 1-256, --rank >= 0, --dist-timeout-seconds > 0";
    }
    return true;
}

Result<void> finish_dist_flags(DistFlags & flags) {
    if (flags.dp > 1 && flags.rank == 0 && flags.init.empty()) {
        flags.world_size = flags.dp;  // the store path is made when the followers are started
        return {};
    }
    if (flags.dp > 1 && flags.rank == 0) {
        return invalid_argument(
            "--dp starts its own group on this machine; use --dist-init/--rank/--world-size "
            "for a group over several machines");
    }
    if (!flags.init.empty() && flags.init.rfind("tcp://", 0) != 0 && flags.init.rfind("file://", 0) != 0) {
        return invalid_argument("--dist-init must be tcp://HOST:PORT (or file://PATH on one machine), got '" +
                                flags.init + "'");
    }
    if (flags.world_size > 1 && flags.init.empty()) {
        return invalid_argument("--world-size > 1 needs --dist-init tcp://HOST:PORT");
    }
    if (flags.rank >= std::max(flags.world_size, 1) && flags.rank > 0) {
        return invalid_argument("--rank must be below --world-size");
    }
    return {};
}

Result<pid_t> spawn_copy_of_self(std::vector<std::string> args, const std::string & what) {
    const pid_t parent = getpid();
    const pid_t pid = fork();
    if (pid == 0) {
        prctl(PR_SET_PDEATHSIG, SIGKILL);  // no orphans: the copy dies with this process
        if (getppid() != parent) {
            _exit(1);
        }
        sigset_t none;
        sigemptyset(&none);
        sigprocmask(SIG_SETMASK, &none, nullptr);
        std::vector<char *> cargs;
        for (auto & a : args) {
            cargs.push_back(a.data());
        }
        cargs.push_back(nullptr);
        execv("/proc/self/exe", cargs.data());
        _exit(127);
    }
    if (pid < 0) {
        return internal_error(what + ": fork failed");
    }
    return pid;
}

Result<void> start_local_followers(int argc, char ** argv, DistFlags & flags) {
    char dir_template[] = "/tmp/tinkerd-dp-XXXXXX";
    if (!mkdtemp(dir_template)) {
        return internal_error("--dp: cannot make a temporary directory for the process group's store");
    }
    g_store_dir = dir_template;
    flags.init = "file://" + g_store_dir + "/store";
    flags.world_size = flags.dp;
    for (int r = 1; r < flags.dp; ++r) {
        std::vector<std::string> args(argv, argv + argc);
        for (const char * extra : {"--rank", "", "--dist-init", "", "--world-size", ""}) {
            args.emplace_back(extra);
        }
        args[args.size() - 5] = std::to_string(r);
        args[args.size() - 3] = flags.init;
        args[args.size() - 1] = std::to_string(flags.dp);
        auto pid = spawn_copy_of_self(std::move(args), "--dp");
        if (!pid.ok()) {
            return pid.error();
        }
        g_followers.push_back(*pid);
    }
    LOG_INF("dist", "--dp %d: started %d follower process(es), store %s", flags.dp, flags.dp - 1, flags.init.c_str());
    return {};
}

void reap_local_followers() {
    for (int tries = 0; tries < 50 && !g_followers.empty(); ++tries) {
        std::erase_if(g_followers, [](pid_t pid) { return waitpid(pid, nullptr, WNOHANG) != 0; });
        if (!g_followers.empty()) {
            usleep(100000);
        }
    }
    for (pid_t pid : g_followers) {
        kill(pid, SIGKILL);
        waitpid(pid, nullptr, 0);
    }
    g_followers.clear();
    if (!g_store_dir.empty()) {
        std::system(("rm -rf '" + g_store_dir + "'").c_str());
    }
}

void pin_to_slot(int slot, int slots) {
    cpu_set_t allowed;
    if (slots <= 1 || sched_getaffinity(0, sizeof allowed, &allowed) != 0) {
        return;
    }
    std::vector<int> cores;
    for (int c = 0; c < CPU_SETSIZE; ++c) {
        if (CPU_ISSET(c, &allowed)) {
            cores.push_back(c);
        }
    }
    const size_t share = cores.size() / static_cast<size_t>(slots);
    if (share == 0) {
        return;
    }
    cpu_set_t mine;
    CPU_ZERO(&mine);
    const size_t first = static_cast<size_t>(slot) * share;
    for (size_t k = first; k < first + share && k < cores.size(); ++k) {
        CPU_SET(cores[k], &mine);
    }
    if (sched_setaffinity(0, sizeof mine, &mine) == 0) {
        LOG_INF("dist", "process %d of %d on this machine pinned to %zu core(s) from core %d", slot, slots, share,
                cores[first]);
    }
}

int threads_per_process(int threads, int local_processes) {
    if (threads > 0 || local_processes <= 1) {
        return threads;
    }
    const unsigned cores = std::max(1u, std::thread::hardware_concurrency());
    return std::max(1, static_cast<int>(cores) / local_processes);
}

Result<void> wrap_engines(EngineList & engines, const DistFlags & flags) {
    for (size_t i = 0; i < engines.size(); ++i) {
        auto group = DataParallelGroup::join(group_options(flags, i));
        if (!group.ok()) {
            return group.error();
        }
        engines[i] = std::make_unique<DistributedEngine>(std::move(engines[i]), std::move(group).value());
    }
    return {};
}

int run_follower_process(EngineList & engines, const DistFlags & flags) {
    std::vector<std::thread> loops;
    std::vector<int> codes(engines.size(), 0);
    for (size_t i = 0; i < engines.size(); ++i) {
        loops.emplace_back([&, i] {
            auto group = DataParallelGroup::join(group_options(flags, i));
            auto status = group.ok() ? run_follower(*engines[i], **group) : Result<void>(group.error());
            if (!status.ok()) {
                LOG_ERR("dist", "rank %d, model %zu: %s", flags.rank, i, status.error().message.c_str());
                codes[i] = 1;
            }
        });
    }
    for (auto & t : loops) {
        t.join();
    }
    LOG_INF("dist", "rank %d: done", flags.rank);
    return *std::max_element(codes.begin(), codes.end());
}

}  // namespace tinkerd::dist
