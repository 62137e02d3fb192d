// Database: tinkerd's store, a SQLite file (WAL mode; the default) or a PostgreSQL database shared by several
// front ends, with numbered migrations, holding sessions, training runs, checkpoints, samplers and finished
// futures. Thread-safe: one connection behind a mutex; every call is one short transaction. Times are Unix
// seconds (double). Knows nothing of HTTP or tensors.
#pragma once

#include <cstdint>
#include <map>
#include <memory>
#include <optional>
#include <string>
#include <vector>

#include "common/status.h"

namespace tinkerd::store {

struct SessionRow {
    std::string session_id;
    std::string tenant;
    std::string tags_json = "[]";           // JSON array of strings
    std::string user_metadata_json = "{}";  // JSON object
    std::string project_id;                 // "" = none
    std::string sdk_version;
    double created_at = 0;
    double last_heartbeat = 0;
    bool expired = false;
    std::string display_name;   // "" = none
    std::string finish_reason;  // how its client finished it: "success", "errored", "interrupted"; "" = not
};

struct TrainingRunRow {
    std::string run_id;  // "<session_id>:train:<model_seq_id>"
    std::string tenant;
    std::string session_id;
    std::string base_model;
    int64_t lora_rank = 32;
    bool train_attn = true;
    bool train_mlp = true;
    bool train_unembed = true;
    std::optional<int64_t> seed;
    std::string user_metadata_json = "{}";
    double created_at = 0;
    double last_request_time = 0;
    bool unloaded = false;            // adapter no longer in memory (unload_model, expired session, restart)
    std::string optimizer = "adamw";  // "adamw" or "dimuon" (SDK 0.38 optimizer_config), for the run's life
};

struct CheckpointRow {
    std::string run_id;
    std::string checkpoint_id;    // "weights/<name>" or "sampler_weights/<name>"
    std::string checkpoint_type;  // "training" or "sampler"
    std::string tenant;
    std::string dir;  // absolute directory of the files
    double created_at = 0;
    int64_t size_bytes = 0;
    std::optional<double> expires_at;
    bool is_public = false;
    std::string user_metadata_json = "{}";  // JSON object of strings
};

struct SamplerRow {
    std::string sampler_id;  // "<session_id>:sample:<n>"
    std::string tenant;
    std::string session_id;
    std::string base_model;
    std::string model_path;  // "" = base model; else a tinker:// path
    std::string run_id;      // the training run of an unnamed snapshot, else ""
    double created_at = 0;
    std::string dir;                   // a snapshot's files (DATA_DIR/snapshots/<sampler_id>), else ""
    int64_t size_bytes = 0;            // of `dir`'s files
    std::optional<double> expires_at;  // a snapshot's deletion time, set once its session has ended
    std::string kind;                  // "inflight": samples from run_id's live adapter; "" otherwise
};

// A finished (or, at a crash, pending) future. Results are kept so that a poll after a restart or a
// resent request is answered.
struct FutureRow {
    std::string request_id;
    std::string tenant;
    std::string request_type;  // "ForwardBackward", "OptimStep", ...
    std::string run_id;        // "" when not a training-run op
    int64_t seq_id = -1;
    std::string body_hash;  // hex digest of the submitted body (idempotency)
    std::string state;      // "pending", "done", "failed"
    std::string result_json;
    std::string result_proto;  // bytes; empty when the type has no protobuf form
    std::string error;
    std::string error_category;  // "user", "server"
    double created_at = 0;
    double finished_at = 0;
};

// One point of a run's metric curves: a completed forward_backward, forward or optim_step.
struct MetricPoint {
    std::string run_id;
    std::string op;    // "forward_backward", "forward" or "optim_step"
    int64_t step = 0;  // the run's optimizer steps when the op ran (optim_step: the count after it)
    double time = 0;   // when it completed
    double duration_s = 0;
    std::map<std::string, double> values;  // "loss:sum", ..., "num_tokens" or "learning_rate"
    int64_t merged = 1;                    // how many recorded ops this point stands for (downsampling)
};

// A point with its row id: ids grow as points are written, so "ids above N" is what arrived since N.
struct NumberedPoint {
    int64_t point_id = 0;
    MetricPoint point;
};

// Requests and tokens sampled by one sampler of a tenant (a sampler id, or the model an OpenAI call named).
struct SamplerUsageRow {
    std::string sampler_id;
    std::string tenant;
    std::string base_model;
    int64_t requests = 0;
    int64_t tokens_sampled = 0;
    double last_used = 0;
};

// A latency histogram's requests per bucket index (common/latency_histogram.h), empty buckets left out.
using LatencyCounts = std::map<int, int64_t>;

// One finished sample request's counts (requests, tokens) and, when it succeeded, its latency bucket.
struct SamplerUsageDelta {
    SamplerUsageRow usage;
    std::optional<int> latency_bucket;
};

// Where a newest-first walk through sessions resumes: after (created_at, session_id).
struct SessionCursor {
    double created_at = 0;
    std::string session_id;
};

// Checkpoints and their bytes, of one session or of one project.
struct CheckpointUsage {
    std::string project_id;
    int64_t count = 0;
    int64_t size_bytes = 0;
};

// What the telemetry writer (api/telemetry_writer.h) has queued: written in one transaction.
struct TelemetryBatch {
    std::vector<MetricPoint> points;
    std::vector<SamplerUsageDelta> usage;
};

struct StoreOptions {
    // Shared (PostgreSQL) databases: how often this front end's front_ends row is refreshed; it counts as
    // gone only when its owner lock is free and its row is older than FRONT_END_GRACE_HEARTBEATS (3) of these.
    double heartbeat_seconds = 3.0;
};

// Whether a --database value names a PostgreSQL server ("postgresql://" or "postgres://") rather than a file.
bool is_postgres_uri(const std::string & location);

struct Page {
    int64_t limit = 20;
    int64_t offset = 0;
};

class Database {
  public:
    // Errors: database failures are INTERNAL ("sqlite: <what>: <message>" or "postgresql: ..."); an update or delete
    // that matches no row (touch_*, mark_*_expired/unloaded, set_checkpoint_*, delete_checkpoint, finish_future) is
    // NOT_FOUND. Foreign keys: a run's and a sampler's session_id, and a checkpoint's run_id, must exist.
    // `location` "postgresql://user@host:port/db" (or "postgres://"; any libpq URI) connects to that
    // database; anything else is a SQLite file, opened (created if needed) with WAL and foreign keys, and
    // ":memory:" a private in-memory database (tests). Runs the pending migrations in both cases.
    // On a shared database a background thread refreshes this front end's heartbeat (front_ends.cpp); the
    // destructor stops it and deletes the row.
    static Result<std::unique_ptr<Database>> open(const std::string & location, StoreOptions options = {});
    ~Database();
    Database(const Database &) = delete;
    Database & operator=(const Database &) = delete;

