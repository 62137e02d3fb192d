// App: the Tinker API. Routes HTTP requests to handlers, checks keys and tenants, turns training
// requests into ordered operations on each base model's EngineWorker, answers futures, serves the
// REST metadata from the database, and runs the background sweeper (session expiry, checkpoint TTLs).
// What lives in memory is the Registry's (registry.h); sampling goes through the SamplingService
// (sampling_service.h) to the worker's one scheduling loop.
#pragma once

#include <atomic>
#include <chrono>
#include <condition_variable>
#include <ctime>
#include <deque>
#include <list>
#include <map>
#include <memory>
#include <mutex>
#include <set>
#include <string>
#include <thread>
#include <vector>

#include "api/auth.h"
#include "api/json_util.h"
#include "api/output_stage.h"
#include "api/registry.h"
#include "api/router.h"
#include "api/sampling_service.h"
#include "chat_template/model_template.h"
#include "engine/engine.h"
#include "http/server.h"
#include "scheduler/futures.h"
#include "scheduler/worker.h"
#include "store/checkpoint_files.h"
#include "store/database.h"
#include "store/disk_reserve.h"
#include "tokenizer/tokenizer.h"
#include "wire/forward_backward_codec.h"
#include "wire/sample_codec.h"

namespace tinkerd::api {

class OpenAiGeneration;

struct AppOptions {
    std::string data_dir;
    std::chrono::milliseconds poll_timeout{25000};  // a retrieve_future poll is held this long at most
    double session_timeout_seconds = 120;           // sessions without a heartbeat for this long expire
    double sweep_interval_seconds = 1.0;
    size_t max_decompressed_bytes = 512u << 20;  // cap on a zstd forward_backward body once decompressed
    int64_t max_queued_samples = 256;            // more queued asample requests get 429 (SDK backpressure)
    size_t max_cached_sampler_adapters = 8;      // per base model: samplers whose weights stay loaded
    double archive_url_ttl_seconds = 900;
    std::chrono::milliseconds seq_gap_timeout{330000};  // a run's missing seq_id is given up after this long
    uint64_t disk_reserve_bytes = 64u << 20;            // --disk-reserve-mib: freed for SQLite when the disk fills
    double snapshot_ttl_seconds = 3600;                 // unnamed sampler snapshots outlive their session this long
    int64_t snapshot_disk_bytes = 10240LL << 20;        // budget of DATA_DIR/snapshots (--snapshot-disk-mib)
};

// A base model served under a name; the engine is owned by the caller and outlives the App.
struct ServedModelSpec {
    std::string name;
    engine::Engine * engine = nullptr;
    const tokenizer::Tokenizer * tokenizer = nullptr;  // none when the model directory has no tokenizer.json
    chat_template::ModelChatTemplate chat;             // for /v1/chat/completions
};

using scheduler::guarded_engine_call;
using AdapterId = engine::AdapterId;

// Stop strings as a SampleRequest::stop_check over the tokenizer's decode of the generated tail.
Result<std::function<bool(const std::vector<int64_t> &)>> stop_string_check(const ServedModel & model,
                                                                            std::vector<std::string> stops);

class App {
  public:
    static Result<std::unique_ptr<App>> create(AppOptions options, Auth auth, std::vector<ServedModelSpec> models);
    ~App();

    // Starts the engine workers and the sweeper. stop() joins them (idempotent).
    void start();
    void stop();

    // The http::Handler of the server.
    void handle(http::Request && request, http::Respond respond);

    // Introspection for logs and tests.
    size_t waiting_polls() const { return futures_->waiting_polls(); }

  private:
    struct Call {
        const http::Request & req;
        std::string tenant;
        PathParams params;
        json body;  // parsed JSON body ({} for GET and protobuf bodies)
    };
    using SyncHandler = Result<json> (App::*)(Call &);
    using AsyncHandler = void (App::*)(Call &, http::Respond);
    struct Route {
        SyncHandler sync = nullptr;
        AsyncHandler async = nullptr;
        bool needs_auth = true;
        bool json_body = true;
    };

    App() = default;
    void register_routes();
    void register_unsupported_routes();
    void add_sync(const std::string & method, const std::string & path, SyncHandler handler, bool json_body = true);
    void add_async(const std::string & method, const std::string & path, AsyncHandler handler, bool needs_auth,
                   bool json_body);

