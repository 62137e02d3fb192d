// App set-up and dispatch: the data dir and the database, wiring the parts (registry, workers, sampling
// service, Tinker and OpenAI routes, the console's page), start and stop in dependency order, and
// handle(): route match, authentication, JSON body, handler call, log tag; refused_body() for a training op
// refused unread (413); GET /openapi.json from the finished route table.
#include "api/app.h"

#include <algorithm>
#include <chrono>
#include <filesystem>

#include "api/openai_generation.h"
#include "api/openapi.h"
#include "api/openapi_schemas.h"
#include "common/log.h"
#include "common/redact.h"
#include "console/console.h"
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
    const std::string location =
        app->options_.database.empty() ? app->options_.data_dir + "/tinkerd.db" : app->options_.database;
    auto db = store::Database::open(location);
    if (!db.ok() && app->disk_reserve_->release()) {  // a full disk: the reserve's bytes let SQLite start
        db = store::Database::open(location);
    }
    if (!db.ok()) {
        return db.error();
    }
    app->db_ = std::move(db).value();
    app->remove_interrupted_writes();
    app->futures_ = std::make_unique<scheduler::FutureTable>(future_table_options(app->db_.get()));
    app->events_ = std::make_unique<EventStreams>(
        EventStreamOptions{app->options_.max_event_streams, app->options_.event_tick, app->options_.event_heartbeat});
    app->telemetry_ = std::make_unique<Telemetry>(*app->db_, app->options_.max_metric_points);
    app->telemetry_->on_points_written([events = app->events_.get()](const auto & runs) { events->wake(runs); });
    app->registry_ = std::make_unique<Registry>(*app->db_);
    app->sampling_ = std::make_unique<SamplingService>(*app->registry_, *app->db_, *app->output_stage_,
                                                       app->options_.max_queued_samples, app->telemetry_.get());
    app->tinker_ = std::make_unique<TinkerRoutes>(
        app->options_, TinkerDeps{app->db_.get(), app->disk_reserve_.get(), app->futures_.get(), app->registry_.get(),
                                  app->sampling_.get(), app->telemetry_.get(), app->events_.get()});
    TRY_STATUS(app->tinker_->recover_from_last_process());
    app->add_models(std::move(models));
    app->openai_ = std::make_unique<OpenAiRoutes>(app->auth_, *app->registry_, *app->db_, *app->sampling_);
    app->tinker_->add_routes(app->router_);
    app->openai_->add_routes(app->router_);
    add_console_routes(app->router_);
    app->add_openapi_route();  // last: it describes every route added before it
    return app;
}

// The web console (src/console/): the page and its files, no key needed (the page asks for one and sends
// it on its own API calls).
void App::add_console_routes(Router<Route> & router) {
    Route page;
    page.needs_auth = false;
    page.json_body = false;
    page.async = [](Call & call, http::Respond respond) {
        respond(console::page_response(call.req.header("if-none-match")));
    };
    page.doc = console_route_doc("GET /");
    router.add("GET", "/", page);
    Route asset = page;
    asset.async = [](Call & call, http::Respond respond) {
        respond(console::asset_response(call.params["asset"], call.req.header("if-none-match")));
    };
    asset.doc = console_route_doc("GET /console/{asset...}");
    router.add("GET", "/console/{asset...}", asset);
}

// GET /openapi.json (no key): generated at the first request, from the route table as App::create left it
// (so a route added after this one is described too), then kept (openapi.h).
void App::add_openapi_route() {
    Route route;
    route.sync = [this](Call &) -> Result<json> {
        std::call_once(openapi_once_, [this] {
            for (const auto & problem : api::openapi_problems(router_)) {
                LOG_WRN("api", "openapi.json: %s", problem.c_str());
            }
            openapi_ = openapi_document(router_);
        });
        return openapi_;
    };
    route.needs_auth = false;
    route.json_body = false;
    route.doc =
        route_doc("meta", "This description: OpenAPI 3.1 of every route", "", "OpenApiDocument", KeyCheck::NONE);
    router_.add("GET", "/openapi.json", route);
}

std::vector<std::string> App::openapi_problems() const {
    return api::openapi_problems(router_);
}

