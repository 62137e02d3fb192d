// Database: the checkpoints, samplers, futures and counters tables (sessions and training runs are in
// database.cpp). Every query is a prepared statement with bound parameters, run under the mutex.
#include "store/database.h"
#include "store/database_impl.h"

namespace tinkerd::store {
namespace {

using Lock = std::lock_guard<std::mutex>;

CheckpointRow read_checkpoint_row(const Statement & stmt) {
    CheckpointRow row;
    row.run_id = stmt.text(0);
    row.checkpoint_id = stmt.text(1);
    row.checkpoint_type = stmt.text(2);
    row.tenant = stmt.text(3);
    row.dir = stmt.text(4);
    row.created_at = stmt.real(5);
    row.size_bytes = stmt.integer(6);
    row.expires_at = stmt.optional_double(7);
    row.is_public = stmt.boolean(8);
    row.user_metadata_json = stmt.text(9);
    return row;
}

SamplerRow read_sampler(const Statement & stmt) {
    SamplerRow row;
    row.sampler_id = stmt.text(0);
    row.tenant = stmt.text(1);
    row.session_id = stmt.text(2);
    row.base_model = stmt.text(3);
    row.model_path = stmt.text(4);
    row.run_id = stmt.text(5);
    row.created_at = stmt.real(6);
    row.dir = stmt.text(7);
    row.size_bytes = stmt.integer(8);
    row.expires_at = stmt.optional_double(9);
    row.kind = stmt.text(10);
    return row;
}

FutureRow read_future(const Statement & stmt) {
    FutureRow row;
    row.request_id = stmt.text(0);
    row.tenant = stmt.text(1);
    row.request_type = stmt.text(2);
    row.run_id = stmt.text(3);
    row.seq_id = stmt.integer(4);
    row.body_hash = stmt.text(5);
    row.state = stmt.text(6);
    row.result_json = stmt.text(7);
    row.result_proto = stmt.blob(8);
    row.error = stmt.text(9);
    row.error_category = stmt.text(10);
    row.created_at = stmt.real(11);
    row.finished_at = stmt.real(12);
    return row;
}

std::string checkpoint_key(const std::string & run_id, const std::string & checkpoint_id) {
    return run_id + "/" + checkpoint_id;
}

}  // namespace

// ---- Checkpoints ----

Result<void> Database::upsert_checkpoint(const CheckpointRow & row) {
    Lock lock(impl_->mutex);
    auto stmt = impl_->prepare("INSERT INTO checkpoints (" TINKERD_CHECKPOINT_COLUMNS
                               ") VALUES (?1, ?2, ?3, ?4, ?5, ?6, ?7, ?8, ?9, ?10)"
                               " ON CONFLICT (run_id, checkpoint_id) DO UPDATE SET"
                               " checkpoint_type = excluded.checkpoint_type, tenant = excluded.tenant,"
                               " dir = excluded.dir, created_at = excluded.created_at,"
                               " size_bytes = excluded.size_bytes, expires_at = excluded.expires_at,"
                               " is_public = excluded.is_public, user_metadata_json = excluded.user_metadata_json",
                               "upsert_checkpoint");
    TRY_STATUS(stmt);
    stmt->bind_text(1, row.run_id).bind_text(2, row.checkpoint_id).bind_text(3, row.checkpoint_type);
    stmt->bind_text(4, row.tenant).bind_text(5, row.dir).bind_double(6, row.created_at);
    stmt->bind_int(7, row.size_bytes).bind_optional_double(8, row.expires_at).bind_bool(9, row.is_public);
    stmt->bind_text(10, row.user_metadata_json);
    TRY_STATUS(stmt->run());
    return {};
}

Result<std::optional<CheckpointRow>> Database::get_checkpoint(const std::string & run_id,
                                                              const std::string & checkpoint_id) {
    Lock lock(impl_->mutex);
    auto stmt = impl_->prepare("SELECT " TINKERD_CHECKPOINT_COLUMNS
                               " FROM checkpoints WHERE run_id = ?1 AND checkpoint_id = ?2",
                               "get_checkpoint");
    TRY_STATUS(stmt);
    stmt->bind_text(1, run_id).bind_text(2, checkpoint_id);
    return first_row<CheckpointRow>(stmt.value(), read_checkpoint_row);
}

Result<void> Database::delete_checkpoint(const std::string & run_id, const std::string & checkpoint_id) {
    Lock lock(impl_->mutex);
    auto stmt = impl_->prepare("DELETE FROM checkpoints WHERE run_id = ?1 AND checkpoint_id = ?2", "delete_checkpoint");
    TRY_STATUS(stmt);
    return expect_changed(stmt->bind_text(1, run_id).bind_text(2, checkpoint_id).run(), "checkpoint",
                          checkpoint_key(run_id, checkpoint_id));
}

Result<void> Database::set_checkpoint_public(const std::string & run_id, const std::string & checkpoint_id,
                                             bool is_public) {
    Lock lock(impl_->mutex);
    auto stmt = impl_->prepare("UPDATE checkpoints SET is_public = ?3 WHERE run_id = ?1 AND checkpoint_id = ?2",
                               "set_checkpoint_public");
    TRY_STATUS(stmt);
    stmt->bind_text(1, run_id).bind_text(2, checkpoint_id).bind_bool(3, is_public);
    return expect_changed(stmt->run(), "checkpoint", checkpoint_key(run_id, checkpoint_id));
}

Result<void> Database::set_checkpoint_expiry(const std::string & run_id, const std::string & checkpoint_id,
                                             std::optional<double> expires_at) {
    Lock lock(impl_->mutex);
    auto stmt = impl_->prepare("UPDATE checkpoints SET expires_at = ?3 WHERE run_id = ?1 AND checkpoint_id = ?2",
                               "set_checkpoint_expiry");
    TRY_STATUS(stmt);
    stmt->bind_text(1, run_id).bind_text(2, checkpoint_id).bind_optional_double(3, expires_at);
    return expect_changed(stmt->run(), "checkpoint", checkpoint_key(run_id, checkpoint_id));
}

Result<std::vector<CheckpointRow>> Database::list_run_checkpoints(const std::string & run_id) {
    Lock lock(impl_->mutex);
    auto stmt = impl_->prepare("SELECT " TINKERD_CHECKPOINT_COLUMNS
                               " FROM checkpoints WHERE run_id = ?1 ORDER BY created_at, rowid",
                               "list_run_checkpoints");
    TRY_STATUS(stmt);
    stmt->bind_text(1, run_id);
    return collect<CheckpointRow>(stmt.value(), read_checkpoint_row);
}

Result<std::pair<std::vector<CheckpointRow>, int64_t>> Database::list_tenant_checkpoints(const std::string & tenant,
                                                                                         Page page) {
    Lock lock(impl_->mutex);
    auto stmt = impl_->prepare("SELECT " TINKERD_CHECKPOINT_COLUMNS
                               " FROM checkpoints WHERE tenant = ?1"
                               " ORDER BY created_at DESC, rowid DESC LIMIT ?2 OFFSET ?3",
                               "list_tenant_checkpoints");
    TRY_STATUS(stmt);
    stmt->bind_text(1, tenant).bind_int(2, page.limit).bind_int(3, page.offset);
    auto rows = collect<CheckpointRow>(stmt.value(), read_checkpoint_row);
    TRY_STATUS(rows);
    auto count = impl_->prepare("SELECT COUNT(*) FROM checkpoints WHERE tenant = ?1", "count_tenant_checkpoints");
    TRY_STATUS(count);
    Result<int64_t> total = count_of(count->bind_text(1, tenant));
    TRY_STATUS(total);
    return std::make_pair(std::move(rows.value()), total.value());
}

Result<std::optional<CheckpointRow>> Database::last_checkpoint(const std::string & run_id, const std::string & type) {
    Lock lock(impl_->mutex);
    auto stmt = impl_->prepare("SELECT " TINKERD_CHECKPOINT_COLUMNS
                               " FROM checkpoints WHERE run_id = ?1 AND checkpoint_type = ?2"
                               " ORDER BY created_at DESC, rowid DESC LIMIT 1",
                               "last_checkpoint");
    TRY_STATUS(stmt);
    stmt->bind_text(1, run_id).bind_text(2, type);
    return first_row<CheckpointRow>(stmt.value(), read_checkpoint_row);
}

Result<std::vector<CheckpointRow>> Database::expired_checkpoints(double now) {
    Lock lock(impl_->mutex);
    auto stmt = impl_->prepare("SELECT " TINKERD_CHECKPOINT_COLUMNS
                               " FROM checkpoints WHERE expires_at IS NOT NULL AND expires_at <= ?1"
                               " ORDER BY expires_at, rowid",
                               "expired_checkpoints");
    TRY_STATUS(stmt);
    stmt->bind_double(1, now);
    return collect<CheckpointRow>(stmt.value(), read_checkpoint_row);
}

// ---- Samplers ----

Result<void> Database::insert_sampler(const SamplerRow & row) {
    Lock lock(impl_->mutex);
    auto stmt = impl_->prepare("INSERT INTO samplers (" TINKERD_SAMPLER_COLUMNS
                               ") VALUES (?1, ?2, ?3, ?4, ?5, ?6, ?7, ?8, ?9, ?10, ?11)",
                               "insert_sampler");
    TRY_STATUS(stmt);
    stmt->bind_text(1, row.sampler_id).bind_text(2, row.tenant).bind_text(3, row.session_id);
    stmt->bind_text(4, row.base_model).bind_text(5, row.model_path).bind_text(6, row.run_id);
    stmt->bind_double(7, row.created_at).bind_text(8, row.dir).bind_int(9, row.size_bytes);
    stmt->bind_optional_double(10, row.expires_at).bind_text(11, row.kind);
    TRY_STATUS(stmt->run());
    return {};
}

Result<std::optional<SamplerRow>> Database::get_sampler(const std::string & sampler_id) {
    Lock lock(impl_->mutex);
    auto stmt = impl_->prepare("SELECT " TINKERD_SAMPLER_COLUMNS " FROM samplers WHERE sampler_id = ?1", "get_sampler");
    TRY_STATUS(stmt);
    stmt->bind_text(1, sampler_id);
    return first_row<SamplerRow>(stmt.value(), read_sampler);
}

Result<std::vector<SamplerRow>> Database::samplers_of_session(const std::string & session_id) {
    Lock lock(impl_->mutex);
    auto stmt = impl_->prepare("SELECT " TINKERD_SAMPLER_COLUMNS
                               " FROM samplers WHERE session_id = ?1 ORDER BY created_at, rowid",
                               "samplers_of_session");
    TRY_STATUS(stmt);
    stmt->bind_text(1, session_id);
    return collect<SamplerRow>(stmt.value(), read_sampler);
}

Result<void> Database::delete_sampler(const std::string & sampler_id) {
    Lock lock(impl_->mutex);
    auto stmt = impl_->prepare("DELETE FROM samplers WHERE sampler_id = ?1", "delete_sampler");
    TRY_STATUS(stmt);
    return expect_changed(stmt->bind_text(1, sampler_id).run(), "sampler", sampler_id);
}

Result<int64_t> Database::snapshot_bytes() {
    Lock lock(impl_->mutex);
    auto stmt = impl_->prepare("SELECT COALESCE(SUM(size_bytes), 0) FROM samplers WHERE dir != ''", "snapshot_bytes");
    TRY_STATUS(stmt);
    return count_of(stmt.value());
}

Result<std::vector<SamplerRow>> Database::snapshot_samplers() {
    Lock lock(impl_->mutex);
    auto stmt =
        impl_->prepare("SELECT " TINKERD_SAMPLER_COLUMNS " FROM samplers WHERE dir != '' ORDER BY created_at, rowid",
                       "snapshot_samplers");
    TRY_STATUS(stmt);
    return collect<SamplerRow>(stmt.value(), read_sampler);
}

Result<std::vector<SamplerRow>> Database::expired_snapshots(double now) {
    Lock lock(impl_->mutex);
    auto stmt = impl_->prepare("SELECT " TINKERD_SAMPLER_COLUMNS
                               " FROM samplers WHERE expires_at IS NOT NULL AND expires_at <= ?1 AND dir != ''"
                               " ORDER BY expires_at, rowid",
                               "expired_snapshots");
    TRY_STATUS(stmt);
    stmt->bind_double(1, now);
    return collect<SamplerRow>(stmt.value(), read_sampler);
}

Result<int64_t> Database::schedule_snapshot_expiry(double expires_at) {
    Lock lock(impl_->mutex);
    auto stmt = impl_->prepare(
        "UPDATE samplers SET expires_at = ?1 WHERE dir != '' AND expires_at IS NULL"
        " AND session_id IN (SELECT session_id FROM sessions WHERE expired = 1)",
        "schedule_snapshot_expiry");
    TRY_STATUS(stmt);
    return stmt->bind_double(1, expires_at).run();
}

// ---- Futures ----

Result<void> Database::insert_future(const FutureRow & row) {
    Lock lock(impl_->mutex);
    auto stmt = impl_->prepare("INSERT INTO futures (" TINKERD_FUTURE_COLUMNS
                               ", owner) VALUES (?1, ?2, ?3, ?4, ?5, ?6, ?7, ?8, ?9, ?10, ?11, ?12, ?13, ?14)",
                               "insert_future");
    TRY_STATUS(stmt);
    stmt->bind_text(1, row.request_id).bind_text(2, row.tenant).bind_text(3, row.request_type);
    stmt->bind_text(4, row.run_id).bind_int(5, row.seq_id).bind_text(6, row.body_hash);
    stmt->bind_text(7, row.state.empty() ? std::string("pending") : row.state).bind_text(8, row.result_json);
    stmt->bind_blob(9, row.result_proto).bind_text(10, row.error).bind_text(11, row.error_category);
    stmt->bind_double(12, row.created_at).bind_double(13, row.finished_at).bind_int(14, impl_->conn->owner_id());
    TRY_STATUS(stmt->run());
    return {};
}

// Written once: a future another front end already failed (its owner looked gone) keeps that outcome,
// which clients may have seen; NOT_FOUND then, as for an id never recorded.
Result<void> Database::finish_future(const FutureRow & row) {
    Lock lock(impl_->mutex);
    auto stmt = impl_->prepare(
        "UPDATE futures SET state = ?2, result_json = ?3, result_proto = ?4, error = ?5,"
        " error_category = ?6, finished_at = ?7 WHERE request_id = ?1 AND state = 'pending'",
        "finish_future");
    TRY_STATUS(stmt);
    stmt->bind_text(1, row.request_id).bind_text(2, row.state).bind_text(3, row.result_json);
    stmt->bind_blob(4, row.result_proto).bind_text(5, row.error).bind_text(6, row.error_category);
    stmt->bind_double(7, row.finished_at);
    return expect_changed(stmt->run(), "future", row.request_id);
}

Result<std::optional<FutureRow>> Database::get_future(const std::string & request_id) {
    Lock lock(impl_->mutex);
    auto stmt = impl_->prepare("SELECT " TINKERD_FUTURE_COLUMNS " FROM futures WHERE request_id = ?1", "get_future");
    TRY_STATUS(stmt);
    stmt->bind_text(1, request_id);
    return first_row<FutureRow>(stmt.value(), read_future);
}

Result<std::optional<FutureRow>> Database::future_by_seq(const std::string & run_id, int64_t seq_id) {
    Lock lock(impl_->mutex);
    auto stmt = impl_->prepare("SELECT " TINKERD_FUTURE_COLUMNS
                               " FROM futures WHERE run_id = ?1 AND seq_id = ?2"
                               " ORDER BY created_at DESC, rowid DESC LIMIT 1",
                               "future_by_seq");
    TRY_STATUS(stmt);
    stmt->bind_text(1, run_id).bind_int(2, seq_id);
    return first_row<FutureRow>(stmt.value(), read_future);
}

Result<std::vector<FutureRow>> Database::pending_futures(const std::string & request_type) {
    Lock lock(impl_->mutex);
    auto stmt = impl_->prepare("SELECT " TINKERD_FUTURE_COLUMNS
                               " FROM futures WHERE state = 'pending' AND request_type = ?1 ORDER BY created_at",
                               "pending_futures");
    TRY_STATUS(stmt);
    stmt->bind_text(1, request_type);
    return collect<FutureRow>(stmt.value(), read_future);
}

Result<int64_t> Database::fail_pending_futures(const std::string & error, double now) {
    Lock lock(impl_->mutex);
    auto stmt = impl_->prepare(
        "UPDATE futures SET state = 'failed', error = ?1, error_category = 'server',"
        " finished_at = ?2 WHERE state = 'pending'",
        "fail_pending_futures");
    TRY_STATUS(stmt);
    return stmt->bind_text(1, error).bind_double(2, now).run();
}

Result<int64_t> Database::fail_orphaned_futures(const std::string & error, double now) {
    Lock lock(impl_->mutex);
    const std::string sql =
        "UPDATE futures SET state = 'failed', error = ?1, error_category = 'server', finished_at = ?2"
        " WHERE state = 'pending' AND owner NOT IN (" +
        std::string(impl_->conn->live_owners_sql()) + ")";
    auto stmt = impl_->prepare(sql.c_str(), "fail_orphaned_futures");
    TRY_STATUS(stmt);
    return stmt->bind_text(1, error).bind_double(2, now).run();
}

Result<int64_t> Database::prune_futures(double before) {
    Lock lock(impl_->mutex);
    auto stmt = impl_->prepare("DELETE FROM futures WHERE state != 'pending' AND finished_at < ?1", "prune_futures");
    TRY_STATUS(stmt);
    return stmt->bind_double(1, before).run();
}

// ---- Counters ----

Result<int64_t> Database::next_counter(const std::string & name) {
    Lock lock(impl_->mutex);
    auto stmt = impl_->prepare(
        "INSERT INTO counters (name, value) VALUES (?1, 1)"
        " ON CONFLICT (name) DO UPDATE SET value = counters.value + 1 RETURNING value",
        "next_counter");
    TRY_STATUS(stmt);
    stmt->bind_text(1, name);
    Result<bool> row = stmt->step();
    TRY_STATUS(row);
    if (!row.value()) {
        return internal_error("store: next_counter: no value returned for " + name);
    }
    int64_t value = stmt->integer(0);
    Result<bool> done = stmt->step();  // completes the statement so the write commits now
    TRY_STATUS(done);
    return value;
}

}  // namespace tinkerd::store
