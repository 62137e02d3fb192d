// The SQLite backend of the portable SQL layer (sql_statement.h): the connection (WAL, foreign keys, busy
// timeout), prepared statements over the sqlite3 C API, and "sqlite: <what>: <message>" errors. A statement
// that fails with SQLITE_FULL releases the disk reserve (disk_reserve.h) and is retried once.
#include <sqlite3.h>
#include <utility>

#include "store/disk_reserve.h"
#include "store/sql_statement.h"

namespace tinkerd::store {
namespace {

Error sqlite_error(sqlite3 * db, const std::string & what) {
    const char * message = db != nullptr ? sqlite3_errmsg(db) : "out of memory";
    return internal_error("sqlite: " + what + ": " + message);
}

class SqliteStatement final : public StatementBackend {
  public:
    SqliteStatement(sqlite3 * db, sqlite3_stmt * stmt, std::string what)
        : db_(db), stmt_(stmt), what_(std::move(what)) {}
    ~SqliteStatement() override { sqlite3_finalize(stmt_); }

    void bind_text(int index, const std::string & value) override {
        check_bind(sqlite3_bind_text64(stmt_, index, value.data(), value.size(), SQLITE_TRANSIENT, SQLITE_UTF8));
    }
    void bind_blob(int index, const std::string & bytes) override {
        // A zero-length blob must still be a BLOB, not NULL: sqlite3 treats a null pointer as NULL.
        static const char empty = 0;
        const void * data = bytes.empty() ? &empty : bytes.data();
        check_bind(sqlite3_bind_blob64(stmt_, index, data, bytes.size(), SQLITE_TRANSIENT));
    }
    void bind_int(int index, int64_t value) override { check_bind(sqlite3_bind_int64(stmt_, index, value)); }
    void bind_double(int index, double value) override { check_bind(sqlite3_bind_double(stmt_, index, value)); }
    void bind_null(int index) override { check_bind(sqlite3_bind_null(stmt_, index)); }

    Result<bool> step() override;
    Result<int64_t> run() override;
    void reset() override {
        sqlite3_reset(stmt_);
        sqlite3_clear_bindings(stmt_);
        bind_error_ = SQLITE_OK;
    }

    std::string text(int column) const override {
        const auto * data = reinterpret_cast<const char *>(sqlite3_column_text(stmt_, column));
        return bytes_of(data, column);
    }
    std::string blob(int column) const override {
        return bytes_of(static_cast<const char *>(sqlite3_column_blob(stmt_, column)), column);
    }
    int64_t integer(int column) const override { return sqlite3_column_int64(stmt_, column); }
    double real(int column) const override { return sqlite3_column_double(stmt_, column); }
    bool is_null(int column) const override { return sqlite3_column_type(stmt_, column) == SQLITE_NULL; }

  private:
    void check_bind(int rc) {
        if (rc != SQLITE_OK && bind_error_ == SQLITE_OK) {
            bind_error_ = rc;
        }
    }
    std::string bytes_of(const char * data, int column) const {
        const int size = sqlite3_column_bytes(stmt_, column);
        return data != nullptr ? std::string(data, static_cast<size_t>(size)) : std::string();
    }

    sqlite3 * db_ = nullptr;
    sqlite3_stmt * stmt_ = nullptr;
    std::string what_;
    int bind_error_ = SQLITE_OK;
};

Result<bool> SqliteStatement::step() {
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

Result<int64_t> SqliteStatement::run() {
    Result<bool> stepped = step();
    TRY_STATUS(stepped);
    if (stepped.value()) {
        return internal_error("sqlite: " + what_ + ": statement unexpectedly returned rows");
    }
    return static_cast<int64_t>(sqlite3_changes64(db_));
}

class SqliteConnection final : public SqlConnection {
  public:
    explicit SqliteConnection(sqlite3 * db) : db_(db) {}
    ~SqliteConnection() override { sqlite3_close_v2(db_); }

    Result<Statement> prepare(const char * sql, const std::string & what) override {
        sqlite3_stmt * stmt = nullptr;
        if (sqlite3_prepare_v2(db_, sql, -1, &stmt, nullptr) != SQLITE_OK) {
            sqlite3_finalize(stmt);
            return sqlite_error(db_, "prepare " + what);
        }
        return Statement(std::make_unique<SqliteStatement>(db_, stmt, what));
    }
    Result<void> exec(const char * sql, const std::string & what) override;
    Result<void> begin(const std::string & what) override { return exec("BEGIN IMMEDIATE", what); }
    Result<void> lock_migrations() override { return {}; }
    bool shared() const override { return false; }
    bool sole_user_at_open() const override { return true; }
    int64_t owner_id() const override { return 0; }
    std::string live_owners_sql() const override { return "SELECT 0"; }
    Result<void> join_front_ends() override { return {}; }
    Result<void> heartbeat() override { return {}; }
    void leave() override {}

  private:
    sqlite3 * db_ = nullptr;
};

Result<void> SqliteConnection::exec(const char * sql, const std::string & what) {
    char * message = nullptr;
    int rc = sqlite3_exec(db_, sql, nullptr, nullptr, &message);
    if (rc == SQLITE_FULL && handle_disk_full()) {  // space freed (the disk reserve): one more try
        sqlite3_free(message);
        message = nullptr;
        rc = sqlite3_exec(db_, sql, nullptr, nullptr, &message);
    }
    if (rc != SQLITE_OK) {
        std::string text = message != nullptr ? message : sqlite3_errmsg(db_);
        sqlite3_free(message);
        return internal_error("sqlite: " + what + ": " + text);
    }
    return {};
}

}  // namespace

Result<std::unique_ptr<SqlConnection>> open_sqlite(const std::string & path) {
    sqlite3 * db = nullptr;
    const int flags = SQLITE_OPEN_READWRITE | SQLITE_OPEN_CREATE | SQLITE_OPEN_FULLMUTEX;
    const int rc = sqlite3_open_v2(path.c_str(), &db, flags, nullptr);
    auto conn = std::make_unique<SqliteConnection>(db);  // closes `db` on every path
    if (rc != SQLITE_OK) {
        return sqlite_error(db, "open " + path);
    }
    TRY_STATUS(conn->exec("PRAGMA journal_mode = WAL", "enable WAL"));
    TRY_STATUS(conn->exec("PRAGMA synchronous = NORMAL", "set synchronous"));
    TRY_STATUS(conn->exec("PRAGMA foreign_keys = ON", "enable foreign keys"));
    TRY_STATUS(conn->exec("PRAGMA busy_timeout = 5000", "set busy timeout"));
    return std::unique_ptr<SqlConnection>(std::move(conn));
}

}  // namespace tinkerd::store
