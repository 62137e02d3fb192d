// Sampling replica start-up (replica_launch.h): the replica processes under a process::ChildSupervisor,
// their groups, and what a restart does (join the new process's groups and offer them to its engines).
#include "dist/replica_launch.h"

#include <algorithm>
#include <cstdlib>
#include <thread>

#include "common/log.h"
#include "process/supervisor.h"

namespace tinkerd::dist {

namespace {

std::string g_replica_dir;
std::vector<std::string> g_argv;  // this process's arguments, for the replicas' command lines
std::unique_ptr<process::ChildSupervisor> g_supervisor;
// Set by supervise_sampling_replicas, read by restarts: [replica index - 1][model], the collective timeout.
std::vector<std::vector<SamplingReplicaEngine *>> g_engines;
double g_timeout_seconds = 300;

// A fresh store file per process generation: a restarted replica never meets its predecessor's keys.
std::string replica_store(const std::string & dir, int index, int generation) {
    return "file://" + dir + "/replica" + std::to_string(index) + "-" + std::to_string(generation);
}

std::vector<std::string> replica_argv(int index, int generation) {
    std::vector<std::string> args = g_argv;
    args.insert(args.end(), {"--replica-index", std::to_string(index), "--replica-init",
                             replica_store(g_replica_dir, index, generation)});
    return args;
}

// A restarted replica process: joins its groups (one per model, with the collective timeout, while it loads
// the models) and offers them to that replica's engines. false: it did not come back.
bool connect_restarted_replica(int index, int generation) {
    const std::string init = replica_store(g_replica_dir, index, generation);
    const auto & engines = g_engines[static_cast<size_t>(index - 1)];
    std::vector<std::unique_ptr<DataParallelGroup>> groups;
    for (size_t i = 0; i < engines.size(); ++i) {
        auto pair = join_replica_pair(init, 0, i, g_timeout_seconds);
        if (!pair.ok()) {
            LOG_ERR("dist", "sampling replica %d did not come back: %s", index, pair.error().message.c_str());
            return false;
        }
        groups.push_back(std::move(pair).value());
    }
    for (size_t i = 0; i < groups.size(); ++i) {
        engines[i]->offer_group(std::move(groups[i]));
    }
    return true;
}

// Replicas are restarted 1 s after they die, the pause doubling up to 64 s while one keeps dying young.
process::RestartPolicy replica_policy() {
    process::RestartPolicy policy;
    policy.poll = std::chrono::milliseconds(500);
    policy.first_pause = std::chrono::seconds(1);
    policy.max_pause = std::chrono::seconds(64);
    policy.failed_pause = std::chrono::seconds(10);
    return policy;
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

Result<void> start_sampling_replicas(int argc, char ** argv, const ReplicaFlags & flags) {
    char dir_template[] = "/tmp/tinkerd-replicas-XXXXXX";
    if (!mkdtemp(dir_template)) {
        return internal_error("--sampling-replicas: cannot make a temporary directory for the replicas' stores");
    }
    g_replica_dir = dir_template;
    g_argv.assign(argv, argv + argc);
    std::vector<process::ChildSpec> replicas;
    for (int r = 1; r <= flags.count; ++r) {
        replicas.push_back({"sampling replica " + std::to_string(r),
                            [r](int generation) { return replica_argv(r, generation); },
                            [r](pid_t, int generation) { return connect_restarted_replica(r, generation); }});
    }
    g_supervisor =
        std::make_unique<process::ChildSupervisor>("/proc/self/exe", replica_policy(), restore_unpinned_affinity);
    auto started = g_supervisor->start(std::move(replicas));
    if (!started.ok()) {
        return internal_error("--sampling-replicas: " + started.error().message);
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

void supervise_sampling_replicas(const std::vector<std::vector<std::unique_ptr<SamplingReplicaEngine>>> & replicas,
                                 double timeout_seconds) {
    g_engines.assign(g_supervisor->pids().size(), {});
    g_timeout_seconds = timeout_seconds;
    for (const auto & per_model : replicas) {
        for (size_t r = 0; r < per_model.size() && r < g_engines.size(); ++r) {
            g_engines[r].push_back(per_model[r].get());
        }
    }
    g_supervisor->supervise();
}

void stop_supervising_sampling_replicas() {
    if (g_supervisor) {
        g_supervisor->stop_restarting();  // waits for a restart under way: it offers groups to the engines
    }
}

void reap_sampling_replicas() {
    if (g_supervisor) {
        g_supervisor->reap();
        g_supervisor.reset();
    }
    g_engines.clear();
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
