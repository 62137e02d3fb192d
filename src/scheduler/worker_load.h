// WorkerLoad (what a monitor sees of one EngineWorker: queue depths, KV-cache use, resident sampler
// adapters, engine busy time) and LoadMeter, the engine thread's side of it: it notes each step's
// duration and, after each sampling step, the engine's SampleStats, for any thread to read.
#pragma once

#include <atomic>
#include <chrono>
#include <cstdint>
#include <mutex>

#include "common/rate_window.h"
#include "engine/engine.h"

namespace tinkerd::scheduler {

struct WorkerLoad {
    int64_t queued_ops = 0;        // training ops waiting in the runs' queues
    int64_t queued_samples = 0;    // sample jobs waiting for the next sampling step
    int64_t running_samples = 0;   // requests in the engine's batch (as of the last sampling step)
    int64_t kv_bytes_used = 0;     // KV cache reserved (as of the last sampling step)
    int64_t kv_bytes_total = 0;    // the KV budget (--kv-cache-mib)
    int64_t sampler_adapters = 0;  // imported sampler adapters resident (the LRU)
    double busy_seconds = 0;       // engine steps' time since start
    double busy_fraction = 0;      // of the last minute (or of the time since start when shorter)
};

class LoadMeter {
  public:
    LoadMeter() : started_(wall_now()) {}

    // Engine thread: a step (execute + update) took `seconds`.
    void note_step(double seconds) {
        busy_nanos_ += static_cast<int64_t>(seconds * 1e9);
        std::lock_guard lock(mu_);
        busy_window_.add(wall_now(), seconds);
    }
    // Engine thread, after a sampling step (and once at start, for the budget).
    void note_sampling(const engine::SampleStats & stats, size_t sampler_adapters) {
        running_samples_ = stats.running;
        kv_bytes_used_ = stats.kv_bytes;
        kv_bytes_total_ = stats.kv_budget_bytes;
        sampler_adapters_ = static_cast<int64_t>(sampler_adapters);
    }
    // Any thread: the meter's part of the load (queue depths are the worker's).
    void fill(WorkerLoad & load) const {
        load.running_samples = running_samples_.load();
        load.kv_bytes_used = kv_bytes_used_.load();
        load.kv_bytes_total = kv_bytes_total_.load();
        load.sampler_adapters = sampler_adapters_.load();
        load.busy_seconds = static_cast<double>(busy_nanos_.load()) / 1e9;
        const double now = wall_now();
        std::lock_guard lock(mu_);
        load.busy_fraction = std::min(1.0, busy_window_.rate(now, now - started_));
    }

  private:
    static double wall_now() {
        return std::chrono::duration<double>(std::chrono::system_clock::now().time_since_epoch()).count();
    }

    const double started_;
    std::atomic<int64_t> busy_nanos_{0};
    std::atomic<int64_t> running_samples_{0};
    std::atomic<int64_t> kv_bytes_used_{0};
    std::atomic<int64_t> kv_bytes_total_{0};
    std::atomic<int64_t> sampler_adapters_{0};
    mutable std::mutex mu_;  // guards busy_window_
    RateWindow busy_window_{60};
};

}  // namespace tinkerd::scheduler
