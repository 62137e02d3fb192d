// App set-up and dispatch: opening the database (recovering from a crash), starting the workers,
// the route table, authentication, and the lookups (runs, checkpoints, sessions) every handler shares.
#include "api/app.h"

#include <algorithm>
#include <filesystem>

#include "api/openai_generation.h"
#include "common/log.h"
#include "common/redact.h"
#include "store/disk_reserve.h"

namespace tinkerd::api {

namespace {

scheduler::FutureOutcome outcome_of_row(const store::FutureRow & r) {
    using State = scheduler::FutureOutcome::State;
    scheduler::FutureOutcome out;
    out.state = r.state == "done" ? State::DONE : r.state == "failed" ? State::FAILED : State::PENDING;
    out.tenant = r.tenant;
    out.request_type = r.request_type;
    out.json = r.result_json;
    out.proto = r.result_proto;
    out.error = r.error;
    out.category = r.error_category;
    return out;
}

// Finished futures are written to the database (answered after a restart or once evicted from memory).
scheduler::FutureTableOptions future_table_options(store::Database * db) {
    scheduler::FutureTableOptions options;
    options.max_finished_in_memory = 2000;  // older results are answered from SQLite
    options.on_finish = [db](const std::string & id, const scheduler::FutureOutcome & outcome) {
        store::FutureRow row;
        row.request_id = id;
        row.state = outcome.state == scheduler::FutureOutcome::State::DONE ? "done" : "failed";
        row.result_json = outcome.json;
        row.result_proto = outcome.proto;
        row.error = outcome.error;
        row.error_category = outcome.category;
        row.finished_at = now_seconds();
        auto status = db->finish_future(row);
        if (!status.ok() && status.error().kind != ErrorKind::NOT_FOUND) {  // NOT_FOUND: never recorded
            LOG_ERR("api", "cannot record result of %s: %s", id.c_str(), status.error().message.c_str());
        }
    };
    options.lookup = [db](const std::string & id) -> std::optional<scheduler::FutureOutcome> {
        auto row = db->get_future(id);
        if (!row.ok() || !row->has_value()) {
            return std::nullopt;
        }
        return outcome_of_row(**row);
    };
    return options;
}

}  // namespace

Result<std::unique_ptr<App>> App::create(AppOptions options, Auth auth, std::vector<ServedModelSpec> models) {
    std::unique_ptr<App> app(new App());
    app->options_ = std::move(options);
    app->auth_ = std::move(auth);
    set_redacted_data_dir(app->options_.data_dir);
    app->prepare_data_dir();
    auto db = store::Database::open(app->options_.data_dir + "/tinkerd.db");
    if (!db.ok() && app->disk_reserve_->release()) {  // a full disk: the reserve's bytes let SQLite start
        db = store::Database::open(app->options_.data_dir + "/tinkerd.db");
    }
    if (!db.ok()) {
        return db.error();
    }
    app->db_ = std::move(db).value();
    app->registry_ = std::make_unique<Registry>(*app->db_);
    app->sampling_ = std::make_unique<SamplingService>(*app->registry_, *app->db_, *app->output_stage_,
                                                       app->options_.max_queued_samples);
    TRY_STATUS(app->recover_from_last_process());
    app->futures_ = std::make_unique<scheduler::FutureTable>(future_table_options(app->db_.get()));
    for (const auto & spec : models) {
        auto served = std::make_unique<ServedModel>();
        served->name = spec.name;
        served->engine = spec.engine;
        served->tokenizer = spec.tokenizer;
        served->chat = spec.chat;
        scheduler::WorkerOptions worker_options;
        worker_options.seq_gap_timeout = app->options_.seq_gap_timeout;
        worker_options.max_sampler_adapters = app->options_.max_cached_sampler_adapters;
        worker_options.max_queued_samples = static_cast<size_t>(std::max<int64_t>(1, app->options_.max_queued_samples));
        served->worker = std::make_unique<scheduler::EngineWorker>(*spec.engine, spec.name, worker_options);
        app->models_.push_back(std::move(served));
    }
    app->register_routes();
    return app;
}

// Before the database opens: the disk reserve (released first when the disk is full, so that SQLite can
// write), the SQLITE_FULL hook, the free space in the log, and interrupted checkpoint writes removed.
void App::prepare_data_dir() {
    const std::string & dir = options_.data_dir;
    std::error_code ec;
    std::filesystem::create_directories(dir, ec);
    disk_reserve_ = std::make_unique<store::DiskReserve>(dir + "/.disk-reserve", options_.disk_reserve_bytes);
    store::set_disk_full_handler([reserve = disk_reserve_.get()] { return reserve->release(); });
    const uint64_t free_bytes = store::free_disk_bytes(dir);
    if (free_bytes < options_.disk_reserve_bytes + (16u << 20)) {
        LOG_WRN("api",
                "disk almost full: %.1f MiB free in the data dir; training and checkpoints may fail until "
                "checkpoints or runs are deleted (deleting works)",
                free_bytes / 1048576.0);
        disk_reserve_->release();
    } else if (disk_reserve_->restore_if_room()) {
        LOG_INF("api", "%.0f MiB free in the data dir (%llu MiB held in reserve for a full disk)",
                free_bytes / 1048576.0, static_cast<unsigned long long>(options_.disk_reserve_bytes >> 20));
    }
    if (const int removed = store::remove_interrupted_writes(dir); removed > 0) {
        LOG_WRN("api", "removed %d interrupted checkpoint write(s) (.tmp-/.old- directories) under runs/", removed);
    }
}

// Nothing is in memory after a start, so the last process's pending futures can never finish and its runs
// are not loaded; snapshots get their expiry. On a full disk these writes wait for the sweeper to retry
// them (the server starts and serves reads and deletes meanwhile); other failures stop the start.
Result<void> App::recover_from_last_process() {
    auto failed = db_->fail_pending_futures("server restarted before this request finished", now_seconds());
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
Result<void> App::check_disk_room() const {
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

App::~App() {
    stop();
    output_stage_->stop();                  // its sinks use futures_ and db_, which outlive it
    store::set_disk_full_handler(nullptr);  // it points at disk_reserve_, about to go
}

void App::start() {
    if (started_) {
        return;
    }
    started_ = true;
    for (auto & model : models_) {
        model->worker->start();
    }
    sweeper_ = std::thread([this] { sweeper_loop(); });
    snapshot_writer_ = std::thread([this] { snapshot_writer_loop(); });
}

void App::stop() {
    if (!started_) {
        return;
    }
    shutting_down_ = true;
    {
        std::lock_guard<std::mutex> lock(sweeper_mutex_);
        stopping_ = true;
    }
    sweeper_wake_.notify_all();
    if (sweeper_.joinable()) {
        sweeper_.join();
    }
    for (auto & model : models_) {
        model->worker->stop();
    }
    output_stage_->stop();  // after the workers: every event they emitted is answered
    {                       // after the workers: the snapshots they queued are written before we return
        std::lock_guard<std::mutex> lock(snapshot_mutex_);
        snapshot_writer_stopping_ = true;
    }
    snapshot_wake_.notify_all();
    if (snapshot_writer_.joinable()) {
        snapshot_writer_.join();
    }
    started_ = false;
}

void App::add_sync(const std::string & method, const std::string & path, SyncHandler handler, bool json_body) {
    Route route;
    route.sync = handler;
    route.json_body = json_body;
    router_.add(method, "/api/v1/" + path, route);
}

void App::add_async(const std::string & method, const std::string & path, AsyncHandler handler, bool needs_auth,
                    bool json_body) {
    Route route;
    route.async = handler;
    route.needs_auth = needs_auth;
    route.json_body = json_body;
    router_.add(method, "/api/v1/" + path, route);
}

void App::register_routes() {
    register_unsupported_routes();  // first: "sessions/search" before "sessions/{session_id}"
    add_sync("POST", "client/config", &App::client_config);
    add_sync("POST", "client/dynamic_config", &App::dynamic_config);
    add_sync("GET", "get_server_capabilities", &App::server_capabilities);
    add_sync("POST", "create_session", &App::create_session);
    add_sync("POST", "session_heartbeat", &App::session_heartbeat);
    add_sync("POST", "telemetry", &App::telemetry);
    add_sync("POST", "create_model", &App::create_model);
    add_sync("POST", "get_info", &App::get_info);
    add_sync("POST", "unload_model", &App::unload_model);
    add_sync("POST", "forward_backward", &App::forward_backward, false);
    add_sync("POST", "forward", &App::forward_backward, false);  // SDK <= 0.24: {"forward_input": ...}
    add_sync("POST", "optim_step", &App::optim_step);
    add_sync("POST", "save_weights", &App::save_weights);
    add_sync("POST", "save_weights_for_sampler", &App::save_weights_for_sampler);
    add_sync("POST", "load_weights", &App::load_weights);
    add_sync("POST", "weights_info", &App::weights_info);
    add_sync("POST", "create_sampling_session", &App::create_sampling_session);
    add_sync("POST", "asample", &App::asample);
    add_async("POST", "retrieve_future", &App::retrieve_future, true, true);
    add_sync("GET", "training_runs", &App::list_training_runs);
    add_sync("GET", "training_runs/{run_id}", &App::get_training_run);
    add_sync("GET", "training_runs/{run_id}/checkpoints", &App::list_run_checkpoints);
    add_sync("POST", "training_runs/{run_id}/checkpoints/{kind}/{name}/publish", &App::publish_checkpoint);
    add_sync("DELETE", "training_runs/{run_id}/checkpoints/{kind}/{name}/publish", &App::unpublish_checkpoint);
    add_sync("PUT", "training_runs/{run_id}/checkpoints/{kind}/{name}/ttl", &App::set_checkpoint_ttl);
    add_sync("GET", "training_runs/{run_id}/checkpoints/{kind}/{name}/archive", &App::checkpoint_archive);
    add_sync("DELETE", "training_runs/{run_id}/checkpoints/{checkpoint_id...}", &App::delete_checkpoint);
    add_sync("GET", "checkpoints", &App::list_user_checkpoints);
    add_sync("GET", "sessions", &App::list_sessions);
    add_sync("GET", "sessions/{session_id}", &App::get_session);
    add_sync("PUT", "sessions/{session_id}/project", &App::set_session_project);
    add_sync("GET", "samplers/{sampler_id}", &App::get_sampler);
    add_sync("POST", "sessions/{session_id}/finish", &App::finish_session);
    add_async("GET", "archive_downloads/{token}", &App::download_archive, false, false);
    add_openai("GET", "models", &App::openai_models);
    add_openai("POST", "completions", &App::openai_completions);
    add_openai("POST", "chat/completions", &App::openai_chat);
    Route health;
    health.sync = &App::healthz;
    health.needs_auth = false;
    router_.add("GET", "/api/v1/healthz", health);
}

// SDK 0.38 endpoints answered with a 400 naming the feature (session_handlers.cpp).
void App::register_unsupported_routes() {
    for (const char * path : {"copy_weights", "save_weights_external", "create_custom_loss", "retrieve_futures",
                              "cancel_future", "join_sampling_session", "sessions/search"}) {
        add_sync("POST", path, &App::unsupported_endpoint);
    }
    add_sync("GET", "training_runs/{run_id}/checkpoints/{kind}/{name}/external_weights_urls",
             &App::unsupported_endpoint);
    for (const char * path : {"billing/usage/checkpoints/current", "billing/usage/events", "audit"}) {
        add_sync("GET", path, &App::unsupported_endpoint);
    }
}

void App::handle(http::Request && request, http::Respond respond) {
    auto match = router_.match(request.method, request.path);
    if (match.target == nullptr) {
        const int status = match.method_mismatch ? 405 : 404;
        const std::string message =
            request.method + " " + request.path + (status == 405 ? ": method not allowed" : ": no such endpoint");
        const bool openai = request.path.rfind("/v1/", 0) == 0 || request.path.rfind("/oai/api/v1/", 0) == 0;
        respond(openai ? openai_error_response({status, message, "invalid_request_error", "", ""})
                       : error_response(status, message));
        return;
    }
    const Route & route = *match.target;
    Call call{request, "", std::move(match.params), json::object()};
    if (route.needs_auth) {
        const std::string key = request_key(request.header("x-api-key"), request.header("authorization"));
        auto tenant = auth_.tenant_of(key);
        if (!tenant) {
            const char * why = key.empty() ? "missing API key (send X-API-Key: tml-...)" : "invalid API key";
            respond(error_response(401, why));
            return;
        }
        call.tenant = *tenant;
    }
    if (route.json_body && request.method != "GET") {
        auto body = parse_json_body(request.body);
        if (!body.ok()) {
            respond(error_response(body.error()));
            return;
        }
        call.body = std::move(body).value();
    }
    if (route.async != nullptr) {
        (this->*route.async)(call, std::move(respond));
        return;
    }
    Result<json> result = internal_error("no result");
    try {
        result = (this->*route.sync)(call);
    } catch (const json::exception & e) {  // a field of an unexpected JSON type deep inside a body
        result = invalid_argument(std::string("malformed request body: ") + e.what());
    } catch (const std::exception & e) {
        LOG_ERR("api", "%s %s failed: %s", request.method.c_str(), request.path.c_str(), e.what());
        result = internal_error(std::string("internal error: ") + e.what());
    }
    http::Response response = result.ok() ? json_response(*result) : error_response(result.error());
    if (call.body.is_object() && call.body.contains("model_id") && call.body["model_id"].is_string()) {
        response.log_tag = "model=" + call.body["model_id"].get<std::string>();
    } else if (call.params.count("run_id")) {
        response.log_tag = "run=" + call.params["run_id"];
    }
    if (result.ok() && result->is_object() && result->contains("request_id")) {
        response.log_tag += " request=" + (*result)["request_id"].get<std::string>();
    }
    respond(std::move(response));
}

ServedModel * App::find_model(const std::string & name) {
    for (auto & model : models_) {
        if (model->name == name) {
            return model.get();
        }
    }
    return nullptr;
}

std::string App::create_future(const std::string & tenant, const std::string & request_type,
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

store::AdapterConfig App::adapter_config(const RunState & run) const {
    store::AdapterConfig config;
    config.base_model = run.row.base_model;
    config.rank = run.spec.rank;
    config.alpha = run.spec.alpha;
    config.train_attn = run.spec.train_attn;
    config.train_mlp = run.spec.train_mlp;
    config.train_unembed = run.spec.train_unembed;
    if (run.spec.train_attn) {
        config.target_modules.insert(config.target_modules.end(), {"q_proj", "k_proj", "v_proj", "o_proj"});
    }
    if (run.spec.train_mlp) {
        config.target_modules.insert(config.target_modules.end(), {"gate_proj", "up_proj", "down_proj"});
    }
    if (run.spec.train_unembed) {
        config.target_modules.push_back("lm_head");
    }
    return config;
}

}  // namespace tinkerd::api
