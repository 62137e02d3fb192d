// The store's schema as numbered migrations, and the runner that applies the missing ones. Scripts are
// constant SQL in SQLite's types (PostgreSQL gets them translated, sql_dialect.h); each runs with its
// schema_version row in one transaction holding the migration lock.
#include "store/migrations.h"

#include <chrono>
#include <string>

namespace tinkerd::store {
namespace {

// Version 1: every table of the first release.
constexpr const char * MIGRATION_1 = R"sql(
CREATE TABLE sessions (
    session_id TEXT PRIMARY KEY,
    tenant TEXT NOT NULL,
    tags_json TEXT NOT NULL DEFAULT '[]',
    user_metadata_json TEXT NOT NULL DEFAULT '{}',
    project_id TEXT NOT NULL DEFAULT '',
    sdk_version TEXT NOT NULL DEFAULT '',
    created_at REAL NOT NULL,
    last_heartbeat REAL NOT NULL,
    expired INTEGER NOT NULL DEFAULT 0
);
CREATE INDEX sessions_by_tenant ON sessions (tenant, created_at);
CREATE INDEX sessions_by_heartbeat ON sessions (expired, last_heartbeat);

CREATE TABLE training_runs (
    run_id TEXT PRIMARY KEY,
    tenant TEXT NOT NULL,
    session_id TEXT NOT NULL REFERENCES sessions (session_id),
    base_model TEXT NOT NULL,
    lora_rank INTEGER NOT NULL,
    train_attn INTEGER NOT NULL,
    train_mlp INTEGER NOT NULL,
    train_unembed INTEGER NOT NULL,
    seed INTEGER,
    user_metadata_json TEXT NOT NULL DEFAULT '{}',
    created_at REAL NOT NULL,
    last_request_time REAL NOT NULL,
    unloaded INTEGER NOT NULL DEFAULT 0
);
CREATE INDEX training_runs_by_tenant ON training_runs (tenant, created_at);
CREATE INDEX training_runs_by_session ON training_runs (session_id);

CREATE TABLE checkpoints (
    run_id TEXT NOT NULL REFERENCES training_runs (run_id),
    checkpoint_id TEXT NOT NULL,
    checkpoint_type TEXT NOT NULL,
    tenant TEXT NOT NULL,
    dir TEXT NOT NULL,
    created_at REAL NOT NULL,
    size_bytes INTEGER NOT NULL DEFAULT 0,
    expires_at REAL,
    is_public INTEGER NOT NULL DEFAULT 0,
    PRIMARY KEY (run_id, checkpoint_id)
);
CREATE INDEX checkpoints_by_tenant ON checkpoints (tenant, created_at);
CREATE INDEX checkpoints_by_expiry ON checkpoints (expires_at) WHERE expires_at IS NOT NULL;

CREATE TABLE samplers (
    sampler_id TEXT PRIMARY KEY,
    tenant TEXT NOT NULL,
    session_id TEXT NOT NULL REFERENCES sessions (session_id),
    base_model TEXT NOT NULL,
    model_path TEXT NOT NULL DEFAULT '',
    run_id TEXT NOT NULL DEFAULT '',
    created_at REAL NOT NULL
);
CREATE INDEX samplers_by_session ON samplers (session_id);

CREATE TABLE futures (
    request_id TEXT PRIMARY KEY,
    tenant TEXT NOT NULL,
    request_type TEXT NOT NULL,
    run_id TEXT NOT NULL DEFAULT '',
    seq_id INTEGER NOT NULL DEFAULT -1,
    body_hash TEXT NOT NULL DEFAULT '',
    state TEXT NOT NULL,
    result_json TEXT NOT NULL DEFAULT '',
    result_proto BLOB NOT NULL DEFAULT x'',
    error TEXT NOT NULL DEFAULT '',
    error_category TEXT NOT NULL DEFAULT '',
    created_at REAL NOT NULL,
    finished_at REAL NOT NULL DEFAULT 0
);
CREATE INDEX futures_by_seq ON futures (run_id, seq_id);
CREATE INDEX futures_by_state ON futures (state, finished_at);

CREATE TABLE counters (
    name TEXT PRIMARY KEY,
    value INTEGER NOT NULL
);
)sql";

// Version 2: unnamed sampler snapshots on disk. A snapshot's row records its directory (DATA_DIR/snapshots/
// <sampler_id>), its size (the --snapshot-disk-mib budget) and, once its session has ended, when it is deleted.
constexpr const char * MIGRATION_2 = R"sql(
ALTER TABLE samplers ADD COLUMN dir TEXT NOT NULL DEFAULT '';
ALTER TABLE samplers ADD COLUMN size_bytes INTEGER NOT NULL DEFAULT 0;
ALTER TABLE samplers ADD COLUMN expires_at REAL;
CREATE INDEX samplers_by_expiry ON samplers (expires_at) WHERE expires_at IS NOT NULL;
)sql";

// Version 3: the console's metrics (issue 14). run_metrics: one row per completed forward_backward, forward
// or optim_step of a run (values_json = every "name:reduction" metric plus num_tokens / learning_rate);
// `merged` > 1 marks a point that stands for several after downsampling (store/run_metrics.cpp).
// sampler_usage: requests and tokens sampled per sampler, so the counts survive a restart.
constexpr const char * MIGRATION_3 = R"sql(
CREATE TABLE run_metrics (
    point_id INTEGER PRIMARY KEY,
    run_id TEXT NOT NULL,
    op TEXT NOT NULL,
    step INTEGER NOT NULL,
    time REAL NOT NULL,
    duration_s REAL NOT NULL,
    values_json TEXT NOT NULL,
    merged INTEGER NOT NULL DEFAULT 1
);
CREATE INDEX run_metrics_by_run ON run_metrics (run_id, op, time);

