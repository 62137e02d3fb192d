// Start-up of sampling replicas (`--sampling-replicas M`, issue 15 §2): rank 0 starts M copies of this
// binary with the same arguments plus --replica-index R --replica-init file://...; each loads the same
// models and answers sampling commands over a two-rank group per model (replica_engine.h).
#pragma once

#include <memory>
#include <string>
#include <vector>

#include "common/status.h"
#include "dist/launch.h"
#include "dist/replica_engine.h"

namespace tinkerd::dist {

struct ReplicaFlags {
    int count = 0;     // --sampling-replicas M (rank 0 starts them)
    int index = 0;     // --replica-index R (1-based; set by rank 0 on the replicas it starts)
    std::string init;  // --replica-init file://PATH (set by rank 0)
    bool replica() const { return index > 0; }
};

// One model's group of a replica and rank 0 (rank 0 or 1), over the FileStore `init`.
Result<std::unique_ptr<DataParallelGroup>> join_replica_pair(const std::string & init, int rank, size_t model_index,
                                                             double timeout_seconds);

// Parses one flag if it is a replica one: true when it was (`error` set if its value is bad).
bool parse_replica_flag(const std::string & flag, const std::string & value, ReplicaFlags & flags, std::string & error);

// Rank 0: starts flags.count replica processes (each dies with this process).
Result<void> start_sampling_replicas(int argc, char ** argv, const ReplicaFlags & flags);
// Rank 0: joins each replica's group of each model; [model][replica]. `engines` must outlive them.
Result<std::vector<std::vector<std::unique_ptr<SamplingReplicaEngine>>>> join_sampling_replicas(
    const EngineList & engines, const ReplicaFlags & flags, double timeout_seconds);
// Rank 0, after joining: a thread that starts a replica process again when it exits and hands its new
// groups to that replica's engines (SamplingReplicaEngine::offer_group). Stopped before the engines go.
void supervise_sampling_replicas(const std::vector<std::vector<std::unique_ptr<SamplingReplicaEngine>>> & replicas,
                                 double timeout_seconds);
void stop_supervising_sampling_replicas();
// Waits (a few seconds at most) for the replicas to exit after their STOP, then kills what is left.
void reap_sampling_replicas();

// A replica process's main after loading its models: one answering loop per model; the exit code.
int run_replica_process(EngineList & engines, const std::vector<StopCheckFactory> & stops, const ReplicaFlags & flags,
                        double timeout_seconds);

// Processes of this machine that share its cores (--dp ranks, then replicas) and this one's slot in them.
int local_process_count(const DistFlags & dist, const ReplicaFlags & replicas);
int local_process_slot(const DistFlags & dist, const ReplicaFlags & replicas);

}  // namespace tinkerd::dist
