// ===== Console data contract (issue 14) =====
// The schemas and RouteDocs of the routes the console branches add (metrics per run, server status,
// Prometheus /metrics, the console page and its assets), written from the contract so the lead can wire
// them at merge: register each route with `route.doc = console_route_doc("GET /api/v1/server_status")`.
// Until then they are unused (no route names them), which is harmless.
#include <map>

#include "api/openapi_schemas.h"

namespace tinkerd::api {

namespace detail {

namespace {

const char * const CONSOLE_SCHEMAS = R"json({
  "MetricPoint": {"type": "object", "required": ["step", "op", "time", "duration_s", "values"],
    "properties": {"step": {"type": "integer", "minimum": 0,
        "description": "The run's optimizer step count when the op ran"},
      "op": {"enum": ["forward_backward", "forward", "optim_step"]},
      "time": {"type": "number", "description": "Seconds since the epoch"},
      "duration_s": {"type": "number", "minimum": 0},
      "values": {"type": "object", "additionalProperties": {"type": "number"},
        "description": "Every name:reduction metric of the op, num_tokens (forward ops), learning_rate (optim_step)"}}},
  "TrainingRunMetrics": {"type": "object", "required": ["training_run_id", "downsampled", "points"],
    "properties": {"training_run_id": {"type": "string"}, "downsampled": {"type": "boolean"},
      "points": {"type": "array", "items": {"$ref": "#/components/schemas/MetricPoint"}}}},
  "ModelStatus": {"type": "object",
    "required": ["base_model", "queue_depth", "kv_cache_bytes_used", "kv_cache_bytes_total", "adapters_resident",
      "snapshots_resident", "tokens_per_s_trained", "tokens_per_s_sampled", "engine_busy_fraction", "data_parallel"],
    "properties": {"base_model": {"type": "string"}, "queue_depth": {"type": "integer", "minimum": 0},
      "kv_cache_bytes_used": {"type": "integer", "minimum": 0},
      "kv_cache_bytes_total": {"type": "integer", "minimum": 0},
      "adapters_resident": {"type": "integer", "minimum": 0},
      "snapshots_resident": {"type": "integer", "minimum": 0},
      "tokens_per_s_trained": {"type": "number", "minimum": 0},
      "tokens_per_s_sampled": {"type": "number", "minimum": 0},
      "engine_busy_fraction": {"type": "number", "minimum": 0, "maximum": 1},
      "sampling_replicas": {"type": "array", "description": "--sampling-replicas: each replica's state",
        "items": {"type": "object", "required": ["replica", "healthy", "requests_in_flight", "kv_cache_bytes_used",
            "adapters_resident", "engine_busy_fraction"],
          "properties": {"replica": {"type": "integer", "minimum": 1}, "healthy": {"type": "boolean"},
            "requests_in_flight": {"type": "integer", "minimum": 0},
            "kv_cache_bytes_used": {"type": "integer", "minimum": 0},
            "adapters_resident": {"type": "integer", "minimum": 0},
            "engine_busy_fraction": {"type": "number", "minimum": 0, "maximum": 1}}}},
      "data_parallel": {"type": "object", "required": ["ranks", "world_size", "generation"],
        "description": "Ranks training now (1 while rank 0 trains alone after a failure), the group's size, and its generation (re-formations after failures)",
        "properties": {"ranks": {"type": "integer", "minimum": 1}, "world_size": {"type": "integer", "minimum": 1},
          "generation": {"type": "integer", "minimum": 0}}}}},
  "SamplerStatus": {"type": "object",
    "required": ["sampler_id", "base_model", "requests", "tokens_sampled", "latency_p50_s", "latency_p95_s"],
    "properties": {"sampler_id": {"type": "string"}, "base_model": {"type": "string"},
      "requests": {"type": "integer", "minimum": 0}, "tokens_sampled": {"type": "integer", "minimum": 0},
      "latency_p50_s": {"type": ["number", "null"]}, "latency_p95_s": {"type": ["number", "null"]}}},
  "SessionStatus": {"type": "object", "required": ["session_id", "age_s", "training_runs", "samplers"],
    "properties": {"session_id": {"type": "string"}, "age_s": {"type": "number"},
      "training_runs": {"type": "integer", "minimum": 0}, "samplers": {"type": "integer", "minimum": 0}}},
  "KernelStatus": {"type": "object", "description": "how the CPU multiplies by bf16 base weights (--matmul)",
    "required": ["matmul", "inputs", "kernel", "isa", "bf16_dot", "cpu", "threads", "measured", "from_cache", "reason"],
    "properties": {"matmul": {"enum": ["auto", "exact", "bf16"]}, "inputs": {"enum": ["fp32", "bf16"]},
      "kernel": {"enum": ["blas-fp32", "brgemm-bf16", "generic"]}, "isa": {"enum": ["avx512", "avx2", "generic"]},
      "bf16_dot": {"type": "boolean", "description": "few-row bf16-input products on AVX-512-BF16 (VDPBF16PS)"},
      "fp32_copies": {"type": "boolean",
        "description": "exact many-row products on fp32 copies of the bf16 weights (timed faster; decode keeps bf16)"},
      "fp32_copy_budget_bytes": {"type": "integer", "minimum": 0, "description": "the most the copies may take"},
      "cpu": {"type": "string"}, "threads": {"type": "integer", "minimum": 0},
      "mkl": {"type": "string",
        "description": "how MKL (the fp32 BLAS) picks its code: 'by features (<vendor>)' (the default off Intel), 'vendor (...)' under TINKERD_MKL_CPU_CHECK=vendor, or 'GenuineIntel'"},
      "measured": {"type": "object", "additionalProperties": {"type": "number"},
        "description": "GFLOP/s of each timed candidate (exact-fp32_gflops, exact-fp32-copies_gflops, bf16-brgemm_gflops); empty when forced"},
      "from_cache": {"type": "boolean"}, "reason": {"type": "string"},
      "sample_activations": {"type": "string",
        "description": "--sample-activations: fp32, or int8 with the kernel path (or why it has no effect)"}}},
  "ServerStatus": {"type": "object",
    "required": ["version", "uptime_s", "futures_pending", "models", "kernels", "samplers", "sessions"],
    "description": "samplers and sessions: the caller's tenant's only",
    "properties": {"version": {"type": "string"}, "uptime_s": {"type": "number", "minimum": 0},
      "futures_pending": {"type": "integer", "minimum": 0},
      "kernels": {"$ref": "#/components/schemas/KernelStatus"},
      "models": {"type": "array", "items": {"$ref": "#/components/schemas/ModelStatus"}},
      "samplers": {"type": "array", "items": {"$ref": "#/components/schemas/SamplerStatus"}},
      "sessions": {"type": "array", "items": {"$ref": "#/components/schemas/SessionStatus"}}}}
})json";

}  // namespace

