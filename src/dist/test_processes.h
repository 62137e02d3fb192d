// Test-only: the dist tests re-execute their own binary as the other processes of a group (followers,
// sampling replicas). These two helpers find the binary and start a copy of it with some arguments.
#pragma once

#include <string>
#include <sys/types.h>
#include <vector>

namespace tinkerd::testing {

// This test binary's path (resolved once, so that a copy started later runs the same file).
const std::string & self_path();
// Starts the test binary with `args` after its own path; its pid. Throws when it cannot.
pid_t spawn_self(const std::vector<std::string> & args);

}  // namespace tinkerd::testing