    int schema_version() const;
    // Whether other processes may use the same database (PostgreSQL), and whether no other front end had it
    // open when this one connected (always true for SQLite): only then is the last process's leftover
    // state (pending futures, loaded runs) safe to recover.
    bool shared() const;
    bool sole_user_at_open() const;

    // Sessions.
    Result<void> insert_session(const SessionRow & row);
    Result<std::optional<SessionRow>> get_session(const std::string & session_id);
    Result<void> touch_session(const std::string & session_id, double now);  // last_heartbeat = now
    Result<void> mark_session_expired(const std::string & session_id);
    // Sessions of a tenant, newest first, and their total count.
    Result<std::pair<std::vector<SessionRow>, int64_t>> list_sessions(const std::string & tenant, Page page);
    // Up to `limit` of a tenant's sessions older than `after` (all when none), newest first, ties by id.
    Result<std::vector<SessionRow>> sessions_after(const std::string & tenant,
                                                   const std::optional<SessionCursor> & after, int64_t limit);
    Result<void> set_session_finish_reason(const std::string & session_id, const std::string & reason);
    // The checkpoints (named: training and sampler) of a session's runs.
    Result<CheckpointUsage> session_checkpoint_usage(const std::string & session_id);
    // A tenant's checkpoints per project of the session that made them (project "" = none); one project when
    // `project` is given.
    Result<std::vector<CheckpointUsage>> checkpoint_usage_by_project(const std::string & tenant,
                                                                     const std::optional<std::string> & project);
    // Live sessions whose last heartbeat is older than `before`.
    Result<std::vector<SessionRow>> stale_sessions(double before);

    // Training runs.
    Result<void> insert_run(const TrainingRunRow & row);
    Result<std::optional<TrainingRunRow>> get_run(const std::string & run_id);
    Result<void> touch_run(const std::string & run_id, double now);  // last_request_time = now
    Result<void> mark_run_unloaded(const std::string & run_id);
    Result<void> mark_all_runs_unloaded();  // at start-up: nothing is in memory yet
    // A tenant's runs, newest first (tenant "" = every tenant), and their total count.
    Result<std::pair<std::vector<TrainingRunRow>, int64_t>> list_runs(const std::string & tenant, Page page);
    Result<std::vector<TrainingRunRow>> runs_of_session(const std::string & session_id);

    // Checkpoints. insert replaces a row with the same (run_id, checkpoint_id).
    Result<void> upsert_checkpoint(const CheckpointRow & row);
    Result<std::optional<CheckpointRow>> get_checkpoint(const std::string & run_id, const std::string & checkpoint_id);
    Result<void> delete_checkpoint(const std::string & run_id, const std::string & checkpoint_id);
    Result<void> set_checkpoint_public(const std::string & run_id, const std::string & checkpoint_id, bool is_public);
    Result<void> set_checkpoint_expiry(const std::string & run_id, const std::string & checkpoint_id,
                                       std::optional<double> expires_at);
    // A run's checkpoints, oldest first.
    Result<std::vector<CheckpointRow>> list_run_checkpoints(const std::string & run_id);
    // A tenant's checkpoints, newest first, and their total count.
    Result<std::pair<std::vector<CheckpointRow>, int64_t>> list_tenant_checkpoints(const std::string & tenant,
                                                                                   Page page);
    // The run's newest checkpoint of the type ("training" / "sampler"), if any.
    Result<std::optional<CheckpointRow>> last_checkpoint(const std::string & run_id, const std::string & type);
    // Checkpoints with expires_at <= now.
    Result<std::vector<CheckpointRow>> expired_checkpoints(double now);

