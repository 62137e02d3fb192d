// Monitoring routes (issue 14): GET /api/v1/training_runs/{run_id}/metrics (a run's recorded points),
// GET /api/v1/server_status (models' load, the caller's samplers and sessions) and GET /metrics (the
// Prometheus text format, no key: labelled by base model and route pattern, never by tenant).
#include <filesystem>
#include <fstream>
#include <unistd.h>

#include "api/prometheus.h"
#include "api/tinker_routes.h"
#include "common/version.h"
#include "engine/data_parallel_status.h"
#include "engine/kernel_choice.h"

namespace tinkerd::api {

namespace {

constexpr int64_t MAX_LISTED = 100;  // samplers and sessions in server_status

}  // namespace

Result<int64_t> since_step_of(const http::Request & req) {
    auto it = req.query.find("since_step");
    if (it == req.query.end()) {
        return int64_t{0};
    }
    try {
        size_t used = 0;
        const int64_t step = std::stoll(it->second, &used);
        if (used == it->second.size() && step >= 0) {
            return step;
        }
    } catch (const std::exception &) {
    }
    return invalid_argument("since_step: expected a non-negative integer, got '" + it->second.substr(0, 64) + "'");
}

json metric_point_json(const store::MetricPoint & p) {
    return json{{"step", p.step}, {"op", p.op}, {"time", p.time}, {"duration_s", p.duration_s}, {"values", p.values}};
}

namespace {

int64_t file_bytes(const std::string & path) {
    std::error_code ec;
    const auto size = std::filesystem::file_size(path, ec);
    return ec ? 0 : static_cast<int64_t>(size);
}

// The process's resident set (the second field of /proc/self/statm, in pages); 0 where there is none.
int64_t resident_bytes() {
    std::ifstream statm("/proc/self/statm");
    int64_t total_pages = 0;
    int64_t resident_pages = 0;
    if (!(statm >> total_pages >> resident_pages)) {
        return 0;
    }
    return resident_pages * static_cast<int64_t>(sysconf(_SC_PAGESIZE));
}

json optional_number(const std::optional<double> & value) {
    return value ? json(*value) : json(nullptr);
}

}  // namespace

Result<json> TinkerRoutes::run_metrics(Call & call) {
    auto row = registry_->find_run_row(call.tenant, call.params["run_id"], false);
    if (!row.ok()) {
        return row.error();
    }
    auto since_step = since_step_of(call.req);
    if (!since_step.ok()) {
        return since_step.error();
    }
    telemetry_->flush();  // this process's points queued so far, e.g. of an op whose result the client has seen
    auto points = db_->metric_points(row->run_id, *since_step);
    auto downsampled = db_->metrics_downsampled(row->run_id);
    if (!points.ok() || !downsampled.ok()) {
        return points.ok() ? downsampled.error() : points.error();
    }
    json list = json::array();
    for (const auto & p : *points) {
        list.push_back(metric_point_json(p));
    }
    return json{{"training_run_id", row->run_id}, {"downsampled", *downsampled}, {"points", list}};
}

// A served model's load: the worker's queues and KV cache, resident adapters and snapshots, token rates.
json TinkerRoutes::model_status_json(const ServedModel & model) const {
    const scheduler::WorkerLoad load = model.worker->load();
    const ModelActivity activity = telemetry_->model_activity(model.name);
    const auto live_runs = registry_->runs_where([&](const RunState & r) { return r.model == &model && r.loaded; });
    json replicas = json::array();
    for (size_t i = 0; i < model.replicas.size(); ++i) {
        const auto & replica = *model.replicas[i];
        const scheduler::WorkerLoad r = replica.worker->load();
        replicas.push_back(json{{"replica", static_cast<int64_t>(i + 1)},
                                {"healthy", !replica.healthy || replica.healthy()},
                                {"requests_in_flight", replica.in_flight.load()},
                                {"kv_cache_bytes_used", r.kv_bytes_used},
                                {"adapters_resident", r.sampler_adapters},
                                {"engine_busy_fraction", r.busy_fraction}});
    }
    const engine::DataParallelStatus dp = engine::data_parallel_status_of(*model.engine);
    return json{{"base_model", model.name},
                {"sampling_replicas", replicas},
                {"queue_depth", load.queued_ops + load.queued_samples},
                {"kv_cache_bytes_used", load.kv_bytes_used},
                {"kv_cache_bytes_total", load.kv_bytes_total},
                {"adapters_resident", static_cast<int64_t>(live_runs.size()) + load.sampler_adapters},
                {"snapshots_resident", registry_->cached_snapshots(model.name)},
                {"tokens_per_s_trained", activity.trained_per_s},
                {"tokens_per_s_sampled", activity.sampled_per_s},
                {"engine_busy_fraction", load.busy_fraction},
                {"data_parallel", {{"ranks", dp.ranks}, {"world_size", dp.world_size}, {"generation", dp.generation}}}};
}

// The caller's samplers (counts from sampler_usage, latency quantiles from sampler_latency's histograms).
Result<json> TinkerRoutes::samplers_status_json(const std::string & tenant) const {
    telemetry_->flush();
    auto usage = db_->sampler_usage(tenant);
    if (!usage.ok()) {
        return usage.error();
    }
    auto latencies = telemetry_->sampler_latencies(tenant, MAX_LISTED);
    if (!latencies.ok()) {
        return latencies.error();
    }
    json list = json::array();
    for (const auto & u : *usage) {
        if (static_cast<int64_t>(list.size()) >= MAX_LISTED) {
            break;
        }
        auto found = latencies->find(u.sampler_id);
        const SamplerLatency latency = found == latencies->end() ? SamplerLatency{} : found->second;
        list.push_back(json{{"sampler_id", u.sampler_id},
                            {"base_model", u.base_model},
                            {"requests", u.requests},
                            {"tokens_sampled", u.tokens_sampled},
                            {"latency_p50_s", optional_number(latency.p50)},
                            {"latency_p95_s", optional_number(latency.p95)}});
    }
    return list;
}

// The caller's live sessions, newest first, with their runs and samplers counted.
Result<json> TinkerRoutes::sessions_status_json(const std::string & tenant) const {
    auto sessions = db_->list_sessions(tenant, store::Page{MAX_LISTED, 0});
    if (!sessions.ok()) {
        return sessions.error();
    }
    const double now = now_seconds();
    json list = json::array();
    for (const auto & s : sessions->first) {
        if (s.expired) {
            continue;
        }
        auto runs = db_->runs_of_session(s.session_id);
        auto samplers = db_->samplers_of_session(s.session_id);
        list.push_back(json{{"session_id", s.session_id},
                            {"age_s", now - s.created_at},
                            {"training_runs", runs.ok() ? runs->size() : 0},
                            {"samplers", samplers.ok() ? samplers->size() : 0}});
    }
    return list;
}

namespace {

// The process's matmul path for bf16 weights (--matmul) and the timings it was chosen on.
json kernels_json(const engine::KernelChoice & c) {
    json candidates = json::object();
    for (const auto & candidate : c.candidates) {
        candidates[candidate.name + "_gflops"] = candidate.gflops;
    }
    return json{{"matmul", c.mode},
                {"inputs", c.inputs},
                {"kernel", c.kernel},
                {"isa", c.isa},
                {"bf16_dot", c.bf16_dot},
                {"fp32_copies", c.fp32_copies},
                {"fp32_copy_budget_bytes", c.fp32_copy_budget},
                {"cpu", c.cpu},
                {"mkl", c.mkl},
                {"threads", c.threads},
                {"measured", candidates},
                {"from_cache", c.from_cache},
                {"reason", c.reason},
                {"sample_activations", c.sample_activations}};
}

}  // namespace

Result<json> TinkerRoutes::server_status(Call & call) {
    json models = json::array();
    for (const auto & model : registry_->models()) {
        models.push_back(model_status_json(*model));
    }
    auto samplers = samplers_status_json(call.tenant);
    auto sessions = sessions_status_json(call.tenant);
    if (!samplers.ok() || !sessions.ok()) {
        return samplers.ok() ? sessions.error() : samplers.error();
    }
    return json{{"version", SERVER_VERSION},
                {"uptime_s", now_seconds() - telemetry_->started_at()},
                {"futures_pending", futures_->pending_futures()},
                {"models", models},
                {"kernels", kernels_json(options_.kernels)},
                {"samplers", *samplers},
                {"sessions", *sessions}};
}

void TinkerRoutes::prometheus_metrics(Call &, http::Respond respond) {
    PrometheusText out;
    write_process_metrics(out);
    write_http_metrics(out);
    write_model_metrics(out);
    http::Response response;
    response.content_type = "text/plain; version=0.0.4; charset=utf-8";
    response.body = out.text();
    respond(std::move(response));
}

void TinkerRoutes::write_process_metrics(PrometheusText & out) const {
    out.family("tinkerd_build_info", "gauge", "Always 1; the version label names the build.");
    out.sample("tinkerd_build_info", {{"version", SERVER_VERSION}}, 1);
    out.family("tinkerd_uptime_seconds", "gauge", "Seconds since the server started.");
    out.sample("tinkerd_uptime_seconds", {}, now_seconds() - telemetry_->started_at());
    out.family("tinkerd_futures_pending", "gauge", "Futures (queued or running requests) not finished yet.");
    out.sample("tinkerd_futures_pending", {}, static_cast<double>(futures_->pending_futures()));
    out.family("tinkerd_process_resident_memory_bytes", "gauge", "Resident set size of the server process.");
    out.sample("tinkerd_process_resident_memory_bytes", {}, static_cast<double>(resident_bytes()));
    const std::string db_path = options_.data_dir + "/tinkerd.db";
    out.family("tinkerd_sqlite_bytes", "gauge", "Size of tinkerd.db and its write-ahead log.");
    out.sample("tinkerd_sqlite_bytes", {}, static_cast<double>(file_bytes(db_path) + file_bytes(db_path + "-wal")));
}

void TinkerRoutes::write_http_metrics(PrometheusText & out) const {
    const std::vector<RouteStats> routes = telemetry_->routes();
    const std::vector<double> bounds(LATENCY_BUCKETS.begin(), LATENCY_BUCKETS.end());
    auto labels = [](const RouteStats & r) {
        return PrometheusText::Labels{{"method", r.method}, {"route", r.route}, {"status", std::to_string(r.status)}};
    };
    out.family("tinkerd_http_requests_total", "counter", "HTTP requests answered, by route pattern and status.");
    for (const auto & r : routes) {
        out.sample("tinkerd_http_requests_total", labels(r), static_cast<double>(r.count));
    }
    out.family("tinkerd_http_request_duration_seconds", "histogram",
               "Time from a request's arrival to its answer (held polls included), by route pattern and status.");
    for (const auto & r : routes) {
        const std::vector<int64_t> counts(r.bucket_counts.begin(), r.bucket_counts.end());
        out.histogram("tinkerd_http_request_duration_seconds", labels(r), bounds, counts, r.sum_seconds, r.count);
    }
}

void TinkerRoutes::write_model_metrics(PrometheusText & out) const {
    struct Row {
        std::string name;
        scheduler::WorkerLoad load;
        ModelActivity activity;
        double training_adapters = 0;
        double snapshots = 0;
        engine::DataParallelStatus dp;
    };
    std::vector<Row> rows;
    for (const auto & model : registry_->models()) {
        const ServedModel * m = model.get();
        const auto live = registry_->runs_where([&](const RunState & r) { return r.model == m && r.loaded; });
        rows.push_back({m->name, m->worker->load(), telemetry_->model_activity(m->name),
                        static_cast<double>(live.size()), static_cast<double>(registry_->cached_snapshots(m->name)),
                        engine::data_parallel_status_of(*m->engine)});
    }
    using Getter = std::function<double(const Row &)>;
    auto family = [&](const std::string & name, const char * type, const std::string & help, const Getter & get) {
        out.family(name, type, help);
        for (const Row & row : rows) {
            out.sample(name, {{"base_model", row.name}}, get(row));
        }
    };
    auto by_kind = [&](const std::string & name, const std::string & help, const Getter & first, const Getter & second,
                       const char * first_kind, const char * second_kind) {
        out.family(name, "gauge", help);
        for (const Row & row : rows) {
            out.sample(name, {{"base_model", row.name}, {"kind", first_kind}}, first(row));
            out.sample(name, {{"base_model", row.name}, {"kind", second_kind}}, second(row));
        }
    };
    by_kind(
        "tinkerd_queue_depth", "Operations waiting for the engine: training ops and sample requests.",
        [](const Row & r) { return double(r.load.queued_ops); },
        [](const Row & r) { return double(r.load.queued_samples); }, "training", "sampling");
    family("tinkerd_samples_running", "gauge", "Sample requests in the engine's decode batch.",
           [](const Row & r) { return double(r.load.running_samples); });
    family("tinkerd_engine_busy_seconds_total", "counter", "Time the engine thread spent on steps.",
           [](const Row & r) { return r.load.busy_seconds; });
    family("tinkerd_engine_busy_ratio", "gauge", "Fraction of the last minute the engine thread was busy.",
           [](const Row & r) { return r.load.busy_fraction; });
    family("tinkerd_tokens_trained_total", "counter", "Input tokens of forward_backward operations.",
           [](const Row & r) { return double(r.activity.tokens_trained); });
    family("tinkerd_tokens_sampled_total", "counter", "Tokens generated (every sequence counted).",
           [](const Row & r) { return double(r.activity.tokens_sampled); });
    family("tinkerd_sample_requests_total", "counter", "Sample requests finished (asample, OpenAI prompts).",
           [](const Row & r) { return double(r.activity.sample_requests); });
    family("tinkerd_tokens_trained_per_second", "gauge", "Tokens trained per second over the last minute.",
           [](const Row & r) { return r.activity.trained_per_s; });
    family("tinkerd_tokens_sampled_per_second", "gauge", "Tokens sampled per second over the last minute.",
           [](const Row & r) { return r.activity.sampled_per_s; });
    family("tinkerd_kv_cache_bytes", "gauge", "KV-cache bytes reserved by running sample requests.",
           [](const Row & r) { return double(r.load.kv_bytes_used); });
    family("tinkerd_kv_cache_budget_bytes", "gauge", "The KV-cache budget (--kv-cache-mib).",
           [](const Row & r) { return double(r.load.kv_bytes_total); });
    by_kind(
        "tinkerd_adapters_resident", "LoRA adapters in memory: loaded training runs and imported samplers.",
        [](const Row & r) { return r.training_adapters; },
        [](const Row & r) { return double(r.load.sampler_adapters); }, "training", "sampler");
    family("tinkerd_snapshots_resident", "gauge", "Sampler snapshots cached in memory.",
           [](const Row & r) { return r.snapshots; });
    family("tinkerd_dp_ranks", "gauge",
           "Data-parallel ranks training now (1 while rank 0 trains alone after a failure, or without --dp).",
           [](const Row & r) { return double(r.dp.ranks); });
    family("tinkerd_dp_generation", "gauge", "Times the data-parallel group re-formed after a failure.",
           [](const Row & r) { return double(r.dp.generation); });
}

}  // namespace tinkerd::api
