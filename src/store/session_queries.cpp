// Database: SDK 0.38's session queries: the newest-first walk behind sessions/search, how a client finished a
// session, and checkpoint storage per session and per project (billing/usage/checkpoints/current).
// Named checkpoints belong to a session through their training run.
#include "store/database.h"
#include "store/database_impl.h"

namespace tinkerd::store {
namespace {

using Lock = std::lock_guard<std::mutex>;

}  // namespace

Result<std::vector<SessionRow>> Database::sessions_after(const std::string & tenant,
                                                         const std::optional<SessionCursor> & after, int64_t limit) {
    Lock lock(impl_->mutex);
    auto stmt = impl_->prepare("SELECT " TINKERD_SESSION_COLUMNS
                               " FROM sessions WHERE tenant = ?1 AND"
                               " (?2 = 0 OR created_at < ?3 OR (created_at = ?3 AND session_id < ?4))"
                               " ORDER BY created_at DESC, session_id DESC LIMIT ?5",
                               "sessions_after");
    TRY_STATUS(stmt);
    stmt->bind_text(1, tenant).bind_bool(2, after.has_value()).bind_double(3, after ? after->created_at : 0.0);
    stmt->bind_text(4, after ? after->session_id : std::string()).bind_int(5, limit);
    return collect<SessionRow>(stmt.value(), read_session_row);
}

Result<void> Database::set_session_finish_reason(const std::string & session_id, const std::string & reason) {
    Lock lock(impl_->mutex);
    auto stmt = impl_->prepare("UPDATE sessions SET finish_reason = ?2 WHERE session_id = ?1", "set_finish_reason");
    TRY_STATUS(stmt);
    return expect_changed(stmt->bind_text(1, session_id).bind_text(2, reason).run(), "session", session_id);
}

Result<CheckpointUsage> Database::session_checkpoint_usage(const std::string & session_id) {
    Lock lock(impl_->mutex);
    auto stmt = impl_->prepare(
        "SELECT COUNT(*), COALESCE(SUM(c.size_bytes), 0) FROM checkpoints c"
        " JOIN training_runs r ON r.run_id = c.run_id WHERE r.session_id = ?1",
        "session_checkpoint_usage");
    TRY_STATUS(stmt);
    stmt->bind_text(1, session_id);
    Result<bool> row = stmt->step();
    TRY_STATUS(row);
    CheckpointUsage usage;
    if (row.value()) {
        usage.count = stmt->integer(0);
        usage.size_bytes = stmt->integer(1);
    }
    return usage;
}

Result<std::vector<CheckpointUsage>> Database::checkpoint_usage_by_project(const std::string & tenant,
                                                                           const std::optional<std::string> & project) {
    Lock lock(impl_->mutex);
    auto stmt = impl_->prepare(
        "SELECT s.project_id, COUNT(*), COALESCE(SUM(c.size_bytes), 0) FROM checkpoints c"
        " JOIN training_runs r ON r.run_id = c.run_id JOIN sessions s ON s.session_id = r.session_id"
        " WHERE c.tenant = ?1 AND (?2 = 0 OR s.project_id = ?3) GROUP BY s.project_id ORDER BY s.project_id",
        "checkpoint_usage_by_project");
    TRY_STATUS(stmt);
    stmt->bind_text(1, tenant).bind_bool(2, project.has_value()).bind_text(3, project.value_or(""));
    return collect<CheckpointUsage>(stmt.value(), [](const Statement & row) {
        return CheckpointUsage{row.text(0), row.integer(1), row.integer(2)};
    });
}

}  // namespace tinkerd::store
