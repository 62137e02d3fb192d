// GroupKeeper: rank 0's hold on one served model's data-parallel group across generations. The engine
// thread leases the group for each op (a lock, so nothing else touches the group mid-op); a background
// thread gives a broken group up (destroying it closes its connections, so the followers' waits end at
// once), forms the next generation while rank 0 trains alone (generations.h: again and again, logging
// the missing ranks, until every rank answers), swaps it in between two ops, and sends a keepalive
// command when the group has been idle for GroupOptions::keepalive. It never blocks the engine thread
// for longer than a keepalive's send.
#pragma once

#include <atomic>
#include <condition_variable>
#include <memory>
#include <mutex>
#include <thread>

#include "dist/generations.h"
#include "dist/process_group.h"

namespace tinkerd::dist {

class GroupKeeper {
  public:
    // `first` is generation 0, formed at start-up.
    GroupKeeper(std::shared_ptr<GroupStore> store, GroupOptions options, std::unique_ptr<DataParallelGroup> first);
    // Stops the thread, sends STOP through a working group and publishes "stopped" (followers waiting
    // for a generation exit).
    ~GroupKeeper();

    // The group for one op, held until the lease goes: null while rank 0 is alone (a broken group counts
    // as none); `generation` changes each time a new group is swapped in.
    class Lease {
      public:
        explicit Lease(GroupKeeper & keeper);
        ~Lease();
        DataParallelGroup * group() const;
        int64_t generation() const { return keeper_.generation_; }

      private:
        GroupKeeper & keeper_;
        std::unique_lock<std::mutex> lock_;
    };
    Lease lease() { return Lease(*this); }

    int ranks() const { return ranks_; }  // in use now: the world size, or 1 while alone
    int world_size() const { return options_.world_size; }
    int64_t generation_now() const { return generation_; }

  private:
    void run();
    void give_up();
    void re_form();
    void keep_alive();
    void wake();

    std::shared_ptr<GroupStore> store_;
    const GroupOptions options_;  // prefix "model<i>"

    std::mutex op_mutex_;  // held by a lease, the swap and a keepalive
    std::unique_ptr<DataParallelGroup> group_;
    std::chrono::steady_clock::time_point last_used_;
    std::atomic<int64_t> generation_{0};
    std::atomic<int> ranks_{1};
    std::atomic<bool> alone_{false};    // the group was given up; the thread is forming the next one
    std::atomic<bool> give_up_{false};  // an op or a keepalive found the group broken

    std::mutex wake_mutex_;
    std::condition_variable wake_;
    std::atomic<bool> stop_{false};
    std::thread thread_;
};

}  // namespace tinkerd::dist
