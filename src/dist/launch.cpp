// Data-parallel start-up (launch.h): spawning and supervising followers, pinning, joining groups.
#include "dist/launch.h"

#include <cstdlib>
#include <sched.h>
#include <thread>
#include <unistd.h>

#include "common/log.h"
#include "dist/distributed_engine.h"
#include "dist/generations.h"
#include "process/supervisor.h"

namespace tinkerd::dist {

namespace {

std::string g_store_dir;
std::unique_ptr<process::ChildSupervisor> g_followers;

// Followers are restarted 0.5 s after they die, the pause doubling up to 32 s while one keeps dying young.
process::RestartPolicy follower_policy() {
    process::RestartPolicy policy;
    policy.poll = std::chrono::milliseconds(250);
    policy.first_pause = std::chrono::milliseconds(500);
    policy.max_pause = std::chrono::seconds(32);
    return policy;
}

GroupOptions group_options(const DistFlags & flags, size_t model_index) {
    GroupOptions o;
    o.init = flags.init;
    o.rank = flags.rank;
    o.world_size = flags.world_size;
    o.prefix = "model" + std::to_string(model_index);
    o.timeout = std::chrono::milliseconds(static_cast<long long>(flags.timeout_seconds * 1000));
    o.keepalive = std::chrono::milliseconds(static_cast<long long>(flags.keepalive_seconds * 1000));
    return o;
}

}  // namespace

Result<void> start_local_followers(int argc, char ** argv, DistFlags & flags) {
    char dir_template[] = "/tmp/tinkerd-dp-XXXXXX";
    if (!mkdtemp(dir_template)) {
        return internal_error("--dp: cannot make a temporary directory for the process group's store");
    }
    g_store_dir = dir_template;
    flags.init = "file://" + g_store_dir + "/store";
    flags.world_size = flags.dp;
    std::vector<process::ChildSpec> ranks;
    for (int r = 1; r < flags.dp; ++r) {
        std::vector<std::string> args(argv, argv + argc);
        for (const std::string & extra : {std::string("--rank"), std::to_string(r), std::string("--dist-init"),
                                          flags.init, std::string("--world-size"), std::to_string(flags.dp)}) {
            args.push_back(extra);
        }
        // Every generation runs the same command: a restarted rank joins the group's next generation by
        // itself (generations.h).
        ranks.push_back({"rank " + std::to_string(r), [args](int) { return args; }, nullptr});
    }
    g_followers =
        std::make_unique<process::ChildSupervisor>("/proc/self/exe", follower_policy(), restore_unpinned_affinity);
    auto started = g_followers->start(std::move(ranks));
    if (!started.ok()) {
        return internal_error("--dp: " + started.error().message);
    }
    g_followers->supervise();
    LOG_INF("dist", "--dp %d: started %d follower process(es), store %s", flags.dp, flags.dp - 1, flags.init.c_str());
    return {};
}

void reap_local_followers() {
    if (g_followers) {
        g_followers->reap();
        g_followers.reset();
    }
    if (!g_store_dir.empty()) {
        std::system(("rm -rf '" + g_store_dir + "'").c_str());
    }
}

namespace {
cpu_set_t g_unpinned;  // the cores this process could use before pin_to_slot
bool g_pinned = false;
}  // namespace

void restore_unpinned_affinity() {
    if (g_pinned) {
        sched_setaffinity(0, sizeof g_unpinned, &g_unpinned);
    }
}

void pin_to_slot(int slot, int slots) {
    cpu_set_t allowed;
    if (slots <= 1 || sched_getaffinity(0, sizeof allowed, &allowed) != 0) {
        return;
    }
    g_unpinned = allowed;
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
        g_pinned = true;
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
    auto store = GroupStore::open(group_options(flags, 0));
    if (!store.ok()) {
        return store.error();
    }
    const std::atomic<bool> never{false};
    for (size_t i = 0; i < engines.size(); ++i) {
        const GroupOptions options = group_options(flags, i);
        auto group = lead_generation(**store, options, 0, never);
        if (!group.ok()) {
            return internal_error("cannot form the data-parallel group (" + options.prefix + ", " + flags.init +
                                  "): " + group.error().message);
        }
        engines[i] =
            std::make_unique<DistributedEngine>(std::move(engines[i]), *store, options, std::move(group).value());
    }
    return {};
}

int run_follower_process(EngineList & engines, const DistFlags & flags) {
    auto store = GroupStore::open(group_options(flags, 0));
    if (!store.ok()) {
        LOG_ERR("dist", "rank %d: %s", flags.rank, store.error().message.c_str());
        return 1;
    }
    std::vector<std::thread> loops;
    std::vector<int> codes(engines.size(), 0);
    for (size_t i = 0; i < engines.size(); ++i) {
        loops.emplace_back([&, i] {
            auto status = follow_group(*engines[i], **store, group_options(flags, i));
            if (!status.ok()) {
                LOG_ERR("dist", "rank %d, model %zu: %s; exiting", flags.rank, i, status.error().message.c_str());
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
