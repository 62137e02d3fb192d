// Telemetry: request counters and latency histograms, per-model token totals and rates, per-sampler
// counts and latency quantiles (from the store's histograms), and the runs' metric points.
#include "api/telemetry.h"

#include <algorithm>
#include <cstring>

#include "api/json_util.h"
#include "common/latency_histogram.h"
#include "common/log.h"

namespace tinkerd::api {
namespace {

// The tensor's elements as doubles when it is a float tensor (weights are), else empty.
std::vector<double> float_values(const engine::HostTensor & t) {
    std::vector<double> out;
    if (t.dtype == model::DType::F32) {
        out.resize(t.bytes.size() / sizeof(float));
        for (size_t i = 0; i < out.size(); ++i) {
            float v = 0;
            std::memcpy(&v, t.bytes.data() + i * sizeof(float), sizeof(float));
            out[i] = v;
        }
    } else if (t.dtype == model::DType::F64) {
        out.resize(t.bytes.size() / sizeof(double));
        std::memcpy(out.data(), t.bytes.data(), out.size() * sizeof(double));
    }
    return out;
}

}  // namespace

int64_t loss_bearing_tokens(const engine::Datum & datum) {
    auto targets = datum.loss_inputs.find("target_tokens");
    const int64_t positions = targets != datum.loss_inputs.end() && !targets->second.shape.empty()
                                  ? targets->second.shape[0]
                                  : static_cast<int64_t>(datum.tokens.size());
    auto weights = datum.loss_inputs.find("weights");
    if (weights == datum.loss_inputs.end() || weights->second.shape.empty()) {
        return positions;
    }
    const std::vector<double> values = float_values(weights->second);
    const int64_t rows = weights->second.shape[0];
    if (values.empty() || rows <= 0) {
        return positions;
    }
    const size_t per_row = values.size() / static_cast<size_t>(rows);  // [N] or [N, K]
    int64_t bearing = 0;
    for (int64_t r = 0; r < rows; ++r) {
        const auto first = values.begin() + static_cast<std::ptrdiff_t>(static_cast<size_t>(r) * per_row);
        bearing += std::any_of(first, first + static_cast<std::ptrdiff_t>(per_row), [](double w) { return w > 0; });
    }
    return bearing;
}

Telemetry::Telemetry(store::Database & db, int64_t max_points_per_op)
    : db_(db), started_at_(now_seconds()), writer_(db, TelemetryWriter::Options{max_points_per_op}) {}

void Telemetry::observe_request(const std::string & method, const std::string & route, int status, double seconds) {
    std::lock_guard lock(mutex_);
    RouteStats & stats = routes_[{method, route, status}];
    if (stats.count == 0) {
        stats.method = method;
        stats.route = route;
        stats.status = status;
    }
    stats.count++;
    stats.sum_seconds += seconds;
    for (size_t i = 0; i < LATENCY_BUCKETS.size(); ++i) {
        if (seconds <= LATENCY_BUCKETS[i]) {
            stats.bucket_counts[i]++;
            break;
        }
    }
}

std::vector<RouteStats> Telemetry::routes() const {
    std::lock_guard lock(mutex_);
    std::vector<RouteStats> out;
    out.reserve(routes_.size());
    for (const auto & [key, stats] : routes_) {
        out.push_back(stats);
    }
    return out;
}

void Telemetry::record_training_op(const store::MetricPoint & point, const std::string & base_model,
                                   int64_t input_tokens) {
    writer_.add_point(point);
    if (point.op != "forward_backward") {
        return;
    }
    std::lock_guard lock(mutex_);
    ModelCounters & model = models_[base_model];
    model.totals.tokens_trained += input_tokens;
    model.trained.add(point.time, static_cast<double>(input_tokens));
}

ModelActivity Telemetry::model_activity(const std::string & base_model) const {
    const double now = now_seconds();
    std::lock_guard lock(mutex_);
    auto it = models_.find(base_model);
    if (it == models_.end()) {
        return {};
    }
    ModelActivity out = it->second.totals;
    out.trained_per_s = it->second.trained.rate(now, now - started_at_);
    out.sampled_per_s = it->second.sampled.rate(now, now - started_at_);
    return out;
}

void Telemetry::record_sample(const SampleUsage & usage) {
    const double now = now_seconds();
    {
        std::lock_guard lock(mutex_);
        ModelCounters & model = models_[usage.base_model];
        model.totals.tokens_sampled += usage.tokens;
        model.totals.sample_requests++;
        model.sampled.add(now, static_cast<double>(usage.tokens));
    }
    store::SamplerUsageRow delta{usage.sampler_id, usage.tenant, usage.base_model, 1, usage.tokens, now};
    const std::optional<int> bucket =
        usage.ok ? std::optional<int>(latency_histogram::bucket_of(usage.latency_s)) : std::nullopt;
    writer_.add_usage(store::SamplerUsageDelta{delta, bucket});
}

Result<std::map<std::string, SamplerLatency>> Telemetry::sampler_latencies(const std::string & tenant,
                                                                           int64_t samplers) const {
    writer_.flush();
    auto histograms = db_.sampler_latency_counts(tenant, samplers);
    if (!histograms.ok()) {
        return histograms.error();
    }
    std::map<std::string, SamplerLatency> out;
    for (const auto & [sampler_id, counts] : *histograms) {
        out[sampler_id] =
            SamplerLatency{latency_histogram::quantile(counts, 0.5), latency_histogram::quantile(counts, 0.95)};
    }
    return out;
}

}  // namespace tinkerd::api
