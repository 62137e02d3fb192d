// Telemetry: what the server counts for monitoring and the console. HTTP requests per route pattern,
// method and status (counts, latency histograms); tokens trained and sampled per base model (totals and
// rates over the last minute); per-sampler request counts and latency histograms (the store's sampler_usage
// and sampler_latency, so they survive a restart); and each training op's metric point (run_metrics). Store
// writes go through its TelemetryWriter (one background thread): recording never waits on the database.
// Thread-safe: written by the HTTP, engine and output threads, read by the monitoring routes.
#pragma once

#include <array>
#include <cstdint>
#include <map>
#include <mutex>
#include <optional>
#include <string>
#include <tuple>
#include <vector>

#include "api/telemetry_writer.h"
#include "common/rate_window.h"
#include "engine/engine.h"
#include "store/database.h"

namespace tinkerd::api {

// Upper bounds (seconds) of the request-latency histogram's buckets; +Inf is implied.
inline constexpr std::array<double, 12> LATENCY_BUCKETS = {0.005, 0.01, 0.025, 0.05, 0.1,  0.25,
                                                           0.5,   1.0,  2.5,   5.0,  10.0, 30.0};

struct RouteStats {
    std::string method;
    std::string route;  // the pattern ("/api/v1/training_runs/{run_id}"), never the raw path
    int status = 0;
    int64_t count = 0;
    double sum_seconds = 0;
    std::array<int64_t, LATENCY_BUCKETS.size()> bucket_counts{};  // per bucket, not cumulative
};

struct ModelActivity {
    int64_t tokens_trained = 0;  // input tokens of forward_backward ops (with a backward pass)
    int64_t tokens_sampled = 0;  // generated tokens, every sequence counted
    int64_t sample_requests = 0;
    double trained_per_s = 0;  // over the last minute (or since start)
    double sampled_per_s = 0;
};

// One finished sample request, as its usage is counted.
struct SampleUsage {
    std::string tenant;
    std::string sampler_id;  // the sampler, or the model name an OpenAI call sent
    std::string base_model;
    int64_t tokens = 0;
    double latency_s = 0;  // submission to outcome
    bool ok = true;
};

struct SamplerLatency {
    std::optional<double> p50;  // none: no request of the sampler has succeeded yet
    std::optional<double> p95;
};

// Loss-bearing tokens of a datum: the positions of target_tokens with a positive weight (all of them
// without a weights tensor).
int64_t loss_bearing_tokens(const engine::Datum & datum);

class Telemetry {
  public:
    Telemetry(store::Database & db, int64_t max_points_per_op);

    double started_at() const { return started_at_; }

    void observe_request(const std::string & method, const std::string & route, int status, double seconds);
    std::vector<RouteStats> routes() const;

    // Queues a run's metric point for the store (a failure is logged, never thrown at the op; a full queue
    // drops it) and counts a forward_backward's input tokens as trained on `base_model`.
    void record_training_op(const store::MetricPoint & point, const std::string & base_model, int64_t input_tokens);
    ModelActivity model_activity(const std::string & base_model) const;

    // Output thread: one sample request finished. Its counts, and a successful one's latency in its bucket
    // of the sampler's histogram (common/latency_histogram.h), are queued for the store.
    void record_sample(const SampleUsage & usage);
    // Waits (a few seconds at most) until what this process recorded so far is in the store: the
    // monitoring routes call it before reading the metrics tables, so that a client that saw an op's
    // result, or a sample's answer, finds its point and its counts.
    void flush() { writer_.flush(); }
    // After each batch of metric points is in the store, with their runs (TelemetryWriter::on_points_written).
    void on_points_written(std::function<void(const std::set<std::string> &)> callback) {
        writer_.on_points_written(std::move(callback));
    }
    // The p50 / p95 latencies of a tenant's `samplers` most recently used samplers (sampler id ->
    // quantiles), interpolated in the stored histograms (after a flush): the same numbers in this process and
    // after a restart.
    Result<std::map<std::string, SamplerLatency>> sampler_latencies(const std::string & tenant, int64_t samplers) const;

  private:
    struct ModelCounters {
        ModelActivity totals;
        RateWindow trained{60};
        RateWindow sampled{60};
    };
    store::Database & db_;
    const double started_at_;
    mutable std::mutex mutex_;  // guards the maps below
    std::map<std::tuple<std::string, std::string, int>, RouteStats> routes_;
    std::map<std::string, ModelCounters> models_;
    // Last: destroyed first, its thread writes what is queued while db_ is still there (App destroys the
    // Telemetry after stopping the engine workers and the output stage, the only other writers).
    mutable TelemetryWriter writer_;
};

}  // namespace tinkerd::api