std::vector<const char *> console_schema_texts() {
    return {CONSOLE_SCHEMAS};
}

}  // namespace detail

RouteDoc console_route_doc(const std::string & method_and_pattern) {
    static const std::map<std::string, RouteDoc> docs = [] {
        std::map<std::string, RouteDoc> out;
        RouteDoc metrics =
            route_doc("console", "A training run's recorded metrics, oldest first", "", "TrainingRunMetrics");
        metrics.query = {"since_step"};
        out["GET /api/v1/training_runs/{run_id}/metrics"] = metrics;
        RouteDoc events =
            route_doc("console", "A training run's live events (Server-Sent Events: metrics, checkpoints, run)", "", "",
                      KeyCheck::TINKER);
        events.query = {"since_step", "last_event_id"};
        events.response_media = {"text/event-stream"};
        events.description =
            "Pushes what the console's run page polls for: `event: metrics` (new points, `id:` = the last point's "
            "number; resume with Last-Event-ID), `event: checkpoints` (the run's list, when it changes), `event: run` "
            "(the run as GET /api/v1/training_runs/{run_id} answers it, plus `loaded`, when it changes), and a "
            "`: keepalive` comment every 15 s. 429 (code unavailable) when --max-event-streams streams are open "
            "(docs/console.md).";
        out["GET /api/v1/training_runs/{run_id}/events"] = events;
        RouteDoc console_events = route_doc(
            "console", "The console views' live events (Server-Sent Events: runs, status, several runs' metrics)", "",
            "", KeyCheck::TINKER);
        console_events.query = {"topics", "run_ids", "runs_limit", "since_step"};
        console_events.response_media = {"text/event-stream"};
        console_events.description =
            "Pushes what the console's runs list, compare and status views poll for, each event when its content "
            "changed: topics=runs sends `event: runs` ({training_runs: [{training_run_id, base_model, lora_rank, "
            "last_request_time, loaded, steps, last_loss, first_time, last_time}], total_count}: the caller's "
            "newest `limit` runs, 1-200, default 50); topics=status sends `event: status` ({status: as GET "
            "/api/v1/server_status, session_ids: as GET /api/v1/sessions?limit=100}); topics=metrics with run_ids "
            "(1-8 of the caller's runs, else 404) sends `event: metrics` ({training_run_id, points, downsampled, "
            "since_step}: a run's new points, the first batch from since_step on). Runs and status follow every "
            "recorded point and checkpoint change (at most once a second) and a 2 s tick. No Last-Event-ID: a "
            "client resumes with since_step. 400 names a bad or misplaced parameter; 429 (code unavailable) when "
            "--max-event-streams streams are open (docs/console.md).";
        out["GET /api/v1/events"] = console_events;
        out["GET /api/v1/server_status"] = route_doc(
            "console", "Models, queues, KV cache, throughput; the caller's samplers and sessions", "", "ServerStatus");
        RouteDoc prometheus =
            route_doc("meta", "Prometheus metrics (text format; labelled by base model)", "", "", KeyCheck::NONE);
        prometheus.response_media = {"text/plain"};
        out["GET /metrics"] = prometheus;
        RouteDoc page = route_doc("console", "The web console (it asks for the API key)", "", "", KeyCheck::NONE);
        page.response_media = {"text/html"};
        out["GET /"] = page;
        RouteDoc asset = route_doc("console", "A static asset of the console", "", "", KeyCheck::NONE);
        asset.response_media = {"text/javascript", "text/css", "image/svg+xml"};
        out["GET /console/{asset...}"] = asset;
        return out;
    }();
    auto it = docs.find(method_and_pattern);
    return it == docs.end() ? RouteDoc{} : it->second;
}

}  // namespace tinkerd::api
