// The store's portable SQL layer: a connection (SQLite file or PostgreSQL server) and its prepared statements
// with bound parameters and typed column reads. Queries are written once in SQLite's dialect with numbered
// "?N" parameters; the PostgreSQL backend translates them (sql_dialect.h). Used only inside src/store; callers
// serialize access (Database holds its one connection behind a mutex).
#pragma once

#include <cstdint>
#include <memory>
#include <optional>
#include <string>

#include "common/status.h"

namespace tinkerd::store {

// What a backend's statement implements; Statement forwards to it.
class StatementBackend {
  public:
    virtual ~StatementBackend() = default;
    virtual void bind_text(int index, const std::string & value) = 0;
    virtual void bind_blob(int index, const std::string & bytes) = 0;
    virtual void bind_int(int index, int64_t value) = 0;
    virtual void bind_double(int index, double value) = 0;
    virtual void bind_null(int index) = 0;
    virtual Result<bool> step() = 0;
    virtual Result<int64_t> run() = 0;  // for statements without rows: the number of rows changed
    virtual void reset() = 0;
    virtual std::string text(int column) const = 0;
    virtual std::string blob(int column) const = 0;
    virtual int64_t integer(int column) const = 0;
    virtual double real(int column) const = 0;
    virtual bool is_null(int column) const = 0;
};

// One prepared statement. Bind calls remember the first failure; step() reports it.
class Statement {
  public:
    explicit Statement(std::unique_ptr<StatementBackend> backend) : backend_(std::move(backend)) {}

    // Parameters are numbered from 1, as in "?1".
    Statement & bind_text(int index, const std::string & value) { return (backend_->bind_text(index, value), *this); }
    Statement & bind_blob(int index, const std::string & bytes) { return (backend_->bind_blob(index, bytes), *this); }
    Statement & bind_int(int index, int64_t value) { return (backend_->bind_int(index, value), *this); }
    Statement & bind_double(int index, double value) { return (backend_->bind_double(index, value), *this); }
    Statement & bind_bool(int index, bool value) { return bind_int(index, value ? 1 : 0); }
    Statement & bind_optional_int(int index, const std::optional<int64_t> & value);
    Statement & bind_optional_double(int index, const std::optional<double> & value);

    // Advances: true when a row is ready, false when done.
    Result<bool> step() { return backend_->step(); }
    // Steps a statement that returns no rows; returns the number of rows it changed.
    Result<int64_t> run() { return backend_->run(); }
    // Makes the statement runnable again with new bindings (one prepare for many rows).
    void reset() { backend_->reset(); }

    // Columns are numbered from 0.
    std::string text(int column) const { return backend_->text(column); }
    std::string blob(int column) const { return backend_->blob(column); }
    int64_t integer(int column) const { return backend_->integer(column); }
    double real(int column) const { return backend_->real(column); }
    bool boolean(int column) const { return integer(column) != 0; }
    bool is_null(int column) const { return backend_->is_null(column); }
    std::optional<int64_t> optional_int(int column) const;
    std::optional<double> optional_double(int column) const;

  private:
    std::unique_ptr<StatementBackend> backend_;
};

// A connection to one database. Errors are internal_error("<backend>: <what>: <message>") with backend
// "sqlite" or "postgresql".
class SqlConnection {
  public:
    virtual ~SqlConnection() = default;
    virtual Result<Statement> prepare(const char * sql, const std::string & what) = 0;
    // Constant SQL without parameters or user data (PRAGMAs, transactions, migration scripts). Migration
    // scripts are written in SQLite's types; the PostgreSQL backend translates them (sql_dialect.h).
    virtual Result<void> exec(const char * sql, const std::string & what) = 0;
    // Starts a write transaction (SQLite: BEGIN IMMEDIATE, so the write lock is taken at once).
    virtual Result<void> begin(const std::string & what) = 0;
    // Inside a transaction: waits until no other connection migrates the schema (PostgreSQL: a
    // transaction-level advisory lock per database; SQLite: BEGIN IMMEDIATE already serializes).
    virtual Result<void> lock_migrations() = 0;
    // Whether other processes may share this database (PostgreSQL), and whether none did when it was opened.
    virtual bool shared() const = 0;
    virtual bool sole_user_at_open() const = 0;
    // This front end's id, recorded with the futures it runs (0 on SQLite), and a SELECT of the ids of the
    // front ends alive now (PostgreSQL: those holding the advisory lock on their id, or whose front_ends
    // heartbeat is younger than the grace period: a live one whose connection dropped stays alive).
    virtual int64_t owner_id() const = 0;
    virtual std::string live_owners_sql() const = 0;
    // Shared databases (migration 6's front_ends table; no-ops on SQLite). After the migrations: whether
    // another front end's heartbeat is recent (then this one is not the sole user), and this one's first
    // heartbeat. heartbeat: its row's time, from the server's clock, and lost locks taken again. leave:
    // its row deleted at a clean stop, so that others need not wait out the grace period.
    virtual Result<void> join_front_ends() = 0;
    virtual Result<void> heartbeat() = 0;
    virtual void leave() = 0;
};

// Runs `body` between begin() and COMMIT, rolling back when it fails.
template <typename Body>
Result<void> in_transaction(SqlConnection & conn, const std::string & what, Body body) {
    TRY_STATUS(conn.begin("begin " + what));
    Result<void> done = body();
    if (!done.ok()) {
        (void)conn.exec("ROLLBACK", "rollback " + what);
        return done;
    }
    return conn.exec("COMMIT", "commit " + what);
}

// Opens a SQLite file (":memory:" = private, for tests) with WAL and foreign keys on.
Result<std::unique_ptr<SqlConnection>> open_sqlite(const std::string & path);
// Opens a PostgreSQL connection from a libpq URI ("postgresql://user@host:port/db"). A front end counts as
// alive while it holds its owner lock or its heartbeat (every `heartbeat_seconds`) is younger than
// FRONT_END_GRACE_HEARTBEATS of them.
inline constexpr double FRONT_END_GRACE_HEARTBEATS = 3;
Result<std::unique_ptr<SqlConnection>> open_postgres(const std::string & uri, double heartbeat_seconds);

}  // namespace tinkerd::store
