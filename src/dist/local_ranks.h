// The follower processes of `tinkerd --dp N` (this binary re-executed with --rank R --dist-init file://...):
// started once at start-up, and restarted by a supervisor thread when one dies (a signal or a non-zero
// exit; exit code 0 means rank 0 told it to stop) while rank 0 runs: it loads the model again and joins
// the group's next generation (generations.h). Each dies with rank 0
// (PR_SET_PDEATHSIG); at shutdown they are waited for, then killed.
#pragma once

#include <string>
#include <sys/types.h>
#include <vector>

#include "common/status.h"

namespace tinkerd::dist {

// argv of each follower rank (rank 1 first); starts them all and the supervisor.
Result<void> start_local_ranks(const std::vector<std::vector<std::string>> & argv_per_rank);
// Stops restarting, waits (a few seconds at most) for the followers to exit, kills the rest.
void stop_local_ranks();

// Starts this binary (/proc/self/exe) with `argv` (argv[0] first) in a child that dies with the calling
// thread (PR_SET_PDEATHSIG) and has no blocked signals; its pid. `what` names the flag in an error.
Result<pid_t> spawn_copy_of_self(const std::vector<std::string> & argv, const std::string & what);

}  // namespace tinkerd::dist
