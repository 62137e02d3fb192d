// DataParallelStatus: what a data-parallel engine (dist/DistributedEngine) reports of its group, through a
// small interface of its own beside engine::Engine (monitoring finds it with a cross-cast; a plain engine
// does not have it and is one rank). Torch-free, like engine.h.
#pragma once

#include <cstdint>

namespace tinkerd::engine {

struct DataParallelStatus {
    int ranks = 1;           // training now: the group's size, or 1 while rank 0 trains alone after a failure
    int world_size = 1;      // --dp / --world-size
    int64_t generation = 0;  // 0 at start, one more each time the group re-forms
};

class DataParallelReporter {
  public:
    virtual ~DataParallelReporter() = default;
    virtual DataParallelStatus data_parallel_status() const = 0;  // any thread
};

// The status of any engine: its reporter's, or one rank.
template <typename EngineT>
DataParallelStatus data_parallel_status_of(const EngineT & engine) {
    const auto * reporter = dynamic_cast<const DataParallelReporter *>(&engine);
    return reporter ? reporter->data_parallel_status() : DataParallelStatus{};
}

}  // namespace tinkerd::engine
