// TelemetryWriter: the telemetry queue and its writer thread (batched transactions, drain at stop, drop
// with a counted warning when full, hourly retention).
#include "api/telemetry_writer.h"

#include <utility>

#include "api/json_util.h"
#include "common/log.h"

namespace tinkerd::api {

TelemetryWriter::TelemetryWriter(store::Database & db, Options options) : db_(db), options_(options) {
    thread_ = std::thread([this] { loop(); });
}

TelemetryWriter::~TelemetryWriter() {
    stop();
}

// Queues one record through `push` when it fits; a refused one is counted and logged (the first, then
// every 1000th, so that a stalled database does not flood the log).
template <typename Push>
bool TelemetryWriter::enqueue(const char * what, Push push) {
    {
        std::lock_guard lock(mutex_);
        const size_t queued = queue_.points.size() + queue_.usage.size();
        if (stopping_ || queued >= options_.capacity) {
            if (dropped_++ % 1000 == 0) {
                LOG_WRN("api", "telemetry queue %s (%zu records): dropped a %s (%lld dropped so far)",
                        stopping_ ? "stopped" : "full", queued, what, static_cast<long long>(dropped_));
            }
            return false;
        }
        ++queued_seq_;
        push();
    }
    wake_.notify_one();
    return true;
}

bool TelemetryWriter::add_point(store::MetricPoint point) {
    return enqueue("metric point", [&] { queue_.points.push_back(std::move(point)); });
}

bool TelemetryWriter::add_usage(store::SamplerUsageDelta usage) {
    return enqueue("sampler usage record", [&] { queue_.usage.push_back(std::move(usage)); });
}

bool TelemetryWriter::flush(std::chrono::milliseconds max_wait) {
    std::unique_lock lock(mutex_);
    const uint64_t target = queued_seq_;
    return written_.wait_for(lock, max_wait, [&] { return written_seq_ >= target; });
}

void TelemetryWriter::stop() {
    {
        std::lock_guard lock(mutex_);
        stopping_ = true;
    }
    wake_.notify_all();
    if (thread_.joinable()) {
        thread_.join();
    }
}

void TelemetryWriter::on_points_written(std::function<void(const std::set<std::string> &)> callback) {
    std::lock_guard lock(mutex_);
    on_points_written_ = std::move(callback);
}

int64_t TelemetryWriter::dropped() const {
    std::lock_guard lock(mutex_);
    return dropped_;
}

// Each turn takes everything queued (what arrives meanwhile waits for the next turn: batches grow with the
// load); stopping only once the queue is empty.
void TelemetryWriter::loop() {
    auto next_prune = std::chrono::steady_clock::now() + std::chrono::seconds(60);
    std::unique_lock lock(mutex_);
    for (;;) {
        wake_.wait_until(lock, next_prune,
                         [&] { return stopping_ || !queue_.points.empty() || !queue_.usage.empty(); });
        if (!queue_.points.empty() || !queue_.usage.empty()) {
            store::TelemetryBatch batch = std::exchange(queue_, {});
            const uint64_t handled = queued_seq_;
            const auto notify = on_points_written_;
            lock.unlock();
            write(batch);
            if (notify && !batch.points.empty()) {
                std::set<std::string> runs;
                for (const auto & p : batch.points) {
                    runs.insert(p.run_id);
                }
                notify(runs);
            }
            lock.lock();
            written_seq_ = handled;
            written_.notify_all();
            continue;
        }
        if (stopping_) {
            return;
        }
        if (std::chrono::steady_clock::now() >= next_prune) {
            lock.unlock();
            prune();
            lock.lock();
            next_prune =
                std::chrono::steady_clock::now() + std::chrono::duration_cast<std::chrono::steady_clock::duration>(
                                                       std::chrono::duration<double>(options_.prune_interval_seconds));
        }
    }
}

void TelemetryWriter::write(const store::TelemetryBatch & batch) {
    if (auto written = db_.write_telemetry(batch, options_.max_points_per_op); !written.ok()) {
        LOG_WRN("api", "cannot record %zu metric point(s) and %zu sample usage record(s): %s", batch.points.size(),
                batch.usage.size(), written.error().message.c_str());
    }
}

void TelemetryWriter::prune() {
    auto pruned = db_.prune_metrics(now_seconds() - METRICS_RETENTION_SECONDS);
    if (!pruned.ok()) {
        LOG_WRN("api", "cannot prune old metrics: %s", pruned.error().message.c_str());
    } else if (*pruned > 0) {
        LOG_INF("api", "pruned %lld metric row(s) older than the %.0f-day retention", static_cast<long long>(*pruned),
                METRICS_RETENTION_SECONDS / 86400);
    }
}

}  // namespace tinkerd::api
