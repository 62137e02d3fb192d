// TinkerRoutes set-up: the /api/v1/ route table (SDK 0.38 endpoints we refuse by name included), start-up
// recovery from the last process, the sweeper and snapshot writer threads' start and stop, and the helpers
// every Tinker handler shares (futures recorded in SQLite, the disk-room check, a run's adapter config).
#include "api/tinker_routes.h"

#include "api/openapi_schemas.h"
#include "common/log.h"

namespace tinkerd::api {

bool TinkerRoutes::takes_seq_id(const std::string & path) {
    for (const char * op : {"forward_backward", "forward", "optim_step", "save_weights", "save_weights_for_sampler",
                            "load_weights", "save_weights_external"}) {
        if (path == std::string("/api/v1/") + op) {
            return true;
        }
    }
    return false;
}

TinkerRoutes::TinkerRoutes(AppOptions options, TinkerDeps deps)
    : options_(std::move(options)),
      db_(deps.db),
      disk_reserve_(deps.disk_reserve),
      futures_(deps.futures),
      registry_(deps.registry),
      sampling_(deps.sampling),
      telemetry_(deps.telemetry),
      events_(deps.events) {}

void TinkerRoutes::start() {
    sweeper_ = std::thread([this] { sweeper_loop(); });
    snapshot_writer_ = std::thread([this] { snapshot_writer_loop(); });
}

void TinkerRoutes::stop_sweeper() {
    shutting_down_ = true;
    completion_queues_.stop();  // held retrieve_futures polls are answered (empty) now
    {
        std::lock_guard<std::mutex> lock(sweeper_mutex_);
        stopping_ = true;
    }
    sweeper_wake_.notify_all();
    if (sweeper_.joinable()) {
        sweeper_.join();
    }
}

void TinkerRoutes::stop_snapshot_writer() {
    {
        std::lock_guard<std::mutex> lock(snapshot_mutex_);
        snapshot_writer_stopping_ = true;
    }
    snapshot_wake_.notify_all();
    if (snapshot_writer_.joinable()) {
        snapshot_writer_.join();
    }
}

void TinkerRoutes::add_sync(const std::string & method, const std::string & path, SyncHandler handler, RouteDoc doc,
                            bool json_body) {
    Route route;
    route.sync = [this, handler](Call & call) { return (this->*handler)(call); };
    route.json_body = json_body;
    route.doc = std::move(doc);
    router_->add(method, "/api/v1/" + path, route);
}

void TinkerRoutes::add_async(const std::string & method, const std::string & path, AsyncHandler handler, RouteDoc doc,
                             bool json_body) {
    Route route;
    route.async = [this, handler](Call & call, http::Respond respond) { (this->*handler)(call, std::move(respond)); };
    route.needs_auth = doc.key == KeyCheck::TINKER;
    route.json_body = json_body;
    route.doc = std::move(doc);
    router_->add(method, "/api/v1/" + path, route);
}

// The route table: each route with its documentation (route_doc.h; schemas in openapi_schemas_tinker.cpp).
void TinkerRoutes::add_routes(Router<Route> & router) {
    router_ = &router;
    register_unsupported_routes();
    add_sync("POST", "sessions/search", &TinkerRoutes::search_sessions,  // before "sessions/{session_id}"
             route_doc("sessions", "Search the caller's sessions (id, display name, user_metadata, status)",
                       "SessionSearchRequest", "SessionSearchResponse"));
    RouteDoc storage =
        route_doc("rest", "The caller's checkpoint storage by project (no prices)", "", "CheckpointStorageUsage");
    storage.query = {"project_id"};
    add_sync("GET", "billing/usage/checkpoints/current", &TinkerRoutes::checkpoint_storage_usage, storage);
    add_session_routes();
    add_training_routes();
    add_rest_routes();
}

void TinkerRoutes::add_session_routes() {
    const std::string tag = "sessions";
    add_sync("POST", "client/config", &TinkerRoutes::client_config,
             route_doc(tag, "The SDK's client configuration (transport and feature flags)", "ClientConfigRequest",
                       "ClientConfig"));
    add_sync("POST", "client/dynamic_config", &TinkerRoutes::dynamic_config,
             route_doc(tag, "The SDK's refreshed configuration", "ClientConfigRequest", "DynamicConfig"));
    add_sync("GET", "get_server_capabilities", &TinkerRoutes::server_capabilities,
             route_doc(tag, "The served base models", "", "ServerCapabilities"));
    add_sync("POST", "create_session", &TinkerRoutes::create_session,
             route_doc(tag, "Start a session (tags, user_metadata, project)", "CreateSessionRequest",
                       "CreateSessionResponse"));
    add_sync("POST", "session_heartbeat", &TinkerRoutes::session_heartbeat,
             route_doc(tag, "Keep a session alive", "SessionHeartbeatRequest", "SessionHeartbeatResponse"));
    add_sync("POST", "telemetry", &TinkerRoutes::telemetry,
             route_doc(tag, "SDK telemetry events (logged, one line each)", "TelemetryRequest", "TelemetryResponse"));
    add_sync("POST", "sessions/{session_id}/finish", &TinkerRoutes::finish_session,
             route_doc(tag, "End a session now: its models leave memory, its checkpoints stay", "FinishSessionRequest",
                       "Empty"));
    Route health;
    health.sync = [this](Call & call) { return healthz(call); };
    health.needs_auth = false;
    health.doc = route_doc("meta", "Liveness", "", "Health", KeyCheck::NONE);
    router_->add("GET", "/api/v1/healthz", health);
    Route prometheus;  // no key: scrapers have none, and nothing in it names a tenant
    prometheus.async = [this](Call & call, http::Respond respond) { prometheus_metrics(call, std::move(respond)); };
    prometheus.needs_auth = false;
    prometheus.json_body = false;
    prometheus.doc = console_route_doc("GET /metrics");
    router_->add("GET", "/metrics", prometheus);
}

void TinkerRoutes::add_training_routes() {
    const std::string tag = "training";
    add_sync("POST", "create_model", &TinkerRoutes::create_model,
             route_doc(tag, "Create a LoRA training run (a future)", "CreateModelRequest", "FutureSubmitted"));
    add_sync("POST", "get_info", &TinkerRoutes::get_info,
             route_doc(tag, "A loaded training run's model and tokenizer", "ModelIdRequest", "GetInfoResponse"));
    add_sync("POST", "unload_model", &TinkerRoutes::unload_model,
             route_doc(tag, "Unload a training run (a future)", "ModelIdRequest", "FutureSubmitted"));
    RouteDoc fb = route_doc(tag, "Forward and backward pass on a batch (a future; protobuf or legacy JSON)",
                            "ForwardBackwardJsonRequest", "FutureSubmitted");
    fb.request_media = {"application/x-protobuf"};
    fb.description =
        "SDK >= 0.25 sends tinker_public.ForwardBackwardRequest as application/x-protobuf "
        "(optionally Content-Encoding: zstd); older SDKs the JSON form.";
    add_sync("POST", "forward_backward", &TinkerRoutes::forward_backward, fb, false);
    add_sync("POST", "forward", &TinkerRoutes::forward_backward,  // SDK <= 0.24: {"forward_input": ...}
             route_doc(tag, "Forward pass only, legacy JSON (SDK <= 0.24; a future)", "ForwardJsonRequest",
                       "FutureSubmitted"),
             false);
    add_sync(
        "POST", "optim_step", &TinkerRoutes::optim_step,
        route_doc(tag, "AdamW step on the accumulated gradients (a future)", "OptimStepRequest", "FutureSubmitted"));
    add_sync("POST", "save_weights", &TinkerRoutes::save_weights,
             route_doc(tag, "Save a training checkpoint with optimizer state (a future)", "SaveWeightsRequest",
                       "FutureSubmitted"));
    add_sync("POST", "save_weights_for_sampler", &TinkerRoutes::save_weights_for_sampler,
             route_doc(tag, "Save sampler weights, named or as a snapshot (a future)", "SaveWeightsForSamplerRequest",
                       "FutureSubmitted"));
    add_sync("POST", "load_weights", &TinkerRoutes::load_weights,
             route_doc(tag, "Load a checkpoint into a run, or create a run from it (a future)", "LoadWeightsRequest",
                       "FutureSubmitted"));
    add_sync("POST", "weights_info", &TinkerRoutes::weights_info,
             route_doc(tag, "A checkpoint's base model and LoRA settings", "WeightsInfoRequest", "WeightsInfo"));
    add_sync("POST", "create_sampling_session", &TinkerRoutes::create_sampling_session,
             route_doc("sampling", "Create a sampler on a base model or a sampler checkpoint",
                       "CreateSamplingSessionRequest", "CreateSamplingSessionResponse"));
    RouteDoc queue =
        route_doc("futures", "Long-poll a sampling session's completed samples (SDK 0.38 retrieve_futures)",
                  "FuturesRetrieveRequest", "FuturesRetrieveResponse");
    add_async("POST", "retrieve_futures", &TinkerRoutes::retrieve_futures, queue, true);
    add_sync("POST", "cancel_future", &TinkerRoutes::cancel_future,
             route_doc("futures", "Stop an abandoned sample: its future fails 'cancelled by cancel_future'",
                       "CancelFutureRequest", "Empty"));
    add_sync("POST", "asample", &TinkerRoutes::asample,
             route_doc("sampling", "Sample or compute logprobs (a future; 429 when the queue is full)", "SampleRequest",
                       "SampleSubmitted"));
    RouteDoc poll = route_doc("futures", "Long-poll a future: its result, its error, or try_again",
                              "RetrieveFutureRequest", "FutureResult");
    poll.response_media = {"application/x-protobuf"};
    poll.description =
        "Sample and forward_backward results come as protobuf when Accept asks for "
        "application/x-protobuf. The poll is held up to --poll-timeout-seconds.";
    add_async("POST", "retrieve_future", &TinkerRoutes::retrieve_future, poll, true);
}

void TinkerRoutes::add_rest_routes() {
    const std::string tag = "rest";
    const std::string ckpt = "training_runs/{run_id}/checkpoints/{kind}/{name}";
    RouteDoc runs = route_doc(tag, "The caller's training runs", "", "TrainingRunList");
    runs.query = {"limit", "offset", "access_scope"};
    add_sync("GET", "training_runs", &TinkerRoutes::list_training_runs, runs);
    RouteDoc run = route_doc(tag, "One training run", "", "TrainingRun");
    run.query = {"access_scope"};
    add_sync("GET", "training_runs/{run_id}", &TinkerRoutes::get_training_run, run);
    add_sync("GET", "training_runs/{run_id}/checkpoints", &TinkerRoutes::list_run_checkpoints,
             route_doc(tag, "A run's checkpoints", "", "CheckpointList"));
    add_sync("GET", "training_runs/{run_id}/metrics", &TinkerRoutes::run_metrics,
             console_route_doc("GET /api/v1/training_runs/{run_id}/metrics"));
    add_async("GET", "training_runs/{run_id}/events", &TinkerRoutes::run_events,
              console_route_doc("GET /api/v1/training_runs/{run_id}/events"), false);
    add_async("GET", "events", &TinkerRoutes::console_events, console_route_doc("GET /api/v1/events"), false);
    add_sync("GET", "server_status", &TinkerRoutes::server_status, console_route_doc("GET /api/v1/server_status"));
    add_sync("POST", ckpt + "/publish", &TinkerRoutes::publish_checkpoint,
             route_doc(tag, "Publish a checkpoint (other tenants may read it)", "", "Empty"));
    add_sync("DELETE", ckpt + "/publish", &TinkerRoutes::unpublish_checkpoint,
             route_doc(tag, "Unpublish a checkpoint", "", "Empty"));
    add_sync("PUT", ckpt + "/ttl", &TinkerRoutes::set_checkpoint_ttl,
             route_doc(tag, "Set or remove a checkpoint's expiry", "SetTtlRequest", "Empty"));
    add_sync("GET", ckpt + "/archive", &TinkerRoutes::checkpoint_archive,
             route_doc(tag, "A one-time download link for a checkpoint's tar archive", "", "ArchiveUrl"));
    add_sync(
        "DELETE", "training_runs/{run_id}/checkpoints/{checkpoint_id...}", &TinkerRoutes::delete_checkpoint,
        route_doc(tag, "Delete a checkpoint (checkpoint_id is weights/<name> or sampler_weights/<name>)", "", "Empty"));
    RouteDoc checkpoints = route_doc(tag, "All the caller's checkpoints", "", "CheckpointList");
    checkpoints.query = {"limit", "offset"};
    add_sync("GET", "checkpoints", &TinkerRoutes::list_user_checkpoints, checkpoints);
    RouteDoc sessions = route_doc(tag, "The caller's session ids", "", "SessionList");
    sessions.query = {"limit", "offset"};
    add_sync("GET", "sessions", &TinkerRoutes::list_sessions, sessions);
    add_sync("GET", "sessions/{session_id}", &TinkerRoutes::get_session,
             route_doc(tag, "A session's training runs and samplers", "", "Session"));
    add_sync("PUT", "sessions/{session_id}/project", &TinkerRoutes::set_session_project,
             route_doc(tag, "Assign a session to a project (accepted, not stored)", "ProjectRequest", "Empty"));
    add_sync("GET", "samplers/{sampler_id}", &TinkerRoutes::get_sampler,
             route_doc(tag, "A sampler's base model and weights", "", "Sampler"));
    RouteDoc download =
        route_doc(tag, "Download a checkpoint archive (a one-time link, no key)", "", "", KeyCheck::NONE);
    download.response_media = {"application/x-tar"};
    add_async("GET", "archive_downloads/{token}", &TinkerRoutes::download_archive, download, false);
}

// SDK 0.38 endpoints answered with a 400 naming the feature (session_handlers.cpp).
void TinkerRoutes::register_unsupported_routes() {
    const RouteDoc refused =
        route_doc("unsupported", "Not implemented by this server: a 400 naming the feature", "AnyObject", "");
    for (const char * path : {"copy_weights", "save_weights_external", "create_custom_loss", "join_sampling_session"}) {
        add_sync("POST", path, &TinkerRoutes::unsupported_endpoint, refused);
    }
    RouteDoc refused_get = refused;
    refused_get.request.clear();
    add_sync("GET", "training_runs/{run_id}/checkpoints/{kind}/{name}/external_weights_urls",
             &TinkerRoutes::unsupported_endpoint, refused_get);
    for (const char * path : {"billing/usage/events", "audit"}) {
        add_sync("GET", path, &TinkerRoutes::unsupported_endpoint, refused_get);
    }
}

// Nothing is in memory after a start, so the last process's pending futures can never finish and its runs
// are not loaded; snapshots get their expiry. On a full disk these writes wait for the sweeper to retry
// them (the server starts and serves reads and deletes meanwhile); other failures stop the start. A front
// end that joins others on a shared (PostgreSQL) database skips all of it: their futures are still
// pending, their runs loaded and their snapshot writes in progress.
Result<void> TinkerRoutes::recover_from_last_process() {
    if (!db_->sole_user_at_open()) {
        LOG_INF("api",
                "other front ends use this database: their pending requests, loaded runs and snapshots are "
                "left as they are (a front end that starts alone recovers them)");
        return {};
    }
    // Samples in flight at the crash: their retrieve_futures queues (kept in the row's run_id) learn they
    // failed, so a client polling from before the restart stops waiting for them.
    auto samples = db_->pending_futures("Sample");
    auto failed = db_->fail_pending_futures("server restarted before this request finished", now_seconds());
    for (const auto & row : samples.ok() && failed.ok() ? *samples : std::vector<store::FutureRow>()) {
        if (!row.run_id.empty()) {
            completion_queues_.append(row.run_id, row.request_id, true, 0);
        }
    }
    Result<void> recovered = failed.ok() ? db_->mark_all_runs_unloaded() : Result<void>(failed.error());
    if (recovered.ok()) {
        recovered = recover_snapshots();
    }
    if (!recovered.ok() && store::is_disk_full(recovered.error())) {
        LOG_ERR("api",
                "disk full: the restart's bookkeeping (failing pending requests, unloading runs) waits "
                "until there is room; delete checkpoints to free space");
        recovery_pending_ = true;
        return {};
    }
    if (failed.ok() && *failed > 0) {
        LOG_WRN("api", "%lld request(s) pending at the last shutdown are now failed (server restarted)",
                static_cast<long long>(*failed));
    }
    recovery_pending_ = false;
    return recovered;
}

// Checkpoint files never eat the bytes a released reserve left for SQLite: while the reserve is gone, a
// write needs at least its size free (a user error: deleting checkpoints is what helps, not retrying).
Result<void> TinkerRoutes::check_disk_room() const {
    if (disk_reserve_->bytes() == 0 || disk_reserve_->held()) {
        return {};
    }
    const uint64_t free_bytes = store::free_disk_bytes(options_.data_dir);
    if (free_bytes >= disk_reserve_->bytes()) {
        return {};
    }
    return invalid_argument("disk full: " + std::to_string(free_bytes >> 20) +
                            " MiB free in the data dir, the rest kept for the database; delete checkpoints "
                            "to free space");
}

std::string TinkerRoutes::create_future(const std::string & tenant, const std::string & request_type,
                                        const std::string & run_id) {
    const std::string request_id = futures_->create(tenant, request_type);
    store::FutureRow row;
    row.request_id = request_id;
    row.tenant = tenant;
    row.request_type = request_type;
    row.run_id = run_id;
    row.state = "pending";
    row.created_at = now_seconds();
    (void)db_->insert_future(row);
    return request_id;
}

store::AdapterConfig TinkerRoutes::adapter_config(const RunState & run) const {
    return store::make_adapter_config(run.row.base_model, run.spec.rank, run.spec.alpha, run.model->engine->config(),
                                      run.spec.train_attn, run.spec.train_mlp, run.spec.train_unembed);
}

}  // namespace tinkerd::api
