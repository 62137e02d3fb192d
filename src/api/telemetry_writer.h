// TelemetryWriter: the one thread that writes telemetry to the store, so that the engine thread (a training
// op's metric point) and the output thread (a sample request's usage) never wait on the database. A bounded
// queue (a full one drops the record with a counted warning rather than block), each wake-up writes all that
// is queued in one transaction, stop() drains it; once an hour it applies the metrics retention rule.
#pragma once

#include <chrono>
#include <condition_variable>
#include <cstdint>
#include <functional>
#include <mutex>
#include <set>
#include <string>
#include <thread>

#include "store/database.h"

namespace tinkerd::api {

// Run points and sampler rows unused for this long are pruned (store::Database::prune_metrics).
inline constexpr double METRICS_RETENTION_SECONDS = 30 * 24 * 3600.0;

class TelemetryWriter {
  public:
    struct Options {
        int64_t max_points_per_op = 2000;  // thinning bound (--max-metric-points)
        size_t capacity = 8192;            // queued records (points + usage) before new ones are dropped
        double prune_interval_seconds = 3600;
    };
    TelemetryWriter(store::Database & db, Options options);
    ~TelemetryWriter();  // stop()
    TelemetryWriter(const TelemetryWriter &) = delete;
    TelemetryWriter & operator=(const TelemetryWriter &) = delete;

    // Never block; false when the queue is full (the record is dropped and counted).
    bool add_point(store::MetricPoint point);
    bool add_usage(store::SamplerUsageDelta usage);
    // Waits until everything queued before the call is in the store (or written off after a failure), at
    // most `max_wait`: readers of the metrics tables see this process's records. True when it got there.
    bool flush(std::chrono::milliseconds max_wait = std::chrono::seconds(5));
    // Writes what is queued, then ends the thread; later records are dropped. Idempotent.
    void stop();
    int64_t dropped() const;
    // Called on the writer thread after each batch with points, with the runs they belong to (push streams
    // wake on it). It must not block. Set it before the first record.
    void on_points_written(std::function<void(const std::set<std::string> &)> callback);

  private:
    template <typename Push>
    bool enqueue(const char * what, Push push);
    void loop();
    void write(const store::TelemetryBatch & batch);
    void prune();

    store::Database & db_;
    const Options options_;
    mutable std::mutex mutex_;         // guards everything below but thread_
    std::condition_variable wake_;     // records queued, or stopping
    std::condition_variable written_;  // written_seq_ advanced
    store::TelemetryBatch queue_;
    uint64_t queued_seq_ = 0;   // records ever admitted
    uint64_t written_seq_ = 0;  // records ever handled by the thread
    int64_t dropped_ = 0;
    bool stopping_ = false;
    std::function<void(const std::set<std::string> &)> on_points_written_;
    std::thread thread_;
};

}  // namespace tinkerd::api
