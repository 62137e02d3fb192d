// Implementation of the sqlite3 RAII helpers: statement preparation, parameter binding, stepping and
// column reads, with every SQLite failure turned into internal_error("sqlite: <what>: <message>").
#include "store/sqlite_statement.h"

#include <utility>

#include "store/disk_reserve.h"

namespace tinkerd::store {

Error sqlite_error(sqlite3 * db, const std::string & what) {
    const char * message = db != nullptr ? sqlite3_errmsg(db) : "out of memory";
    return internal_error("sqlite: " + what + ": " + message);
}

Result<void> exec_sql(sqlite3 * db, const char * sql, const std::string & what) {
    char * message = nullptr;
    int rc = sqlite3_exec(db, sql, nullptr, nullptr, &message);
    if (rc == SQLITE_FULL && handle_disk_full()) {  // space freed (the disk reserve): one more try
        sqlite3_free(message);
        message = nullptr;
        rc = sqlite3_exec(db, sql, nullptr, nullptr, &message);
    }
    if (rc != SQLITE_OK) {
        std::string text = message != nullptr ? message : sqlite3_errmsg(db);
        sqlite3_free(message);
        return internal_error("sqlite: " + what + ": " + text);
    }
    return {};
}

Result<Statement> Statement::prepare(sqlite3 * db, const char * sql, std::string what) {
    sqlite3_stmt * stmt = nullptr;
    if (sqlite3_prepare_v2(db, sql, -1, &stmt, nullptr) != SQLITE_OK) {
        sqlite3_finalize(stmt);
        return sqlite_error(db, "prepare " + what);
    }
    return Statement(db, stmt, std::move(what));
}

Statement::Statement(Statement && other) noexcept
    : db_(other.db_),
      stmt_(std::exchange(other.stmt_, nullptr)),
      what_(std::move(other.what_)),
      bind_error_(other.bind_error_) {}

Statement::~Statement() {
    sqlite3_finalize(stmt_);
}

void Statement::check_bind(int rc) {
    if (rc != SQLITE_OK && bind_error_ == SQLITE_OK) {
        bind_error_ = rc;
    }
}

Statement & Statement::bind_text(int index, const std::string & value) {
    check_bind(sqlite3_bind_text64(stmt_, index, value.data(), value.size(), SQLITE_TRANSIENT, SQLITE_UTF8));
    return *this;
}

Statement & Statement::bind_blob(int index, const std::string & bytes) {
    // A zero-length blob must still be a BLOB, not NULL: sqlite3 treats a null pointer as NULL.
    static const char empty = 0;
    const void * data = bytes.empty() ? &empty : bytes.data();
    check_bind(sqlite3_bind_blob64(stmt_, index, data, bytes.size(), SQLITE_TRANSIENT));
    return *this;
}

Statement & Statement::bind_int(int index, int64_t value) {
    check_bind(sqlite3_bind_int64(stmt_, index, value));
    return *this;
}

Statement & Statement::bind_double(int index, double value) {
    check_bind(sqlite3_bind_double(stmt_, index, value));
    return *this;
}

Statement & Statement::bind_optional_int(int index, const std::optional<int64_t> & value) {
    check_bind(value ? sqlite3_bind_int64(stmt_, index, *value) : sqlite3_bind_null(stmt_, index));
    return *this;
}

Statement & Statement::bind_optional_double(int index, const std::optional<double> & value) {
    check_bind(value ? sqlite3_bind_double(stmt_, index, *value) : sqlite3_bind_null(stmt_, index));
    return *this;
}

Result<bool> Statement::step() {
    if (bind_error_ != SQLITE_OK) {
        return internal_error("sqlite: bind " + what_ + ": " + sqlite3_errstr(bind_error_));
    }
    int rc = sqlite3_step(stmt_);
    if (rc == SQLITE_FULL && handle_disk_full()) {  // space freed (the disk reserve): one more try
        sqlite3_reset(stmt_);
        rc = sqlite3_step(stmt_);
    }
    if (rc == SQLITE_ROW) {
        return true;
    }
    if (rc == SQLITE_DONE) {
        return false;
    }
    return sqlite_error(db_, what_);
}

Result<int64_t> Statement::run() {
    Result<bool> stepped = step();
    TRY_STATUS(stepped);
    if (stepped.value()) {
        return internal_error("sqlite: " + what_ + ": statement unexpectedly returned rows");
    }
    return static_cast<int64_t>(sqlite3_changes64(db_));
}

void Statement::reset() {
    sqlite3_reset(stmt_);
    sqlite3_clear_bindings(stmt_);
    bind_error_ = SQLITE_OK;
}

std::string Statement::text(int column) const {
    const auto * data = reinterpret_cast<const char *>(sqlite3_column_text(stmt_, column));
    const int size = sqlite3_column_bytes(stmt_, column);
    return data != nullptr ? std::string(data, static_cast<size_t>(size)) : std::string();
}

std::string Statement::blob(int column) const {
    const auto * data = static_cast<const char *>(sqlite3_column_blob(stmt_, column));
    const int size = sqlite3_column_bytes(stmt_, column);
    return data != nullptr ? std::string(data, static_cast<size_t>(size)) : std::string();
}

int64_t Statement::integer(int column) const {
    return sqlite3_column_int64(stmt_, column);
}

double Statement::real(int column) const {
    return sqlite3_column_double(stmt_, column);
}

bool Statement::is_null(int column) const {
    return sqlite3_column_type(stmt_, column) == SQLITE_NULL;
}

std::optional<int64_t> Statement::optional_int(int column) const {
    if (is_null(column)) {
        return std::nullopt;
    }
    return integer(column);
}

std::optional<double> Statement::optional_double(int column) const {
    if (is_null(column)) {
        return std::nullopt;
    }
    return real(column);
}

}  // namespace tinkerd::store
