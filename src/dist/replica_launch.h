// Start-up of sampling replicas (`--sampling-replicas M`, issue 15 §2): rank 0 starts M copies of this
// binary with the same arguments plus --replica-index R --replica-init file://...; each loads the same
// models and answers sampling commands over a two-rank group per model (replica_engine.h).
#pragma once

#include <memory>
#include <string>
#include <vector>

#include "common/status.h"
#include "dist/flags.h"
#include "dist/launch.h"
#include "dist/replica_engine.h"

namespace tinkerd::dist {

// One model's group of a replica and rank 0 (rank 0 or 1), over the FileStore `init`.
Result<std::unique_ptr<DataParallelGroup>> join_replica_pair(const std::string & init, int rank, size_t model_index,
                                                             double timeout_seconds);

// Rank 0: starts flags.count replica processes (each dies with this process) under a process::ChildSupervisor.
Result<void> start_sampling_replicas(int argc, char ** argv, const ReplicaFlags & flags);
// Rank 0: joins each replica's group of each model; [model][replica]. `engines` must outlive them.
Result<std::vector<std::vector<std::unique_ptr<SamplingReplicaEngine>>>> join_sampling_replicas(
    const EngineList & engines, const ReplicaFlags & flags, double timeout_seconds);
// Rank 0, after joining: the supervisor starts a replica process that died (a signal or a non-zero exit)
// again as its next generation (a fresh store file), joins its new groups and hands them to that replica's
// engines (SamplingReplicaEngine::offer_group); 1 s pause, doubling up to 64 s while it keeps dying within
// a minute; a restart that fails is tried again 10 s later. Stopped before the engines go.
void supervise_sampling_replicas(const std::vector<std::vector<std::unique_ptr<SamplingReplicaEngine>>> & replicas,
                                 double timeout_seconds);
void stop_supervising_sampling_replicas();
// Waits (5 s at most) for the replicas to exit after their STOP, then kills what is left.
void reap_sampling_replicas();

// A replica process's main after loading its models: one answering loop per model; the exit code.
int run_replica_process(EngineList & engines, const std::vector<StopCheckFactory> & stops, const ReplicaFlags & flags,
                        double timeout_seconds);

// Processes of this machine that share its cores (--dp ranks, then replicas) and this one's slot in them.
int local_process_count(const DistFlags & dist, const ReplicaFlags & replicas);
int local_process_slot(const DistFlags & dist, const ReplicaFlags & replicas);

}  // namespace tinkerd::dist
