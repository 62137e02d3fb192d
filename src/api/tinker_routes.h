// TinkerRoutes: the Tinker API under /api/v1/: sessions, training (ordered operations on each base
// model's EngineWorker), checkpoints and sampler snapshots (with their writer thread), asample (through
// the SamplingService), the REST metadata and retrieve_future; and the sweeper thread that ends idle
// sessions and expires checkpoints and snapshots. Handlers live in the *_handlers.cpp files it names.
#pragma once

#include <atomic>
#include <condition_variable>
#include <deque>
#include <functional>
#include <memory>
#include <mutex>
#include <optional>
#include <string>
#include <thread>

#include "api/app_options.h"
#include "api/completion_queues.h"
#include "api/registry.h"
#include "api/router.h"
#include "api/sampling_service.h"
#include "api/sequence_records.h"
#include "api/telemetry.h"
#include "scheduler/futures.h"
#include "store/checkpoint_files.h"
#include "store/database.h"
#include "store/disk_reserve.h"
#include "wire/forward_backward_codec.h"
#include "wire/sample_codec.h"

namespace tinkerd::api {

class PrometheusText;
class EventStreams;
struct RunFeed;
struct ConsoleFeed;

// monitoring_handlers.cpp, shared with run_events.cpp: the since_step query parameter (0 when absent; 400
// naming it when not a non-negative integer) and a metric point as the API answers it.
Result<int64_t> since_step_of(const http::Request & req);
json metric_point_json(const store::MetricPoint & p);
using scheduler::guarded_engine_call;
using AdapterId = engine::AdapterId;

// One checkpoint to write (save_weights / a named save_weights_for_sampler), as its request named it.
struct CheckpointSave {
    TinkerPath path;
    std::optional<int64_t> ttl_seconds;
    bool overwrite = false;
    json user_metadata = json::object();  // strings only, checked by the handler
    std::string tenant;
    std::string result_type;  // "save_weights" or "save_weights_for_sampler"
};

// What the Tinker routes use, owned by the App.
struct TinkerDeps {
    store::Database * db = nullptr;
    store::DiskReserve * disk_reserve = nullptr;
    scheduler::FutureTable * futures = nullptr;
    Registry * registry = nullptr;
    SamplingService * sampling = nullptr;
    Telemetry * telemetry = nullptr;
    EventStreams * events = nullptr;  // the open Server-Sent-Event streams (run_events.cpp)
};

class TinkerRoutes {
  public:
    TinkerRoutes(AppOptions options, TinkerDeps deps);
    void add_routes(Router<Route> & router);

    // The last process's pending futures failed, its runs unloaded, its snapshots recovered (a full
    // disk postpones this to the sweeper).
    Result<void> recover_from_last_process();
    // The sweeper and snapshot writer threads. stop_sweeper() comes first at shutdown (queued ops are
    // then cancelled as the server's doing); stop_snapshot_writer() after the workers, which queue snapshots.
    void start();
    void stop_sweeper();
    void stop_snapshot_writer();

    // The paths of a run's training ops, those that take one of its seq_ids (tinker-protocol.md §4.9).
    static bool takes_seq_id(const std::string & path);
    // futures_handler.cpp: `tenant`'s training op refused unread (413): releases the seq_id its body's first
    // bytes name (App::refused_body); returns the note for the 413's detail, or "".
    std::string release_refused_body(const std::string & tenant, const http::Request & request);

