// spawn_child: fork + exec of a child process that dies with the thread that started it, for the processes
// tinkerd starts from its own binary (--dp followers, sampling replicas) and the supervisor that restarts them.
#pragma once

#include <string>
#include <sys/types.h>
#include <vector>

namespace tinkerd::process {

// Starts `program` with `argv` (argv[0] first). The child gets SIGKILL when the calling THREAD ends
// (PR_SET_PDEATHSIG: no orphans), has no blocked signals, closes every inherited descriptor above 2 (Gloo's
// sockets have no CLOEXEC) and runs `before_exec` (async-signal-safe; may be null) right before exec. The
// child's pid, or -1 when fork failed. Everything the child touches is prepared before the fork.
pid_t spawn_child(const std::string & program, const std::vector<std::string> & argv, void (*before_exec)() = nullptr);

// "signal 9" or "exit code 3", from a waitpid status.
std::string exit_reason(int status);

}  // namespace tinkerd::process