// One EngineWorker per served model: the one scheduling loop of its engine (scheduler/worker.h).
void App::add_models(std::vector<ServedModelSpec> models) {
    // Several CPU models in this process: their steps take turns on one thread, so that one OpenMP pool exists
    // (scheduler/compute_thread.h). The replicas' workers only wait on other processes and keep their own.
    const auto cpu_models = std::count_if(models.begin(), models.end(), [](const auto & m) { return m.on_cpu; });
    auto compute = cpu_models > 1 ? std::make_shared<scheduler::ComputeThread>() : nullptr;
    for (auto & spec : models) {
        auto served = std::make_unique<ServedModel>();
        served->name = spec.name;
        served->engine = spec.engine;
        served->tokenizer = spec.tokenizer;
        served->chat = std::move(spec.chat);
        served->vision = std::move(spec.vision);
        scheduler::WorkerOptions worker_options;
        worker_options.seq_gap_timeout = options_.seq_gap_timeout;
        worker_options.max_sampler_adapters = options_.max_cached_sampler_adapters;
        scheduler::WorkerOptions local_options = worker_options;
        local_options.compute = spec.on_cpu ? compute : nullptr;
        served->worker = std::make_unique<scheduler::EngineWorker>(*spec.engine, spec.name, local_options);
        for (size_t r = 0; r < spec.sampling_replicas.size(); ++r) {
            auto replica = std::make_unique<ServedModel::SamplingReplica>();
            replica->worker = std::make_unique<scheduler::EngineWorker>(
                *spec.sampling_replicas[r].engine, spec.name + "/replica" + std::to_string(r + 1), worker_options);
            replica->healthy = spec.sampling_replicas[r].healthy;
            replica->failures = spec.sampling_replicas[r].failures;
            served->replicas.push_back(std::move(replica));
        }
        registry_->add_model(std::move(served));
    }
}

// Before the database opens: the disk reserve (released first when the disk is full, so that SQLite can
// write), the SQLITE_FULL hook and the free space in the log.
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
}

// Interrupted checkpoint writes (.tmp-/.old- directories) are removed only by a front end that is alone on
// its database: on a shared data dir another front end may be writing them right now.
void App::remove_interrupted_writes() {
    if (!db_->sole_user_at_open()) {
        return;
    }
    if (const int removed = store::remove_interrupted_writes(options_.data_dir); removed > 0) {
        LOG_WRN("api", "removed %d interrupted checkpoint write(s) (.tmp-/.old- directories) under runs/", removed);
    }
}

App::~App() {
    stop();
    if (events_) {
        events_->stop();  // even if never started: its refreshes use tinker_ and db_
    }
    output_stage_->stop();                  // its sinks use futures_ and db_, which outlive it
    store::set_disk_full_handler(nullptr);  // it points at disk_reserve_, about to go
}

void App::start() {
    if (started_) {
        return;
    }
    started_ = true;
    for (const auto & model : registry_->models()) {
        model->worker->start();
        for (const auto & replica : model->replicas) {
            replica->worker->start();
        }
    }
    tinker_->start();
}

void App::stop() {
    if (!started_) {
        return;
    }
    events_->stop();  // first: every push stream ends cleanly, and no new one opens
    tinker_->stop_sweeper();
    for (const auto & model : registry_->models()) {
        for (const auto & replica : model->replicas) {
            replica->worker->stop();
        }
        model->worker->stop();
    }
    output_stage_->stop();            // after the workers: every event they emitted is answered
    tinker_->stop_snapshot_writer();  // after the workers: the snapshots they queued are written first
    started_ = false;
}

std::string App::refused_body(const http::Request & request) {
    if (request.method != "POST" || !TinkerRoutes::takes_seq_id(request.path)) {
        return "";
    }
    auto tenant = auth_.tenant_of(request_key(request.header("x-api-key"), request.header("authorization")));
    return tenant ? tinker_->release_refused_body(*tenant, request) : "";
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
    // Every answer is counted under its route's pattern (never the raw path: ids stay out of labels).
    const auto started = std::chrono::steady_clock::now();
    respond = [this, respond = std::move(respond), started, method = request.method,
               pattern = *match.pattern](http::Response response) {
        const double seconds = std::chrono::duration<double>(std::chrono::steady_clock::now() - started).count();
        telemetry_->observe_request(method, pattern, response.status, seconds);
        respond(std::move(response));
    };
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
    if (route.async) {
        route.async(call, std::move(respond));
        return;
    }
    Result<json> result = internal_error("no result");
    try {
        result = route.sync(call);
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

}  // namespace tinkerd::api
