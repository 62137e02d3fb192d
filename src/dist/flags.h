// The data-parallel and sampling-replica flags as plain values (no torch): filled by the command line
// (src/cli) and read by dist's start-up (launch.h, replica_launch.h).
#pragma once

#include <string>

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

struct ReplicaFlags {
    int count = 0;     // --sampling-replicas M (rank 0 starts them)
    int index = 0;     // --replica-index R (1-based; set by rank 0 on the replicas it starts)
    std::string init;  // --replica-init file://PATH (set by rank 0)
    bool replica() const { return index > 0; }
};

}  // namespace tinkerd::dist
