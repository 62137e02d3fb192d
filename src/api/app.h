// App: the thin owner of the api. create() prepares the data dir (disk reserve, interrupted writes),
// opens the database, and wires the parts: the Registry, one EngineWorker per served model, the
// SamplingService, the OutputStage, TinkerRoutes (/api/v1/), OpenAiRoutes (/v1/, /oai/api/v1/) and the
// console (GET /, /console/...) in one Router, described by GET /openapi.json. handle() matches a route, checks the
// key, parses the JSON body and calls the handler.
#pragma once

#include <memory>
#include <mutex>
#include <string>
#include <vector>

#include "api/app_options.h"
#include "api/auth.h"
#include "api/event_streams.h"
#include "api/openai_routes.h"
#include "api/output_stage.h"
#include "api/registry.h"
#include "api/router.h"
#include "api/sampling_service.h"
#include "api/telemetry.h"
#include "api/tinker_routes.h"
#include "http/server.h"
#include "scheduler/futures.h"
#include "store/database.h"
#include "store/disk_reserve.h"

namespace tinkerd::api {

class App {
  public:
    static Result<std::unique_ptr<App>> create(AppOptions options, Auth auth, std::vector<ServedModelSpec> models);
    ~App();

    // Starts the engine workers, the sweeper and the snapshot writer. stop() joins them (idempotent).
    void start();
    void stop();

    // The http::Handler of the server.
    void handle(http::Request && request, http::Respond respond);
    // The server's ServerOptions::on_refused_body: a request refused with 413 before its body was read
    // (`request.body` holds the body's first bytes). A run's training op whose first bytes name its run
    // and seq_id has that seq_id released, so the run's later operations do not wait for it; the returned
    // note (for the 413's detail) says so. "" otherwise.
    std::string refused_body(const http::Request & request);

    // Introspection for logs and tests.
    size_t waiting_polls() const { return futures_->waiting_polls(); }
    size_t open_event_streams() const { return events_->open_streams(); }
    // What makes GET /openapi.json lie about the route table (openapi_problems); empty when none.
    std::vector<std::string> openapi_problems() const;

  private:
    App() = default;
    void prepare_data_dir();
    void remove_interrupted_writes();
    void add_models(std::vector<ServedModelSpec> models);
    static void add_console_routes(Router<Route> & router);
    void add_openapi_route();

    AppOptions options_;
    Auth auth_;
    std::unique_ptr<store::Database> db_;
    std::unique_ptr<store::DiskReserve> disk_reserve_;  // DATA_DIR/.disk-reserve: released on SQLITE_FULL
    std::unique_ptr<scheduler::FutureTable> futures_;
    // Formats and answers sampling events off the engine threads (stopped after the workers; declared
    // after futures_ and db_ so it is gone before them).
    std::unique_ptr<OutputStage> output_stage_ = std::make_unique<OutputStage>();
    // The console's push streams; declared before telemetry_ (destroyed after it: its writer wakes them).
    std::unique_ptr<EventStreams> events_;
    std::unique_ptr<Telemetry> telemetry_;       // request, token and sampler counters; run metric points
    std::unique_ptr<Registry> registry_;         // served models, runs, snapshot cache, sessions, archive tokens
    std::unique_ptr<SamplingService> sampling_;  // requests -> SampleJobs on the workers; 429 capacity
    std::unique_ptr<TinkerRoutes> tinker_;       // /api/v1/, the sweeper and the snapshot writer
    std::unique_ptr<OpenAiRoutes> openai_;       // /v1/ and /oai/api/v1/
    Router<Route> router_;
    std::once_flag openapi_once_;
    json openapi_;  // GET /openapi.json, generated from router_ at its first request
    bool started_ = false;
};

}  // namespace tinkerd::api
