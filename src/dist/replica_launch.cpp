// Sampling replica start-up (replica_launch.h): the flags, the replica processes, their groups, and the
// supervisor thread that restarts a replica process that exited.
#include "dist/replica_launch.h"

#include <algorithm>
#include <condition_variable>
#include <csignal>
#include <cstdlib>
#include <mutex>
#include <sys/wait.h>
#include <thread>
#include <unistd.h>

#include "common/log.h"
#include "dist/local_ranks.h"

namespace tinkerd::dist {

namespace {

std::vector<pid_t> g_replicas;  // by index - 1; 0 once reaped (the supervisor restarts it)
std::string g_replica_dir;
std::vector<std::string> g_argv;  // this process's arguments, for restarts

// A fresh store file per process generation: a restarted replica never meets its predecessor's keys.
std::string replica_store(const std::string & dir, int index, int generation) {
    return "file://" + dir + "/replica" + std::to_string(index) + "-" + std::to_string(generation);
}

Result<pid_t> spawn_replica(int index, const std::string & init) {
    std::vector<std::string> args = g_argv;
    args.insert(args.end(), {"--replica-index", std::to_string(index), "--replica-init", init});
    return spawn_copy_of_self(std::move(args), "--sampling-replicas");
}

}  // namespace

Result<std::unique_ptr<DataParallelGroup>> join_replica_pair(const std::string & init, int rank, size_t model_index,
                                                             double timeout_seconds) {
    GroupOptions o;
    o.init = init;
    o.rank = rank;
    o.world_size = 2;
    o.prefix = "model" + std::to_string(model_index);
    o.timeout = std::chrono::milliseconds(static_cast<long long>(timeout_seconds * 1000));
    auto store = GroupStore::open(o);  // the groups keep the store they use alive
    if (!store.ok()) {
        return store.error();
    }
    return DataParallelGroup::join(**store, o);
}

bool parse_replica_flag(const std::string & flag, const std::string & value, ReplicaFlags & flags,
                        std::string & error) {
    if (flag == "--sampling-replicas") {
        flags.count = std::atoi(value.c_str());
        if (flags.count < 0 || flags.count > 64) {
            error = "error: --sampling-replicas must be 0-64";
        }
    } else if (flag == "--replica-index") {
        flags.index = std::atoi(value.c_str());
        if (flags.index < 1) {
            error = "error: --replica-index must be >= 1";
        }
    } else if (flag == "--replica-init") {
        flags.init = value;
        if (flags.init.rfind("file://", 0) != 0) {
            error = "error: --replica-init must be file://PATH";
        }
    } else {
        return false;
    }
    return true;
}

Result<void> start_sampling_replicas(int argc, char ** argv, const ReplicaFlags & flags) {
    char dir_template[] = "/tmp/tinkerd-replicas-XXXXXX";
    if (!mkdtemp(dir_template)) {
        return internal_error("--sampling-replicas: cannot make a temporary directory for the replicas' stores");
    }
    g_replica_dir = dir_template;
    g_argv.assign(argv, argv + argc);
    for (int r = 1; r <= flags.count; ++r) {
        auto pid = spawn_replica(r, replica_store(g_replica_dir, r, 0));
        if (!pid.ok()) {
            return pid.error();
        }
        g_replicas.push_back(*pid);
    }
    LOG_INF("dist", "--sampling-replicas %d: started %d sampling replica process(es)", flags.count, flags.count);
    return {};
}

Result<std::vector<std::vector<std::unique_ptr<SamplingReplicaEngine>>>> join_sampling_replicas(
    const EngineList & engines, const ReplicaFlags & flags, double timeout_seconds) {
    std::vector<std::vector<std::unique_ptr<SamplingReplicaEngine>>> replicas(engines.size());
    for (int r = 1; r <= flags.count; ++r) {
        for (size_t i = 0; i < engines.size(); ++i) {
            auto pair = join_replica_pair(replica_store(g_replica_dir, r, 0), 0, i, timeout_seconds);
            if (!pair.ok()) {
                return internal_error("sampling replica " + std::to_string(r) + ": " + pair.error().message);
            }
            replicas[i].push_back(std::make_unique<SamplingReplicaEngine>(*engines[i], std::move(pair).value(), r));
        }
        LOG_INF("dist", "sampling replica %d ready (%zu model(s))", r, engines.size());
    }
    return replicas;
}

namespace {

// The supervisor: every half second it reaps replica processes that exited and starts each again with a
// fresh store, joins its groups (one per model, with the collective timeout, while the model loads) and
// offers them to that replica's engines; a failed restart is tried again 10 s later.
struct Supervisor {
    std::vector<std::vector<SamplingReplicaEngine *>> engines;  // [replica index - 1][model]
    std::vector<int> generation;                                // [replica index - 1]
    double timeout_seconds = 300;
    std::mutex mu;
    std::condition_variable wake;
    bool stopping = false;
    std::thread thread;
};
Supervisor g_supervisor;

bool restart_replica(size_t r) {
    Supervisor & s = g_supervisor;
    const int index = static_cast<int>(r) + 1;
    const std::string init = replica_store(g_replica_dir, index, ++s.generation[r]);
    auto pid = spawn_replica(index, init);
    if (!pid.ok()) {
        LOG_ERR("dist", "sampling replica %d: %s", index, pid.error().message.c_str());
        return false;
    }
    g_replicas[r] = *pid;
    std::vector<std::unique_ptr<DataParallelGroup>> groups;
    for (size_t i = 0; i < s.engines[r].size(); ++i) {
        auto pair = join_replica_pair(init, 0, i, s.timeout_seconds);
        if (!pair.ok()) {
            LOG_ERR("dist", "sampling replica %d did not come back: %s", index, pair.error().message.c_str());
            kill(*pid, SIGKILL);  // reaped by the next round, which tries again
            return false;
        }
        groups.push_back(std::move(pair).value());
    }
    std::lock_guard lock(s.mu);
    for (size_t i = 0; i < groups.size() && !s.stopping; ++i) {
        s.engines[r][i]->offer_group(std::move(groups[i]));
    }
    LOG_INF("dist", "sampling replica %d restarted (process %d)", index, static_cast<int>(*pid));
    return true;
}

void supervise() {
    Supervisor & s = g_supervisor;
    using Clock = std::chrono::steady_clock;
    std::vector<Clock::time_point> next_try(g_replicas.size());
    std::vector<Clock::time_point> started(g_replicas.size(), Clock::now());
    std::vector<std::chrono::seconds> pause(g_replicas.size(), std::chrono::seconds(1));
    std::unique_lock lock(s.mu);
    while (!s.stopping) {
        s.wake.wait_for(lock, std::chrono::milliseconds(500));
        for (size_t r = 0; r < g_replicas.size() && !s.stopping; ++r) {
            int status = 0;
            if (g_replicas[r] > 0 && waitpid(g_replicas[r], &status, WNOHANG) == g_replicas[r]) {
                LOG_WRN("dist", "sampling replica %zu exited (%s %d); starting it again", r + 1,
                        WIFSIGNALED(status) ? "signal" : "status",
                        WIFSIGNALED(status) ? WTERMSIG(status) : WEXITSTATUS(status));
                g_replicas[r] = 0;
            }
            if (g_replicas[r] == 0 && Clock::now() >= next_try[r]) {
                // One that keeps dying within a minute of its start waits longer each time (1 s .. 64 s).
                pause[r] = Clock::now() - started[r] < std::chrono::minutes(1)
                               ? std::min(pause[r] * 2, std::chrono::seconds(64))
                               : std::chrono::seconds(1);
                lock.unlock();
                const bool restarted = restart_replica(r);
                lock.lock();
                started[r] = Clock::now();
                next_try[r] = Clock::now() + (restarted ? pause[r] : std::chrono::seconds(10));
            }
        }
    }
}

}  // namespace

void supervise_sampling_replicas(const std::vector<std::vector<std::unique_ptr<SamplingReplicaEngine>>> & replicas,
                                 double timeout_seconds) {
    Supervisor & s = g_supervisor;
    s.engines.assign(g_replicas.size(), {});
    s.generation.assign(g_replicas.size(), 0);
    s.timeout_seconds = timeout_seconds;
    for (const auto & per_model : replicas) {
        for (size_t r = 0; r < per_model.size() && r < s.engines.size(); ++r) {
            s.engines[r].push_back(per_model[r].get());
        }
    }
    s.thread = std::thread(supervise);
}

void stop_supervising_sampling_replicas() {
    {
        std::lock_guard lock(g_supervisor.mu);
        g_supervisor.stopping = true;
    }
    g_supervisor.wake.notify_all();
    if (g_supervisor.thread.joinable()) {
        g_supervisor.thread.join();
    }
}

void reap_sampling_replicas() {
    for (int tries = 0; tries < 50 && !g_replicas.empty(); ++tries) {
        std::erase_if(g_replicas, [](pid_t pid) { return pid <= 0 || waitpid(pid, nullptr, WNOHANG) != 0; });
        if (!g_replicas.empty()) {
            usleep(100000);
        }
    }
    for (pid_t pid : g_replicas) {
        if (pid > 0) {
            kill(pid, SIGKILL);
            waitpid(pid, nullptr, 0);
        }
    }
    g_replicas.clear();
    if (!g_replica_dir.empty()) {
        std::system(("rm -rf '" + g_replica_dir + "'").c_str());
        g_replica_dir.clear();
    }
}

int run_replica_process(EngineList & engines, const std::vector<StopCheckFactory> & stops, const ReplicaFlags & flags,
                        double timeout_seconds) {
    std::vector<std::thread> loops;
    for (size_t i = 0; i < engines.size(); ++i) {
        loops.emplace_back([&, i] {
            auto pair = join_replica_pair(flags.init, 1, i, timeout_seconds);
            auto status = pair.ok() ? run_sampling_replica(*engines[i], **pair, stops[i]) : Result<void>(pair.error());
            if (!status.ok()) {  // the whole process goes, so that rank 0's supervisor starts it again
                LOG_ERR("dist", "sampling replica %d, model %zu: %s; exiting", flags.index, i,
                        status.error().message.c_str());
                std::_Exit(1);
            }
        });
    }
    for (auto & t : loops) {
        t.join();
    }
    LOG_INF("dist", "sampling replica %d: done", flags.index);
    return 0;
}

int local_process_count(const DistFlags & dist, const ReplicaFlags & replicas) {
    return std::max(dist.dp, 1) + replicas.count;
}

int local_process_slot(const DistFlags & dist, const ReplicaFlags & replicas) {
    return replicas.replica() ? std::max(dist.dp, 1) + replicas.index - 1 : dist.rank;
}

}  // namespace tinkerd::dist
