// Follower processes of --dp (local_ranks.h): fork + exec, a supervisor thread that restarts an exited
// rank (after a pause that doubles while it keeps dying young), and the reaping at shutdown.
#include "dist/local_ranks.h"

#include <algorithm>
#include <chrono>
#include <condition_variable>
#include <csignal>
#include <mutex>
#include <sys/prctl.h>
#include <sys/wait.h>
#include <thread>
#include <unistd.h>

#include "common/log.h"
#include "dist/launch.h"

namespace tinkerd::dist {

namespace {

using Clock = std::chrono::steady_clock;

struct LocalRank {
    int rank = 0;
    std::vector<std::string> argv;
    pid_t pid = -1;  // -1: to restart at restart_at; 0: exited cleanly, not restarted
    Clock::time_point started;
    Clock::time_point restart_at;
    std::chrono::milliseconds pause{500};  // before a restart; doubles while the rank dies within a minute
};

std::mutex g_mutex;
std::condition_variable g_wake;
std::vector<LocalRank> g_ranks;
bool g_stopping = false;
std::thread g_supervisor;

// Forks and execs this binary; the child dies with the thread that started it. Everything the child
// touches is prepared before the fork (other threads may hold the allocator's locks).
pid_t spawn(const std::vector<std::string> & argv) {
    std::vector<std::string> copy = argv;
    std::vector<char *> cargs;
    for (auto & a : copy) {
        cargs.push_back(a.data());
    }
    cargs.push_back(nullptr);
    const pid_t parent = getpid();
    const pid_t pid = fork();
    if (pid == 0) {
        prctl(PR_SET_PDEATHSIG, SIGKILL);  // no orphans: a follower dies with rank 0
        if (getppid() != parent) {
            _exit(1);
        }
        sigset_t none;
        sigemptyset(&none);
        sigprocmask(SIG_SETMASK, &none, nullptr);
        restore_unpinned_affinity();  // a child of a pinned thread must pick its own share
        close_range(3, ~0U, 0);       // Gloo's sockets have no CLOEXEC: a child must not keep peers' links open
        execv("/proc/self/exe", cargs.data());
        _exit(127);
    }
    return pid;
}

std::string exit_reason(int status) {
    return WIFSIGNALED(status) ? "signal " + std::to_string(WTERMSIG(status))
                               : "exit code " + std::to_string(WEXITSTATUS(status));
}

// With g_mutex held: restarts the ranks that exited, once their pause is over.
void supervise_locked() {
    for (LocalRank & r : g_ranks) {
        int status = 0;
        if (r.pid > 0 && waitpid(r.pid, &status, WNOHANG) == r.pid) {
            if (WIFEXITED(status) && WEXITSTATUS(status) == 0) {  // told to stop (rank 0 is shutting down)
                r.pid = 0;
                continue;
            }
            LOG_WRN("dist", "rank %d (pid %d) exited (%s); restarting it", r.rank, static_cast<int>(r.pid),
                    exit_reason(status).c_str());
            const bool young = Clock::now() - r.started < std::chrono::minutes(1);
            r.pause = young ? r.pause : std::chrono::milliseconds(500);
            r.restart_at = Clock::now() + r.pause;
            r.pause = std::min(r.pause * 2, std::chrono::milliseconds(32000));
            r.pid = -1;
        }
        if (r.pid < 0 && Clock::now() >= r.restart_at) {
            r.pid = spawn(r.argv);
            r.started = Clock::now();
            LOG_INF("dist", "rank %d restarted (pid %d)", r.rank, static_cast<int>(r.pid));
        }
    }
}

}  // namespace

Result<pid_t> spawn_copy_of_self(const std::vector<std::string> & argv, const std::string & what) {
    const pid_t pid = spawn(argv);
    if (pid < 0) {
        return internal_error(what + ": fork failed");
    }
    return pid;
}

Result<void> start_local_ranks(const std::vector<std::vector<std::string>> & argv_per_rank) {
    std::lock_guard lock(g_mutex);
    for (size_t k = 0; k < argv_per_rank.size(); ++k) {
        LocalRank r{static_cast<int>(k) + 1, argv_per_rank[k], spawn(argv_per_rank[k]), Clock::now(), {}};
        if (r.pid < 0) {
            return internal_error("--dp: fork failed");
        }
        g_ranks.push_back(std::move(r));
    }
    g_supervisor = std::thread([] {
        std::unique_lock lock(g_mutex);
        while (!g_stopping) {
            g_wake.wait_for(lock, std::chrono::milliseconds(250));
            if (!g_stopping) {
                supervise_locked();
            }
        }
    });
    return {};
}

void stop_local_ranks() {
    {
        std::lock_guard lock(g_mutex);
        g_stopping = true;
    }
    // The supervisor thread stays until the followers are gone: the ones it restarted die with it.
    std::vector<pid_t> pids;
    for (const LocalRank & r : g_ranks) {
        if (r.pid > 0) {
            pids.push_back(r.pid);
        }
    }
    for (int tries = 0; tries < 50 && !pids.empty(); ++tries) {
        std::erase_if(pids, [](pid_t pid) { return waitpid(pid, nullptr, WNOHANG) != 0; });
        if (!pids.empty()) {
            usleep(100000);
        }
    }
    for (pid_t pid : pids) {
        kill(pid, SIGKILL);
        waitpid(pid, nullptr, 0);
    }
    g_wake.notify_all();
    if (g_supervisor.joinable()) {
        g_supervisor.join();
    }
    g_ranks.clear();
}

}  // namespace tinkerd::dist
