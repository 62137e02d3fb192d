// DataParallelGroup: one process's membership in one generation of a data-parallel group over torch's
// c10d (Gloo on the CPU), and the few collectives the distributed engine needs, each with a timeout and as
// a Result (a dead or stuck peer fails the op; the group is then marked broken and every later op fails at
// once). GroupStore: the rendezvous store every generation shares for the life of the process, a
// FileStore (file://PATH) or a TCPStore (tcp://HOST:PORT, rank 0 hosts it); generations.h runs the joins.
#pragma once

#include <chrono>
#include <cstdint>
#include <memory>
#include <optional>
#include <string>
#include <vector>

#include "common/status.h"
#include "dist/store_watchdog.h"

namespace tinkerd::dist {

struct GroupOptions {
    std::string init;  // "file:///path/to/store" or "tcp://HOST:PORT"
    int rank = 0;
    int world_size = 1;
    std::string prefix = "tinkerd";             // store key prefix: one group per served base model
    std::chrono::milliseconds timeout{300000};  // every collective but the followers' wait for a command
    // Rank 0 sends a no-op command after this long without one; a follower that hears nothing for three
    // times as long gives the group up (rank 0 or its machine vanished). Zero: no keepalive, no deadline.
    std::chrono::milliseconds keepalive{0};
};

// The store behind every generation of the groups of this process (one per process, shared by the
// served models' groups). Its calls throw nothing: a store that cannot be reached is an error.
class GroupStore {
  public:
    static Result<std::shared_ptr<GroupStore>> open(const GroupOptions & options);
    ~GroupStore();

    Result<void> set(const std::string & key, const std::string & value);
    // The key's value, or nullopt while it is not set.
    Result<std::optional<std::string>> get(const std::string & key);

    // Times a call that may wait on the store (a follower's Gloo rendezvous): see store_watchdog.h.
    StoreWatchdog::Call watch();

    struct Impl;
    Impl & impl() { return *impl_; }

  private:
    explicit GroupStore(std::unique_ptr<Impl> impl);
    std::unique_ptr<Impl> impl_;
};

// Bytes and time spent in gradient all-reduces since start (for benchmarks and logs).
struct ReduceStats {
    int64_t calls = 0;
    int64_t bytes = 0;
    double seconds = 0;
};

class DataParallelGroup {
  public:
    // Forms the group under options.prefix (a generation's, generations.h): blocks until every rank has
    // joined or the timeout passes.
    static Result<std::unique_ptr<DataParallelGroup>> join(GroupStore & store, const GroupOptions & options);
    ~DataParallelGroup();

    int rank() const;
    int size() const;

    // Rank 0 sends (op, bytes) to every rank (within the collective timeout); the others receive it. A follower
    // waits for the next command without a deadline (rank 0 may idle for days), or three keepalives long; a
    // closed connection (rank 0 gone, or its group given up) ends the wait.
    Result<void> send_command(int64_t op, const std::vector<uint8_t> & payload);
    Result<std::pair<int64_t, std::vector<uint8_t>>> receive_command();
    // Rank 0 gets every rank's bytes, in rank order; the others get an empty list.
    Result<std::vector<std::vector<uint8_t>>> gather_to_root(const std::vector<uint8_t> & mine);
    // Rank 0's bytes on every rank.
    Result<void> broadcast_bytes(std::vector<uint8_t> & bytes);
    // Element-wise sum over ranks, in place; every rank ends with the same bits.
    Result<void> all_reduce_sum(float * data, int64_t count);

    const ReduceStats & reduce_stats() const;
    // True once a collective failed (every later one fails at once).
    bool broken() const;

  private:
    struct State;
    explicit DataParallelGroup(std::unique_ptr<State> state);
    std::unique_ptr<State> state_;
};

}  // namespace tinkerd::dist
