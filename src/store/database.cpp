// Database: opening the store (a SQLite file or a PostgreSQL database; migrations) and the sessions and
// training_runs tables.
// Checkpoints, samplers, futures and counters live in database_records.cpp. Every query is a prepared
// statement with bound parameters, run while holding the connection's mutex.
#include "store/database.h"

#include "store/database_impl.h"
#include "store/migrations.h"

namespace tinkerd::store {
namespace {

using Lock = std::lock_guard<std::mutex>;

TrainingRunRow read_run(const Statement & stmt) {
    TrainingRunRow row;
    row.run_id = stmt.text(0);
    row.tenant = stmt.text(1);
    row.session_id = stmt.text(2);
    row.base_model = stmt.text(3);
    row.lora_rank = stmt.integer(4);
    row.train_attn = stmt.boolean(5);
    row.train_mlp = stmt.boolean(6);
    row.train_unembed = stmt.boolean(7);
    row.seed = stmt.optional_int(8);
    row.user_metadata_json = stmt.text(9);
    row.created_at = stmt.real(10);
    row.last_request_time = stmt.real(11);
    row.unloaded = stmt.boolean(12);
    row.optimizer = stmt.text(13);
    return row;
}

}  // namespace

Result<std::unique_ptr<Database>> Database::open(const std::string & location, StoreOptions options) {
    auto impl = std::make_unique<Impl>();
    auto conn = is_postgres_uri(location) ? open_postgres(location, options.heartbeat_seconds) : open_sqlite(location);
    TRY_STATUS(conn);
    impl->conn = std::move(conn).value();
    Result<int> version = run_migrations(*impl->conn);
    TRY_STATUS(version);
    impl->schema_version = version.value();
    TRY_STATUS(impl->conn->join_front_ends());
    std::unique_ptr<Database> database(new Database());
    database->impl_ = std::move(impl);
    if (database->shared()) {
        database->start_heartbeat(options.heartbeat_seconds);
    }
    return database;
}

Database::~Database() {
    if (impl_ != nullptr) {
        stop_heartbeat();
    }
}

int Database::schema_version() const {
    return impl_->schema_version;
}

bool Database::shared() const {
    return impl_->conn->shared();
}

bool Database::sole_user_at_open() const {
    return impl_->conn->sole_user_at_open();
}

// ---- Sessions ----

Result<void> Database::insert_session(const SessionRow & row) {
    Lock lock(impl_->mutex);
    auto stmt = impl_->prepare("INSERT INTO sessions (" TINKERD_SESSION_COLUMNS
                               ") VALUES (?1, ?2, ?3, ?4, ?5, ?6, ?7, ?8, ?9, ?10, ?11)",
                               "insert_session");
    TRY_STATUS(stmt);
    stmt->bind_text(1, row.session_id).bind_text(2, row.tenant).bind_text(3, row.tags_json);
    stmt->bind_text(4, row.user_metadata_json).bind_text(5, row.project_id).bind_text(6, row.sdk_version);
    stmt->bind_double(7, row.created_at).bind_double(8, row.last_heartbeat).bind_bool(9, row.expired);
    stmt->bind_text(10, row.display_name).bind_text(11, row.finish_reason);
    TRY_STATUS(stmt->run());
    return {};
}

Result<std::optional<SessionRow>> Database::get_session(const std::string & session_id) {
    Lock lock(impl_->mutex);
    auto stmt = impl_->prepare("SELECT " TINKERD_SESSION_COLUMNS " FROM sessions WHERE session_id = ?1", "get_session");
    TRY_STATUS(stmt);
    stmt->bind_text(1, session_id);
    return first_row<SessionRow>(stmt.value(), read_session_row);
}

Result<void> Database::touch_session(const std::string & session_id, double now) {
    Lock lock(impl_->mutex);
    auto stmt = impl_->prepare("UPDATE sessions SET last_heartbeat = ?2 WHERE session_id = ?1", "touch_session");
    TRY_STATUS(stmt);
    return expect_changed(stmt->bind_text(1, session_id).bind_double(2, now).run(), "session", session_id);
}

Result<void> Database::mark_session_expired(const std::string & session_id) {
    Lock lock(impl_->mutex);
    auto stmt = impl_->prepare("UPDATE sessions SET expired = 1 WHERE session_id = ?1", "mark_session_expired");
    TRY_STATUS(stmt);
    return expect_changed(stmt->bind_text(1, session_id).run(), "session", session_id);
}

Result<std::pair<std::vector<SessionRow>, int64_t>> Database::list_sessions(const std::string & tenant, Page page) {
    Lock lock(impl_->mutex);
    auto stmt = impl_->prepare("SELECT " TINKERD_SESSION_COLUMNS
                               " FROM sessions WHERE tenant = ?1"
                               " ORDER BY created_at DESC, rowid DESC LIMIT ?2 OFFSET ?3",
                               "list_sessions");
    TRY_STATUS(stmt);
    stmt->bind_text(1, tenant).bind_int(2, page.limit).bind_int(3, page.offset);
    auto rows = collect<SessionRow>(stmt.value(), read_session_row);
    TRY_STATUS(rows);
    auto count = impl_->prepare("SELECT COUNT(*) FROM sessions WHERE tenant = ?1", "count_sessions");
    TRY_STATUS(count);
    Result<int64_t> total = count_of(count->bind_text(1, tenant));
    TRY_STATUS(total);
    return std::make_pair(std::move(rows.value()), total.value());
}

Result<std::vector<SessionRow>> Database::stale_sessions(double before) {
    Lock lock(impl_->mutex);
    auto stmt = impl_->prepare("SELECT " TINKERD_SESSION_COLUMNS
                               " FROM sessions WHERE expired = 0 AND last_heartbeat < ?1 ORDER BY last_heartbeat",
                               "stale_sessions");
    TRY_STATUS(stmt);
    stmt->bind_double(1, before);
    return collect<SessionRow>(stmt.value(), read_session_row);
}

// ---- Training runs ----

Result<void> Database::insert_run(const TrainingRunRow & row) {
    Lock lock(impl_->mutex);
    auto stmt = impl_->prepare("INSERT INTO training_runs (" TINKERD_RUN_COLUMNS
                               ") VALUES (?1, ?2, ?3, ?4, ?5, ?6, ?7, ?8, ?9, ?10, ?11, ?12, ?13, ?14)",
                               "insert_run");
    TRY_STATUS(stmt);
    stmt->bind_text(1, row.run_id).bind_text(2, row.tenant).bind_text(3, row.session_id);
    stmt->bind_text(4, row.base_model).bind_int(5, row.lora_rank).bind_bool(6, row.train_attn);
    stmt->bind_bool(7, row.train_mlp).bind_bool(8, row.train_unembed).bind_optional_int(9, row.seed);
    stmt->bind_text(10, row.user_metadata_json).bind_double(11, row.created_at);
    stmt->bind_double(12, row.last_request_time).bind_bool(13, row.unloaded).bind_text(14, row.optimizer);
    TRY_STATUS(stmt->run());
    return {};
}

Result<std::optional<TrainingRunRow>> Database::get_run(const std::string & run_id) {
    Lock lock(impl_->mutex);
    auto stmt = impl_->prepare("SELECT " TINKERD_RUN_COLUMNS " FROM training_runs WHERE run_id = ?1", "get_run");
    TRY_STATUS(stmt);
    stmt->bind_text(1, run_id);
    return first_row<TrainingRunRow>(stmt.value(), read_run);
}

Result<void> Database::touch_run(const std::string & run_id, double now) {
    Lock lock(impl_->mutex);
    auto stmt = impl_->prepare("UPDATE training_runs SET last_request_time = ?2 WHERE run_id = ?1", "touch_run");
    TRY_STATUS(stmt);
    return expect_changed(stmt->bind_text(1, run_id).bind_double(2, now).run(), "training run", run_id);
}

Result<void> Database::mark_run_unloaded(const std::string & run_id) {
    Lock lock(impl_->mutex);
    auto stmt = impl_->prepare("UPDATE training_runs SET unloaded = 1 WHERE run_id = ?1", "mark_run_unloaded");
    TRY_STATUS(stmt);
    return expect_changed(stmt->bind_text(1, run_id).run(), "training run", run_id);
}

Result<void> Database::mark_all_runs_unloaded() {
    Lock lock(impl_->mutex);
    auto stmt = impl_->prepare("UPDATE training_runs SET unloaded = 1 WHERE unloaded = 0", "mark_all_runs_unloaded");
    TRY_STATUS(stmt);
    TRY_STATUS(stmt->run());
    return {};
}

Result<std::pair<std::vector<TrainingRunRow>, int64_t>> Database::list_runs(const std::string & tenant, Page page) {
    Lock lock(impl_->mutex);
    auto stmt = impl_->prepare("SELECT " TINKERD_RUN_COLUMNS
                               " FROM training_runs WHERE (?1 = '' OR tenant = ?1)"
                               " ORDER BY created_at DESC, rowid DESC LIMIT ?2 OFFSET ?3",
                               "list_runs");
    TRY_STATUS(stmt);
    stmt->bind_text(1, tenant).bind_int(2, page.limit).bind_int(3, page.offset);
    auto rows = collect<TrainingRunRow>(stmt.value(), read_run);
    TRY_STATUS(rows);
    auto count = impl_->prepare("SELECT COUNT(*) FROM training_runs WHERE (?1 = '' OR tenant = ?1)", "count_runs");
    TRY_STATUS(count);
    Result<int64_t> total = count_of(count->bind_text(1, tenant));
    TRY_STATUS(total);
    return std::make_pair(std::move(rows.value()), total.value());
}

Result<std::vector<TrainingRunRow>> Database::runs_of_session(const std::string & session_id) {
    Lock lock(impl_->mutex);
    auto stmt = impl_->prepare("SELECT " TINKERD_RUN_COLUMNS
                               " FROM training_runs WHERE session_id = ?1 ORDER BY created_at, rowid",
                               "runs_of_session");
    TRY_STATUS(stmt);
    stmt->bind_text(1, session_id);
    return collect<TrainingRunRow>(stmt.value(), read_run);
}

}  // namespace tinkerd::store
