// Start-up of a data-parallel tinkerd (its flags, DistFlags, are in flags.h and parsed by src/cli): the
// follower processes --dp starts from this same binary (restarted by a process::ChildSupervisor), wrapping
// rank 0's engines in DistributedEngines, and the followers' main (one loop over the group's generations
// per served base model, generations.h).
#pragma once

#include <memory>
#include <string>
#include <sys/types.h>
#include <vector>

#include "common/status.h"
#include "dist/flags.h"
#include "engine/engine.h"

namespace tinkerd::dist {

// Rank 0 of --dp N: a fresh FileStore path, then N-1 copies of this binary started with the same
// arguments plus --rank R --dist-init file://... --world-size N (each dies with this process). A follower
// that dies (a signal or a non-zero exit) is restarted after 0.5 s, doubling up to 32 s while it keeps dying
// within a minute; exit code 0 (rank 0 told it to stop) is not restarted.
Result<void> start_local_followers(int argc, char ** argv, DistFlags & flags);
// Stops restarting, waits (5 s at most) for the followers started above to exit, then kills the rest.
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
