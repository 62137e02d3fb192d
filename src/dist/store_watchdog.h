// StoreWatchdog: a follower's guard against a store that stopped answering. c10d's TCPStore client waits
// for some answers (check, get) without a deadline, so when rank 0's machine vanishes (no FIN, no RST) a
// follower would wait for the kernel's TCP retries (~15 minutes). Every store call is timed instead; one
// that takes longer than the limit ends the process with a log line saying rank 0 is gone.
#pragma once

#include <chrono>
#include <condition_variable>
#include <cstdint>
#include <map>
#include <mutex>
#include <string>
#include <thread>

namespace tinkerd::dist {

class StoreWatchdog {
  public:
    // limit 0: no watchdog (rank 0, whose store is in its own process, or a file store).
    StoreWatchdog(std::chrono::milliseconds limit, std::string what);
    ~StoreWatchdog();

    // Held for one call.
    class Call {
      public:
        explicit Call(StoreWatchdog * dog);
        ~Call();

      private:
        StoreWatchdog * dog_;
        uint64_t id_ = 0;
    };
    Call call() { return Call(limit_.count() > 0 ? this : nullptr); }

  private:
    void run();

    const std::chrono::milliseconds limit_;
    const std::string what_;
    std::mutex mutex_;
    std::condition_variable wake_;
    std::map<uint64_t, std::chrono::steady_clock::time_point> calls_;  // in flight, by id
    uint64_t next_id_ = 1;
    bool stop_ = false;
    std::thread thread_;
};

}  // namespace tinkerd::dist