  private:
    using SyncHandler = Result<json> (TinkerRoutes::*)(Call &);
    using AsyncHandler = void (TinkerRoutes::*)(Call &, http::Respond);
    // The route table (tinker_routes.cpp), each route with its RouteDoc for GET /openapi.json.
    void register_unsupported_routes();
    void add_session_routes();
    void add_training_routes();
    void add_rest_routes();
    void add_sync(const std::string & method, const std::string & path, SyncHandler handler, RouteDoc doc,
                  bool json_body = true);
    // Needs the key unless doc.key is KeyCheck::NONE.
    void add_async(const std::string & method, const std::string & path, AsyncHandler handler, RouteDoc doc,
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
    Result<void> attach_sampler_records(const std::string & session_id, wire::ForwardBackwardRequest & request);
    wire::DecodeLimits decode_limits(const std::string & tenant, const std::string & model_id);
    void release_refused_seq(const std::string & tenant, const std::string & model_id, const json & seq_id);
    Result<json> optim_step(Call & call);

    // checkpoint_handlers.cpp: saving and loading weights.
    Result<json> save_weights(Call & call);
    Result<json> save_weights_for_sampler(Call & call);
    Result<json> load_weights(Call & call);
    Result<json> register_inflight_sampler(Call & call, const RunPtr & run, int64_t seq_id, int64_t sampler_seq);
    Result<void> import_checkpoint(engine::Engine & engine, const RunState & run, const std::string & dir,
                                   bool with_optimizer);
    static Result<void> check_loadable(int64_t seq_id, const Result<store::CheckpointRow> & checkpoint,
                                       bool with_optimizer);
    // On the engine thread: write a checkpoint's files and row, then complete the future `request_id`.
    void store_checkpoint(const RunState & run, const CheckpointSave & save, const std::string & request_id,
                          const store::Tensors & tensors);
    Result<json> create_model_from_checkpoint(Call & call, const store::CheckpointRow & checkpoint, bool with_optimizer,
                                              const std::optional<std::string> & optimizer);
    Result<void> check_same_optimizer(const RunState & run, const store::CheckpointRow & checkpoint,
                                      bool with_optimizer, const std::optional<std::string> & optimizer);
    Result<json> weights_info(Call & call);
    Result<json> create_sampling_session(Call & call);

    // sampling_handlers.cpp: asample / compute_logprobs.
    Result<json> asample(Call & call);
    Result<json> cancel_future(Call & call);
    void retrieve_futures(Call & call, http::Respond respond);
    using SampleRecord = std::pair<std::string, std::vector<int64_t>>;  // (session id, prompt)
    std::shared_ptr<SampleSink> sample_sink(const std::string & request_id, const wire::SampleEncoding & encoding,
                                            std::optional<SampleRecord> record, const std::string & queue,
                                            std::shared_ptr<std::atomic<bool>> cancelled);
    Result<engine::SampleRequest> parse_sample_request(const json & body, const ServedModel & model);

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

    // monitoring_handlers.cpp: a run's metric points, server_status, and /metrics (Prometheus text).
    Result<json> run_metrics(Call & call);
    Result<json> server_status(Call & call);
    json model_status_json(const ServedModel & model) const;
    Result<json> samplers_status_json(const std::string & tenant) const;
    Result<json> sessions_status_json(const std::string & tenant) const;
    void prometheus_metrics(Call & call, http::Respond respond);
    void write_process_metrics(PrometheusText & out) const;
    void write_http_metrics(PrometheusText & out) const;
    void write_model_metrics(PrometheusText & out) const;

    // run_events.cpp: a run's live events (Server-Sent Events), fed by the EventStreams thread.
    void run_events(Call & call, http::Respond respond);
    std::string refresh_run_feed(RunFeed & feed);
    std::optional<json> new_points(RunFeed & feed);
    // console_events.cpp: the console views' live events (runs, status, several runs' metrics).
    void console_events(Call & call, http::Respond respond);
    std::string refresh_console_feed(ConsoleFeed & feed);
    std::string runs_event(ConsoleFeed & feed);
    std::string status_event(ConsoleFeed & feed);

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
    // A new pending future, also recorded in the database (so a restart can answer it).
    std::string create_future(const std::string & tenant, const std::string & request_type,
                              const std::string & run_id = "");
    // session_search.cpp: sessions/search and checkpoint storage usage (SDK 0.38).
    Result<json> search_sessions(Call & call);
    Result<json> session_summary(const store::SessionRow & row);
    Result<json> checkpoint_storage_usage(Call & call);
    // A checkpoint as the SDK's Checkpoint; user_metadata only for its owner (`tenant`).
    static json checkpoint_json(const store::CheckpointRow & row, const std::string & tenant);
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
    void fail_orphaned_futures(double now);  // shared database: a stopped front end's pending ones
    void end_session(const std::string & session_id, const std::string & why);
    void expire_checkpoints(double now);

    Result<void> check_disk_room() const;

    AppOptions options_;
    Router<Route> * router_ = nullptr;  // while add_routes() runs
    store::Database * db_;
    store::DiskReserve * disk_reserve_;
    scheduler::FutureTable * futures_;
    Registry * registry_;
    SamplingService * sampling_;
    SequenceRecords sequence_records_;    // record_stability_info samples, for stable_reinforce
    CompletionQueues completion_queues_;  // retrieve_futures: finished samples per sampling session clone
    // asample requests still running: request id -> (tenant, the flag cancel_future sets).
    std::mutex sample_cancel_mutex_;
    std::map<std::string, std::pair<std::string, std::shared_ptr<std::atomic<bool>>>> running_samples_;
    Telemetry * telemetry_;
    EventStreams * events_;
    std::atomic<bool> recovery_pending_{false};  // a full disk postponed recover_from_last_process

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
    std::atomic<bool> shutting_down_{false};
};

}  // namespace tinkerd::api
