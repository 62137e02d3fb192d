// Private parts of Database shared by its .cpp files: the connection (SQLite or PostgreSQL) and its mutex,
// the column lists of each table, and small helpers for row-count checks. Not for use outside src/store.
#pragma once

#include <chrono>
#include <condition_variable>
#include <mutex>
#include <optional>
#include <string>
#include <thread>
#include <vector>

#include "store/database.h"
#include "store/sql_statement.h"

namespace tinkerd::store {

struct Database::Impl {
    std::unique_ptr<SqlConnection> conn;
    std::mutex mutex;  // guards every use of `conn`
    int schema_version = 0;
    // The heartbeat thread of a shared database (front_ends.cpp).
    std::thread heartbeat_thread;
    std::mutex heartbeat_mutex;  // guards heartbeat_stopping
    std::condition_variable heartbeat_wake;
    bool heartbeat_stopping = false;

    // Waits up to `seconds` under `lock` (on heartbeat_mutex); true when stopping.
    bool heartbeat_wait_for(std::unique_lock<std::mutex> & lock, double seconds) {
        heartbeat_wake.wait_for(lock, std::chrono::duration<double>(seconds), [this] { return heartbeat_stopping; });
        return heartbeat_stopping;
    }

    Result<Statement> prepare(const char * sql, const char * what) { return conn->prepare(sql, what); }
};

// Column lists, in the order the read_* functions expect them.
#define TINKERD_SESSION_COLUMNS                                                                                \
    "session_id, tenant, tags_json, user_metadata_json, project_id, sdk_version, created_at, last_heartbeat, " \
    "expired, "                                                                                                \
    "display_name, finish_reason"
#define TINKERD_RUN_COLUMNS                                                                           \
    "run_id, tenant, session_id, base_model, lora_rank, train_attn, train_mlp, train_unembed, seed, " \
    "user_metadata_json, created_at, last_request_time, unloaded, optimizer"
#define TINKERD_CHECKPOINT_COLUMNS                                                                         \
    "run_id, checkpoint_id, checkpoint_type, tenant, dir, created_at, size_bytes, expires_at, is_public, " \
    "user_metadata_json"
#define TINKERD_SAMPLER_COLUMNS \
    "sampler_id, tenant, session_id, base_model, model_path, run_id, created_at, dir, size_bytes, expires_at, kind"
#define TINKERD_FUTURE_COLUMNS                                                                               \
    "request_id, tenant, request_type, run_id, seq_id, body_hash, state, result_json, result_proto, error, " \
    "error_category, created_at, finished_at"

// OK when the statement changed at least one row, else NOT_FOUND("<what> not found: <id>").
inline Result<void> expect_changed(const Result<int64_t> & changed, const std::string & what, const std::string & id) {
    TRY_STATUS(changed);
    if (changed.value() == 0) {
        return not_found(what + " not found: " + id);
    }
    return {};
}

// Runs a "SELECT COUNT(*) ..." statement whose parameters are already bound.
inline Result<int64_t> count_of(Statement & stmt) {
    Result<bool> row = stmt.step();
    TRY_STATUS(row);
    return row.value() ? stmt.integer(0) : 0;
}

// A sessions row read in TINKERD_SESSION_COLUMNS' order.
inline SessionRow read_session_row(const Statement & stmt) {
    SessionRow row;
    row.session_id = stmt.text(0);
    row.tenant = stmt.text(1);
    row.tags_json = stmt.text(2);
    row.user_metadata_json = stmt.text(3);
    row.project_id = stmt.text(4);
    row.sdk_version = stmt.text(5);
    row.created_at = stmt.real(6);
    row.last_heartbeat = stmt.real(7);
    row.expired = stmt.boolean(8);
    row.display_name = stmt.text(9);
    row.finish_reason = stmt.text(10);
    return row;
}

// Steps through every row of a bound statement, converting each with `read`.
template <typename Row, typename Reader>
Result<std::vector<Row>> collect(Statement & stmt, Reader read) {
    std::vector<Row> rows;
    while (true) {
        Result<bool> has_row = stmt.step();
        TRY_STATUS(has_row);
        if (!has_row.value()) {
            return rows;
        }
        rows.push_back(read(stmt));
    }
}

// Steps a bound statement once: the row, or nullopt when there is none.
template <typename Row, typename Reader>
Result<std::optional<Row>> first_row(Statement & stmt, Reader read) {
    Result<bool> has_row = stmt.step();
    TRY_STATUS(has_row);
    if (!has_row.value()) {
        return std::optional<Row>();
    }
    return std::optional<Row>(read(stmt));
}

}  // namespace tinkerd::store
