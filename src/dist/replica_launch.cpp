// Sampling replica start-up (replica_launch.h): the flags, the replica processes, their groups.
#include "dist/replica_launch.h"

#include <algorithm>
#include <cstdlib>
#include <sys/wait.h>
#include <thread>
#include <unistd.h>

#include "common/log.h"

namespace tinkerd::dist {

namespace {

std::vector<pid_t> g_replicas;
std::string g_replica_dir;

std::string replica_store(const std::string & dir, int index) {
    return "file://" + dir + "/replica" + std::to_string(index);
}

GroupOptions pair_options(const std::string & init, int rank, size_t model_index, double timeout_seconds) {
    GroupOptions o;
    o.init = init;
    o.rank = rank;
    o.world_size = 2;
    o.prefix = "model" + std::to_string(model_index);
    o.timeout = std::chrono::milliseconds(static_cast<long long>(timeout_seconds * 1000));
    return o;
}

}  // namespace

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
    for (int r = 1; r <= flags.count; ++r) {
        std::vector<std::string> args(argv, argv + argc);
        args.insert(args.end(),
                    {"--replica-index", std::to_string(r), "--replica-init", replica_store(g_replica_dir, r)});
        auto pid = spawn_copy_of_self(std::move(args), "--sampling-replicas");
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
            auto pair = DataParallelGroup::join(pair_options(replica_store(g_replica_dir, r), 0, i, timeout_seconds));
            if (!pair.ok()) {
                return internal_error("sampling replica " + std::to_string(r) + ": " + pair.error().message);
            }
            replicas[i].push_back(std::make_unique<SamplingReplicaEngine>(*engines[i], std::move(pair).value(), r));
        }
        LOG_INF("dist", "sampling replica %d ready (%zu model(s))", r, engines.size());
    }
    return replicas;
}

void reap_sampling_replicas() {
    for (int tries = 0; tries < 50 && !g_replicas.empty(); ++tries) {
        std::erase_if(g_replicas, [](pid_t pid) { return waitpid(pid, nullptr, WNOHANG) != 0; });
        if (!g_replicas.empty()) {
            usleep(100000);
        }
    }
    for (pid_t pid : g_replicas) {
        kill(pid, SIGKILL);
        waitpid(pid, nullptr, 0);
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
    std::vector<int> codes(engines.size(), 0);
    for (size_t i = 0; i < engines.size(); ++i) {
        loops.emplace_back([&, i] {
            auto pair = DataParallelGroup::join(pair_options(flags.init, 1, i, timeout_seconds));
            auto status = pair.ok() ? run_sampling_replica(*engines[i], **pair, stops[i]) : Result<void>(pair.error());
            if (!status.ok()) {
                LOG_ERR("dist", "sampling replica %d, model %zu: %s", flags.index, i, status.error().message.c_str());
                codes[i] = 1;
            }
        });
    }
    for (auto & t : loops) {
        t.join();
    }
    LOG_INF("dist", "sampling replica %d: done", flags.index);
    return *std::max_element(codes.begin(), codes.end());
}

int local_process_count(const DistFlags & dist, const ReplicaFlags & replicas) {
    return std::max(dist.dp, 1) + replicas.count;
}

int local_process_slot(const DistFlags & dist, const ReplicaFlags & replicas) {
    return replicas.replica() ? std::max(dist.dp, 1) + replicas.index - 1 : dist.rank;
}

}  // namespace tinkerd::dist
