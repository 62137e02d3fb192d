// Start-up of a data-parallel tinkerd: the flags (--dp, --dist-init, --rank, --world-size,
// --dist-timeout-seconds, --dist-keepalive-seconds), the follower processes --dp starts from this same
// binary (local_ranks.h), wrapping rank 0's engines in DistributedEngines, and the followers' main (one
// loop over the group's generations per served base model, generations.h).
#pragma once

#include <memory>
#include <string>
#include <sys/types.h>
#include <vector>

#include "common/status.h"
#include "engine/engine.h"

namespace tinkerd::dist {

struct DistFlags {
    int dp = 1;                     // --dp N: N processes on this machine (rank 0 starts the others)
    std::string init;               // --dist-init file://PATH | tcp://HOST:PORT
    int rank = 0;                   // --rank R
    int world_size = 1;             // --world-size W
    double timeout_seconds = 300;   // --dist-timeout-seconds: limit of every collective
    double keepalive_seconds = 30;  // --dist-keepalive-seconds: rank 0's no-op command when idle (0: none)
    bool enabled() const { return world_size > 1; }
    bool follower() const { return rank > 0; }
};

// Parses one flag if it is a data-parallel one: true when it was (`error` set if its value is bad).
bool parse_dist_flag(const std::string & flag, const std::string & value, DistFlags & flags, std::string & error);
// Checks the combination and fills world_size from --dp; an error names the flag.
Result<void> finish_dist_flags(DistFlags & flags);

// Rank 0 of --dp N: a fresh FileStore path, then N-1 copies of this binary started with the same
// arguments plus --rank R --dist-init file://... --world-size N (each dies with this process, and is
// restarted when it exits before).
Result<void> start_local_followers(int argc, char ** argv, DistFlags & flags);
// Waits (a few seconds at most) for the followers started above to exit, then kills the rest.
void reap_local_followers();

// Pins this process (and the threads it starts later) to its 1/`slots` of the cores it may use, slot s
// taking the s-th share (--dp ranks first, then sampling replicas); nothing with fewer cores than slots
// or a single slot.
void pin_to_slot(int slot, int slots);
// In a forked child before exec: the cores the process had before pin_to_slot (async-signal-safe).
void restore_unpinned_affinity();

// Compute threads of each process: --threads if given, else this machine's cores / the processes that
// share them (--dp ranks and sampling replicas; at least 1); 0 (every core) for a lone process.
int threads_per_process(int threads, int local_processes);

using EngineList = std::vector<std::unique_ptr<engine::Engine>>;
// Rank 0: forms generation 0 of one group per engine (store prefix "model<i>") and wraps each engine.
Result<void> wrap_engines(EngineList & engines, const DistFlags & flags);
// Ranks > 0: joins the same groups and runs their command loops, generation after generation, until rank
// 0 stops (0) or is gone (1); the exit code.
int run_follower_process(EngineList & engines, const DistFlags & flags);

}  // namespace tinkerd::dist