CREATE TABLE sampler_usage (
    sampler_id TEXT NOT NULL,
    tenant TEXT NOT NULL,
    base_model TEXT NOT NULL,
    requests INTEGER NOT NULL DEFAULT 0,
    tokens_sampled INTEGER NOT NULL DEFAULT 0,
    last_used REAL NOT NULL,
    PRIMARY KEY (tenant, sampler_id)
);
)sql";

// Version 4: several front ends on one PostgreSQL database. A future's `owner` is the front end that runs it
// (SqlConnection::owner_id; 0 on SQLite), so that another front end can fail it once that one has stopped.
constexpr const char * MIGRATION_4 = R"sql(
ALTER TABLE futures ADD COLUMN owner INTEGER NOT NULL DEFAULT 0;
)sql";

// Version 5: sampler latency as a histogram (issue 14), so its quantiles survive a restart. One row per
// (tenant, sampler, bucket) with requests in it; common/latency_histogram.h says what a bucket index spans.
constexpr const char * MIGRATION_5 = R"sql(
CREATE TABLE sampler_latency (
    tenant TEXT NOT NULL,
    sampler_id TEXT NOT NULL,
    bucket_index INTEGER NOT NULL,
    count INTEGER NOT NULL DEFAULT 0,
    PRIMARY KEY (tenant, sampler_id, bucket_index)
);
)sql";

// Version 6: front ends' liveness on a shared database (pg_connection.cpp, front_ends.cpp). Each front end
// refreshes its row every few seconds (times from the server's clock); one whose advisory lock is free is
// gone only once its row is older than the grace period (a dropped connection loses the lock, not the row).
constexpr const char * MIGRATION_6 = R"sql(
CREATE TABLE front_ends (
    owner INTEGER NOT NULL,
    heartbeat_at REAL NOT NULL,
    started_at REAL NOT NULL,
    PRIMARY KEY (owner)
);
)sql";

// Version 7: SDK 0.38's metadata (issue 24). A session's display_name and how its client finished it
// ("success" / "errored" / "interrupted"; "" = not finished by the client), a checkpoint's user_metadata, and a
// sampler's kind ("inflight": it follows its training run's live weights; "" = base, checkpoint or snapshot), and
// a training run's optimizer ("adamw" or "dimuon", fixed for its life; its checkpoints' optimizer state is of it).
constexpr const char * MIGRATION_7 = R"sql(
ALTER TABLE sessions ADD COLUMN display_name TEXT NOT NULL DEFAULT '';
ALTER TABLE sessions ADD COLUMN finish_reason TEXT NOT NULL DEFAULT '';
ALTER TABLE checkpoints ADD COLUMN user_metadata_json TEXT NOT NULL DEFAULT '{}';
ALTER TABLE samplers ADD COLUMN kind TEXT NOT NULL DEFAULT '';
ALTER TABLE training_runs ADD COLUMN optimizer TEXT NOT NULL DEFAULT 'adamw';
)sql";

// Index i holds the script of version i + 1. Append new versions; never edit a released one.
constexpr const char * MIGRATIONS[] = {MIGRATION_1, MIGRATION_2, MIGRATION_3, MIGRATION_4,
                                       MIGRATION_5, MIGRATION_6, MIGRATION_7};

Result<int> current_version(SqlConnection & conn) {
    auto stmt = conn.prepare("SELECT COALESCE(MAX(version), 0) FROM schema_version", "read schema_version");
    TRY_STATUS(stmt);
    Result<bool> row = stmt->step();
    TRY_STATUS(row);
    return static_cast<int>(stmt->integer(0));
}

double unix_now() {
    return std::chrono::duration<double>(std::chrono::system_clock::now().time_since_epoch()).count();
}

// Applies one migration and records it, unless another connection already did while we waited.
Result<void> migrate_if_missing(SqlConnection & conn, int version) {
    TRY_STATUS(conn.lock_migrations());
    TRY_STATUS(
        conn.exec("CREATE TABLE IF NOT EXISTS schema_version ("
                  "version INTEGER PRIMARY KEY, applied_at REAL NOT NULL)",
                  "create schema_version"));
    Result<int> now = current_version(conn);
    TRY_STATUS(now);
    if (now.value() >= version) {
        return {};
    }
    TRY_STATUS(conn.exec(MIGRATIONS[version - 1], "migration " + std::to_string(version)));
    auto insert = conn.prepare("INSERT INTO schema_version (version, applied_at) VALUES (?1, ?2)", "record migration");
    TRY_STATUS(insert);
    TRY_STATUS(insert->bind_int(1, version).bind_double(2, unix_now()).run());
    return {};
}

}  // namespace

int latest_schema_version() {
    return static_cast<int>(sizeof(MIGRATIONS) / sizeof(MIGRATIONS[0]));
}

// The first transaction creates schema_version (under the lock: two PostgreSQL front ends starting at
// once would otherwise race on CREATE TABLE); then one transaction per missing version.
Result<int> run_migrations(SqlConnection & conn) {
    TRY_STATUS(in_transaction(conn, "read schema version", [&] { return migrate_if_missing(conn, 0); }));
    Result<int> version = current_version(conn);
    TRY_STATUS(version);
    if (version.value() > latest_schema_version()) {
        return internal_error("store: database schema version " + std::to_string(version.value()) +
                              " is newer than this build (" + std::to_string(latest_schema_version()) + ")");
    }
    for (int next = version.value() + 1; next <= latest_schema_version(); ++next) {
        TRY_STATUS(
            in_transaction(conn, "migration " + std::to_string(next), [&] { return migrate_if_missing(conn, next); }));
    }
    return current_version(conn);
}

}  // namespace tinkerd::store
