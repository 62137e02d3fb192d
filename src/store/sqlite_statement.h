// A thin RAII layer over the sqlite3 C API: prepared statements with bound parameters, typed column
// reads, and the "sqlite: <what>: <message>" error text every failure carries. Used only inside
// src/store; callers serialize access (Database holds the one connection behind a mutex).
#pragma once

#include <cstdint>
#include <optional>
#include <sqlite3.h>
#include <string>

#include "common/status.h"

namespace tinkerd::store {

// internal_error("sqlite: <what>: <sqlite3_errmsg(db)>").
Error sqlite_error(sqlite3 * db, const std::string & what);

// Runs constant SQL (no parameters, no user data), e.g. PRAGMAs, BEGIN/COMMIT and migration scripts.
Result<void> exec_sql(sqlite3 * db, const char * sql, const std::string & what);

// One prepared statement. Bind calls remember the first failure; step() reports it.
class Statement {
  public:
    static Result<Statement> prepare(sqlite3 * db, const char * sql, std::string what);
    Statement(Statement && other) noexcept;
    Statement & operator=(Statement &&) = delete;
    Statement(const Statement &) = delete;
    ~Statement();

    // Parameters are numbered from 1, as in "?1" / "?".
    Statement & bind_text(int index, const std::string & value);
    Statement & bind_blob(int index, const std::string & bytes);
    Statement & bind_int(int index, int64_t value);
    Statement & bind_double(int index, double value);
    Statement & bind_bool(int index, bool value) { return bind_int(index, value ? 1 : 0); }
    Statement & bind_optional_int(int index, const std::optional<int64_t> & value);
    Statement & bind_optional_double(int index, const std::optional<double> & value);

    // Advances: true when a row is ready, false when done.
    Result<bool> step();
    // Steps a statement that returns no rows; returns sqlite3_changes().
    Result<int64_t> run();
    // Makes the statement runnable again with new bindings (one prepare for many rows).
    void reset();

    // Columns are numbered from 0.
    std::string text(int column) const;
    std::string blob(int column) const;
    int64_t integer(int column) const;
    double real(int column) const;
    bool boolean(int column) const { return integer(column) != 0; }
    bool is_null(int column) const;
    std::optional<int64_t> optional_int(int column) const;
    std::optional<double> optional_double(int column) const;

  private:
    Statement(sqlite3 * db, sqlite3_stmt * stmt, std::string what) : db_(db), stmt_(stmt), what_(std::move(what)) {}
    void check_bind(int rc);

    sqlite3 * db_ = nullptr;
    sqlite3_stmt * stmt_ = nullptr;
    std::string what_;
    int bind_error_ = SQLITE_OK;
};

}  // namespace tinkerd::store