    // session_handlers.cpp: configuration, sessions, telemetry, capabilities.
    Result<json> client_config(Call & call);
    Result<json> dynamic_config(Call & call);
    Result<json> healthz(Call & call);
    Result<json> server_capabilities(Call & call);
    Result<json> create_session(Call & call);
    Result<json> session_heartbeat(Call & call);
    Result<json> telemetry(Call & call);
    Result<json> finish_session(Call & call);
    Result<json> unsupported_endpoint(Call & call);

    // training_handlers.cpp: models and training steps.
    Result<json> create_model(Call & call);
    void start_adapter_creation(const RunPtr & run);
    Result<json> get_info(Call & call);
    Result<json> unload_model(Call & call);
    Result<json> forward_backward(Call & call);
    Result<wire::ForwardBackwardRequest> decode_forward_backward(Call & call);
    wire::DecodeLimits decode_limits(const std::string & tenant, const std::string & model_id);
    void release_refused_seq(const std::string & tenant, const std::string & model_id, const json & seq_id);
    Result<json> optim_step(Call & call);

    // checkpoint_handlers.cpp: saving and loading weights.
    Result<json> save_weights(Call & call);
    Result<json> save_weights_for_sampler(Call & call);
    Result<json> load_weights(Call & call);
    Result<void> import_checkpoint(engine::Engine & engine, const RunState & run, const std::string & dir,
                                   bool with_optimizer);
    static Result<void> check_loadable(int64_t seq_id, const Result<store::CheckpointRow> & checkpoint,
                                       bool with_optimizer);
    // On the engine thread: write a checkpoint's files and row, then complete the future.
    void store_checkpoint(const RunState & run, const std::string & tenant, const TinkerPath & path,
                          const store::Tensors & tensors, std::optional<int64_t> ttl_seconds, bool overwrite,
                          const std::string & request_id, const std::string & result_type);
    Result<json> create_model_from_checkpoint(Call & call, const store::CheckpointRow & checkpoint,
                                              bool with_optimizer);
    Result<json> weights_info(Call & call);
    Result<json> create_sampling_session(Call & call);

    // sampling_handlers.cpp: asample / compute_logprobs.
    Result<json> asample(Call & call);
    Result<engine::SampleRequest> parse_sample_request(const json & body, const ServedModel & model);

    // openai_handlers.cpp: /v1/models, /v1/completions, /v1/chat/completions (also under /oai/api/v1/).
    struct OpenAiTarget {
        ServedModel * model = nullptr;
        store::SamplerRow sampler;                      // base model, checkpoint or sampling session
        std::optional<engine::AdapterId> live_adapter;  // a training run's live weights
    };
    void add_openai(const std::string & method, const std::string & path, AsyncHandler handler);
    std::optional<std::string> openai_tenant(const http::Request & request, http::Respond & respond);
    void openai_models(Call & call, http::Respond respond);
    void openai_completions(Call & call, http::Respond respond);
    void openai_chat(Call & call, http::Respond respond);
    void openai_generate(Call & call, http::Respond respond, bool chat);
    Result<OpenAiTarget> resolve_openai_model(const std::string & tenant, const std::string & name);
    void submit_generation(const std::shared_ptr<OpenAiGeneration> & generation, const OpenAiTarget & target);

    // rest_handlers.cpp: training runs, checkpoints, sessions, samplers.
    Result<json> list_training_runs(Call & call);
    Result<json> get_training_run(Call & call);
    Result<json> list_run_checkpoints(Call & call);
    Result<json> list_user_checkpoints(Call & call);
    Result<json> delete_checkpoint(Call & call);
    Result<json> publish_checkpoint(Call & call);
    Result<json> unpublish_checkpoint(Call & call);
    Result<json> set_checkpoint_ttl(Call & call);
    Result<json> checkpoint_archive(Call & call);
    Result<json> list_sessions(Call & call);
    Result<json> get_session(Call & call);
    Result<json> set_session_project(Call & call);
    Result<json> get_sampler(Call & call);
    Result<TinkerPath> owned_checkpoint_path(Call & call);
    void download_archive(Call & call, http::Respond respond);