    // Samplers.
    Result<void> insert_sampler(const SamplerRow & row);
    Result<std::optional<SamplerRow>> get_sampler(const std::string & sampler_id);
    Result<std::vector<SamplerRow>> samplers_of_session(const std::string & session_id);
    Result<void> delete_sampler(const std::string & sampler_id);
    // Snapshots (samplers with a dir): their total size, all of them, and those with expires_at <= now.
    Result<int64_t> snapshot_bytes();
    Result<std::vector<SamplerRow>> snapshot_samplers();
    Result<std::vector<SamplerRow>> expired_snapshots(double now);
    // Gives every snapshot of an expired session that has no expiry yet `expires_at`; returns how many.
    Result<int64_t> schedule_snapshot_expiry(double expires_at);

    // Futures. insert at submission (state "pending"); finish when done or failed.
    Result<void> insert_future(const FutureRow & row);
    Result<void> finish_future(const FutureRow & row);  // updates state, results, error, finished_at
    Result<std::optional<FutureRow>> get_future(const std::string & request_id);
    // The future submitted for (run_id, seq_id), if any (idempotent resends).
    Result<std::optional<FutureRow>> future_by_seq(const std::string & run_id, int64_t seq_id);
    // Pending futures of one request type (at start-up, before they are failed).
    Result<std::vector<FutureRow>> pending_futures(const std::string & request_type);
    // At start-up: every still-pending future becomes failed with this error (category "server").
    Result<int64_t> fail_pending_futures(const std::string & error, double now);
    // On a shared database: every pending future whose front end is gone (killed, stopped: its owner lock is
    // free AND its heartbeat is older than the grace period, or its row is deleted) becomes failed with this
    // error (category "server"); returns how many. Never touches a live one's, even while its connection is
    // down (PostgreSQL restarted): its heartbeat is recent.
    Result<int64_t> fail_orphaned_futures(const std::string & error, double now);
    // Deletes finished futures older than `before`; returns how many.
    Result<int64_t> prune_futures(double before);

    // This front end's heartbeat now (the background thread calls it every heartbeat_seconds; no-op on SQLite).
    Result<void> heartbeat();

    // Run metrics (run_metrics.cpp). record adds a point; when the run then holds more than
    // max_points_per_op points of that op, its oldest half is thinned by merging neighbours in pairs.
    Result<void> record_metric_point(const MetricPoint & point, int64_t max_points_per_op);
    // A batch of points and sampler usage in one transaction; then each touched (run, op) over the bound is
    // thinned, a few pairs per transaction (the connection is released between them).
    Result<void> write_telemetry(const TelemetryBatch & batch, int64_t max_points_per_op);
    // Retention (docs/console.md): deletes the points of runs that are gone or idle since `before` with no
    // checkpoint left, and the usage and latency rows of samplers unused since `before`; returns the rows deleted.
    Result<int64_t> prune_metrics(double before);
    // A run's points with step >= since_step, ordered by time; and whether any was merged.
    Result<std::vector<MetricPoint>> metric_points(const std::string & run_id, int64_t since_step);
    Result<bool> metrics_downsampled(const std::string & run_id);
    // For a push stream (api/run_events.cpp): a run's points with point_id in (after_id, upto_id] and
    // step >= since_step, ordered by time; and the run's largest point_id (0 when it has none).
    Result<std::vector<NumberedPoint>> metric_points_after(const std::string & run_id, int64_t after_id,
                                                           int64_t upto_id, int64_t since_step);
    Result<int64_t> last_metric_point_id(const std::string & run_id);
    // Adds `delta`'s requests and tokens to its sampler's row (created when missing) and, with a
    // `latency_bucket`, one request to that bucket of the sampler's latency histogram; one transaction.
    Result<void> add_sampler_usage(const SamplerUsageRow & delta, std::optional<int> latency_bucket = std::nullopt);
    // A tenant's samplers' usage, most recently used first (tenant "" = every tenant).
    Result<std::vector<SamplerUsageRow>> sampler_usage(const std::string & tenant);
    // The latency histograms of the tenant's `samplers` first samplers in sampler_usage's order: sampler id
    // -> (bucket index -> requests), non-empty buckets only (tenant "" = every tenant; one id used by
    // several tenants then gets their sum).
    Result<std::map<std::string, LatencyCounts>> sampler_latency_counts(const std::string & tenant, int64_t samplers);

    // A monotonically increasing counter (request ids, session ids) that survives restarts.
    Result<int64_t> next_counter(const std::string & name);

  private:
    Database() = default;
    void start_heartbeat(double seconds);
    void stop_heartbeat();
    struct Impl;
    std::unique_ptr<Impl> impl_;
};

}  // namespace tinkerd::store