    // futures_handler.cpp: retrieve_future and the ordered submission of operations.
    void retrieve_future(Call & call, http::Respond respond);
    // Submits `op` as (run, seq_id) under a new future of `request_type`; answers {"request_id", "model_id"}.
    Result<json> submit_ordered(Call & call, const RunPtr & run, int64_t seq_id, const std::string & request_type,
                                const std::function<scheduler::Op(const std::string & request_id)> & make_op);
    // find_live_run of the body's "model_id".
    Result<RunPtr> run_of_body(Call & call);
    // The live run and the seq_id of an ordered operation's body ("model_id", "seq_id").
    struct OrderedTarget {
        RunPtr run;
        int64_t seq_id = 0;
    };
    Result<OrderedTarget> ordered_target(Call & call);
    // The run named by the body's model_id, owned by the caller, loaded and ready.
    Result<RunPtr> find_live_run(const std::string & tenant, const std::string & model_id);
    // Marks a seq_id as used when its request is refused at submission (so later ones still run).
    void skip_seq(const RunPtr & run, const std::optional<int64_t> & seq_id);
    void fail_future(const std::string & request_id, const Error & error);

    // Shared helpers (app.cpp).
    ServedModel * find_model(const std::string & name);
    // A new pending future, also recorded in the database (so a restart can answer it).
    std::string create_future(const std::string & tenant, const std::string & request_type,
                              const std::string & run_id = "");
    json checkpoint_json(const store::CheckpointRow & row) const;
    json training_run_json(const store::TrainingRunRow & row, const std::string & tenant);
    store::AdapterConfig adapter_config(const RunState & run) const;

    // snapshots.cpp: unnamed sampler snapshots: a memory cache in front of their files, the disk budget,
    // the writer thread, start-up recovery and deletion after their session.
    struct SnapshotWrite {
        store::SamplerRow row;  // with dir; size_bytes once written
        std::shared_ptr<SamplerSnapshot> snapshot;
        store::AdapterConfig config;
        std::string request_id;
    };
    // On the engine thread: refuses a snapshot the disk budget cannot hold (the error names the flag),
    // else reserves its bytes and queues its write; the writer thread then writes the files, records the
    // row, caches the snapshot and completes the future.
    Result<void> queue_snapshot(SnapshotWrite write);
    void snapshot_writer_loop();
    void write_snapshot(SnapshotWrite & write);
    std::string snapshot_dir(const std::string & sampler_id) const;
    // At start-up: schedules the deletion of ended sessions' snapshots, removes unrecorded directories
    // (a crash between write and row, temp dirs) and rows without files.
    Result<void> recover_snapshots();
    void expire_snapshots(double now);

    // sweeper.cpp: session expiry, checkpoint TTLs, pruning.
    void sweeper_loop();
    void expire_sessions(double now);
    void end_session(const std::string & session_id, const std::string & why);
    void expire_checkpoints(double now);

    AppOptions options_;
    void prepare_data_dir();
    Result<void> recover_from_last_process();
    Result<void> check_disk_room() const;
    std::atomic<bool> recovery_pending_{false};  // a full disk postponed recover_from_last_process
    Auth auth_;
    std::unique_ptr<store::Database> db_;
    std::unique_ptr<store::DiskReserve> disk_reserve_;  // DATA_DIR/.disk-reserve: released on SQLITE_FULL
    std::unique_ptr<scheduler::FutureTable> futures_;
    std::vector<std::unique_ptr<ServedModel>> models_;
    // Formats and answers sampling events off the engine threads (stopped after the workers; declared
    // after futures_ and db_ so it is gone before them).
    std::unique_ptr<OutputStage> output_stage_ = std::make_unique<OutputStage>();
    Router<Route> router_;
    std::unique_ptr<Registry> registry_;         // runs, snapshot cache, sessions' activity, archive tokens
    std::unique_ptr<SamplingService> sampling_;  // requests -> SampleJobs on the workers; 429 capacity

    std::thread snapshot_writer_;
    std::mutex snapshot_mutex_;  // guards the four below
    std::condition_variable snapshot_wake_;
    std::deque<SnapshotWrite> snapshot_queue_;
    int64_t snapshot_reserved_bytes_ = 0;  // of queued snapshots, not yet in the database
    bool snapshot_writer_stopping_ = false;

    std::thread sweeper_;
    std::mutex sweeper_mutex_;
    std::condition_variable sweeper_wake_;
    bool stopping_ = false;
    bool started_ = false;
    std::atomic<bool> shutting_down_{false};
    int64_t started_at_ = static_cast<int64_t>(std::time(nullptr));  // "created" of the base models in /v1/models
};

}  // namespace tinkerd::api
