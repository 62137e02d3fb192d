// The PostgreSQL backend of the portable SQL layer (sql_statement.h), over libpq: statements run with
// PQexecParams (typed parameters, "?N" translated to "$N"; results in text form), migration scripts
// translated from SQLite's types (sql_dialect.h), a lost connection reset and the statement retried once,
// and the front end's liveness: a shared advisory lock per database (whether others run), an exclusive one
// on its owner id, both taken again without blocking after a reconnection, and its front_ends heartbeat row.
#include <chrono>
#include <cmath>
#include <cstdio>
#include <cstdlib>
#include <libpq-fe.h>
#include <random>
#include <thread>
#include <utility>
#include <vector>

#include "common/log.h"
#include "store/sql_dialect.h"
#include "store/sql_statement.h"

namespace tinkerd::store {
namespace {

// Type OIDs of the parameters we send (pg_type.h).
constexpr Oid INT8_OID = 20;
constexpr Oid TEXT_OID = 25;
constexpr Oid FLOAT8_OID = 701;
constexpr Oid BYTEA_OID = 17;

// Held (shared) by every open front end for as long as its connection lives; keyed by the database.
constexpr const char * FRONT_END_KEY = "hashtext(current_database()), 2";
// Each front end also holds (OWNER_CLASS, its owner id) exclusively; pg_locks lists the live ones.
constexpr int64_t OWNER_CLASS = 1953195110;  // "tkdf"
constexpr const char * LOCK_HOLDERS_SQL =
    "SELECT objid::bigint FROM pg_locks WHERE locktype = 'advisory' AND classid = 1953195110"
    " AND objsubid = 2 AND granted AND database = (SELECT oid FROM pg_database WHERE datname = current_database())";
// The server's clock, so that front ends on machines whose clocks differ compare heartbeats alike.
constexpr const char * SERVER_NOW = "EXTRACT(EPOCH FROM clock_timestamp())::double precision";
// After a reconnection the locks are tried for this long (a terminated session's locks go when its process
// exits, shortly after); a stale session that still holds them cannot block the store.
constexpr double LOCK_RETRY_SECONDS = 3.0;
// Rows of front ends silent for this long are deleted (an absent row counts as a stale one).
constexpr double FORGET_FRONT_END_SECONDS = 3600.0;

Error pg_error(const std::string & what, const std::string & message) {
    std::string text = message;
    while (!text.empty() && (text.back() == '\n' || text.back() == ' ')) {
        text.pop_back();
    }
    return internal_error("postgresql: " + what + ": " + text);
}

// The server's one-line message ("duplicate key value violates unique constraint ..."), else libpq's text.
std::string message_of(const PGresult * result, PGconn * conn) {
    const char * primary = result != nullptr ? PQresultErrorField(result, PG_DIAG_MESSAGE_PRIMARY) : nullptr;
    return primary != nullptr ? primary : PQerrorMessage(conn);
}

void ignore_notice(void *, const char *) {}  // "relation already exists, skipping" and the like

std::string owner_lock_sql(int64_t owner) {
    return "SELECT pg_try_advisory_lock(" + std::to_string(OWNER_CLASS) + ", " + std::to_string(owner) + ")";
}

// Runs a "SELECT pg_try_advisory_lock..." outside the statement layer: whether the lock is now held.
bool try_lock(PGconn * conn, const std::string & sql) {
    PGresult * result = PQexec(conn, sql.c_str());
    const bool held = PQresultStatus(result) == PGRES_TUPLES_OK && PQntuples(result) == 1 &&
                      std::string(PQgetvalue(result, 0, 0)) == "t";
    PQclear(result);
    return held;
}

// The libpq connection and this front end's locks on it. A reset connection has lost its session locks:
// ensure_connected takes them again, trying for LOCK_RETRY_SECONDS at most (never blocking), and a
// heartbeat tries again later while they are missing; the front_ends row keeps the front end alive meanwhile.
struct PgSession {
    PGconn * conn = nullptr;
    int64_t owner = 0;
    bool shared_lock_held = false;
    bool owner_lock_held = false;

    bool locks_held() const { return shared_lock_held && owner_lock_held; }
    // One try at each missing lock; true when both are held.
    bool try_locks() {
        shared_lock_held = shared_lock_held ||
                           try_lock(conn, std::string("SELECT pg_try_advisory_lock_shared(") + FRONT_END_KEY + ")");
        owner_lock_held = owner_lock_held || try_lock(conn, owner_lock_sql(owner));
        return locks_held();
    }
    bool take_locks(double seconds) {
        const auto deadline = std::chrono::steady_clock::now() + std::chrono::duration<double>(seconds);
        while (!try_locks() && std::chrono::steady_clock::now() < deadline) {
            std::this_thread::sleep_for(std::chrono::milliseconds(100));
        }
        return locks_held();
    }
    bool ensure_connected() {
        if (PQstatus(conn) == CONNECTION_OK) {
            return true;
        }
        PQreset(conn);
        if (PQstatus(conn) != CONNECTION_OK) {
            return false;
        }
        shared_lock_held = owner_lock_held = false;  // they went with the old connection
        if (!take_locks(LOCK_RETRY_SECONDS)) {
            LOG_WRN("store",
                    "reconnected to PostgreSQL, but front end %lld's advisory locks are still held by its old "
                    "session; its heartbeat keeps it alive and it tries again at each heartbeat",
                    static_cast<long long>(owner));
        }
        return true;
    }
};

struct Param {
    std::optional<std::string> value;  // nullopt = NULL
    Oid type = 0;
    int format = 0;  // 0 text, 1 binary (bytea)
};

class PgStatement final : public StatementBackend {
  public:
    PgStatement(PgSession & session, std::string sql, std::string what)
        : session_(session), conn_(session.conn), sql_(std::move(sql)), what_(std::move(what)) {}
    ~PgStatement() override { PQclear(result_); }

    void bind_text(int index, const std::string & value) override { set(index, value, TEXT_OID, 0); }
    void bind_blob(int index, const std::string & bytes) override { set(index, bytes, BYTEA_OID, 1); }
    void bind_int(int index, int64_t value) override { set(index, std::to_string(value), INT8_OID, 0); }
    void bind_double(int index, double value) override { set(index, double_text(value), FLOAT8_OID, 0); }
    void bind_null(int index) override { set(index, std::nullopt, 0, 0); }

    Result<bool> step() override;
    Result<int64_t> run() override;
    void reset() override {
        PQclear(result_);
        result_ = nullptr;
        params_.clear();
        row_ = -1;
    }

    std::string text(int column) const override {
        return std::string(PQgetvalue(result_, row_, column), PQgetlength(result_, row_, column));
    }
    std::string blob(int column) const override;
    int64_t integer(int column) const override { return std::strtoll(PQgetvalue(result_, row_, column), nullptr, 10); }
    double real(int column) const override { return std::strtod(PQgetvalue(result_, row_, column), nullptr); }
    bool is_null(int column) const override { return PQgetisnull(result_, row_, column) != 0; }

  private:
    void set(int index, std::optional<std::string> value, Oid type, int format) {
        if (index < 1) {
            return;
        }
        if (params_.size() < static_cast<size_t>(index)) {
            params_.resize(static_cast<size_t>(index));
        }
        params_[static_cast<size_t>(index) - 1] = Param{std::move(value), type, format};
    }
    static std::string double_text(double value) {
        if (std::isnan(value)) {
            return "NaN";
        }
        if (std::isinf(value)) {
            return value > 0 ? "Infinity" : "-Infinity";
        }
        char buf[32];
        std::snprintf(buf, sizeof(buf), "%.17g", value);  // round-trips exactly
        return buf;
    }
    Result<void> execute();

    PgSession & session_;
    PGconn * conn_ = nullptr;
    std::string sql_;
    std::string what_;
    std::vector<Param> params_;
    PGresult * result_ = nullptr;
    int row_ = -1;
};

Result<void> PgStatement::execute() {
    const size_t n = params_.size();
    std::vector<Oid> types(n);
    std::vector<const char *> values(n);
    std::vector<int> lengths(n);
    std::vector<int> formats(n);
    for (size_t i = 0; i < n; ++i) {
        types[i] = params_[i].type;
        values[i] = params_[i].value ? params_[i].value->data() : nullptr;
        lengths[i] = params_[i].value ? static_cast<int>(params_[i].value->size()) : 0;
        formats[i] = params_[i].format;
    }
    for (int attempt = 0; attempt < 2; ++attempt) {
        if (!session_.ensure_connected()) {
            return pg_error(what_, PQerrorMessage(conn_));
        }
        const bool in_transaction = PQtransactionStatus(conn_) != PQTRANS_IDLE;
        PQclear(result_);
        result_ = PQexecParams(conn_, sql_.c_str(), static_cast<int>(n), types.data(), values.data(), lengths.data(),
                               formats.data(), 0);
        // A connection lost (server restarted, backend terminated) before this statement: one more try on a
        // new one, unless a transaction was open (its earlier statements are gone with the connection).
        if (PQstatus(conn_) != CONNECTION_BAD || in_transaction) {
            break;
        }
    }
    const ExecStatusType status = PQresultStatus(result_);
    if (status != PGRES_COMMAND_OK && status != PGRES_TUPLES_OK) {
        return pg_error(what_, message_of(result_, conn_));
    }
    return {};
}

Result<bool> PgStatement::step() {
    if (result_ == nullptr) {
        TRY_STATUS(execute());
    }
    if (PQresultStatus(result_) != PGRES_TUPLES_OK) {
        return pg_error(what_, "statement returned no rows to step through");
    }
    if (row_ < PQntuples(result_)) {
        ++row_;
    }
    return row_ < PQntuples(result_);
}

Result<int64_t> PgStatement::run() {
    if (result_ == nullptr) {
        TRY_STATUS(execute());
    }
    if (PQntuples(result_) > 0) {
        return pg_error(what_, "statement unexpectedly returned rows");
    }
    return static_cast<int64_t>(std::strtoll(PQcmdTuples(result_), nullptr, 10));
}

std::string PgStatement::blob(int column) const {
    size_t size = 0;
    unsigned char * bytes =
        PQunescapeBytea(reinterpret_cast<const unsigned char *>(PQgetvalue(result_, row_, column)), &size);
    std::string out = bytes != nullptr ? std::string(reinterpret_cast<const char *>(bytes), size) : std::string();
    PQfreemem(bytes);
    return out;
}

class PgConnection final : public SqlConnection {
  public:
    PgConnection(PGconn * conn, int64_t owner, double grace_seconds)
        : session_{conn, owner}, grace_seconds_(grace_seconds) {}
    ~PgConnection() override { PQfinish(session_.conn); }

    Result<Statement> prepare(const char * sql, const std::string & what) override {
        return Statement(std::make_unique<PgStatement>(session_, postgres_placeholders(sql), what));
    }
    Result<void> exec(const char * sql, const std::string & what) override;
    Result<void> begin(const std::string & what) override { return exec("BEGIN", what); }
    Result<void> lock_migrations() override {
        return exec("SELECT pg_advisory_xact_lock(hashtext(current_database()), 1)", "lock migrations");
    }
    bool shared() const override { return true; }
    bool sole_user_at_open() const override { return sole_user_; }
    int64_t owner_id() const override { return session_.owner; }
    std::string live_owners_sql() const override {
        // Right after a PostgreSQL restart every session (and lock) is gone and the rows are as old as the
        // outage: a front end that beat in the ten minutes before the restart counts as alive until two
        // grace periods after it, time to reconnect and beat again, so that none fails another's futures.
        const std::string start = "EXTRACT(EPOCH FROM pg_postmaster_start_time())::double precision";
        return std::string(LOCK_HOLDERS_SQL) +
               " UNION SELECT owner FROM front_ends WHERE heartbeat_at >= " + SERVER_NOW + " - " +
               std::to_string(grace_seconds_) + " OR (" + start + " >= " + SERVER_NOW + " - " +
               std::to_string(2 * grace_seconds_) + " AND heartbeat_at >= " + start + " - 600)";
    }
    Result<void> join_front_ends() override;
    Result<void> heartbeat() override;
    void leave() override;
    Result<void> announce_front_end();

  private:
    Result<bool> query_bool(const std::string & sql, const std::string & what);

    PgSession session_;
    double grace_seconds_ = 0;
    bool sole_user_ = false;
};

Result<void> PgConnection::exec(const char * sql, const std::string & what) {
    if (!session_.ensure_connected()) {
        return pg_error(what, PQerrorMessage(session_.conn));
    }
    PGresult * result = PQexec(session_.conn, postgres_ddl(sql).c_str());
    const ExecStatusType status = PQresultStatus(result);
    Result<void> out;
    if (status != PGRES_COMMAND_OK && status != PGRES_TUPLES_OK) {
        out = pg_error(what, message_of(result, session_.conn));
    }
    PQclear(result);
    return out;
}

Result<bool> PgConnection::query_bool(const std::string & sql, const std::string & what) {
    auto stmt = prepare(sql.c_str(), what);
    TRY_STATUS(stmt);
    Result<bool> row = stmt->step();
    TRY_STATUS(row);
    return row.value() && stmt->text(0) == "t";
}

// Alone (as far as locks tell) when no other front end holds the shared lock, so that the exclusive one is
// free for a moment; the shared one is taken before the exclusive one is released, so that two front ends
// starting at once never both find themselves alone. Then the owner lock.
Result<void> PgConnection::announce_front_end() {
    const std::string key = FRONT_END_KEY;
    Result<bool> alone = query_bool("SELECT pg_try_advisory_lock(" + key + ")", "check other front ends");
    TRY_STATUS(alone);
    sole_user_ = alone.value();
    if (!session_.take_locks(LOCK_RETRY_SECONDS)) {
        return pg_error("announce front end", "another session holds this front end's advisory locks");
    }
    if (sole_user_) {
        TRY_STATUS(query_bool("SELECT pg_advisory_unlock(" + key + ")", "release front-end check"));
    }
    return {};
}

// A front end whose locks are gone (its connection dropped) but whose heartbeat is recent still runs: a
// starting one is then not alone, and leaves that one's pending futures and loaded runs as they are.
Result<void> PgConnection::join_front_ends() {
    auto others = prepare(
        ("SELECT COUNT(*) FROM front_ends WHERE owner <> ?1 AND heartbeat_at >= " + std::string(SERVER_NOW) + " - ?2")
            .c_str(),
        "count live front ends");
    TRY_STATUS(others);
    others->bind_int(1, session_.owner).bind_double(2, grace_seconds_);
    Result<bool> row = others->step();
    TRY_STATUS(row);
    const int64_t live = *row ? others->integer(0) : 0;
    if (sole_user_ && live > 0) {
        LOG_WRN("store",
                "no other front end holds its lock, but %lld sent a heartbeat in the last %.0f s: not "
                "recovering their state",
                static_cast<long long>(live), grace_seconds_);
        sole_user_ = false;
    }
    return heartbeat();
}

Result<void> PgConnection::heartbeat() {
    if (!session_.locks_held() && session_.ensure_connected()) {
        session_.try_locks();
    }
    const std::string now = SERVER_NOW;
    auto beat = prepare(("INSERT INTO front_ends (owner, heartbeat_at, started_at) VALUES (?1, " + now + ", " + now +
                         ") ON CONFLICT (owner) DO UPDATE SET heartbeat_at = excluded.heartbeat_at")
                            .c_str(),
                        "front-end heartbeat");
    TRY_STATUS(beat);
    TRY_STATUS(beat->bind_int(1, session_.owner).run());
    auto forget =
        prepare(("DELETE FROM front_ends WHERE heartbeat_at < " + now + " - ?1").c_str(), "forget silent front ends");
    TRY_STATUS(forget);
    TRY_STATUS(forget->bind_double(1, FORGET_FRONT_END_SECONDS).run());
    return {};
}

void PgConnection::leave() {
    auto gone = prepare("DELETE FROM front_ends WHERE owner = ?1", "leave front ends");
    if (gone.ok()) {
        (void)gone->bind_int(1, session_.owner).run();
    }
}

}  // namespace

Result<std::unique_ptr<SqlConnection>> open_postgres(const std::string & uri, double heartbeat_seconds) {
    // A 10 s connect timeout unless the URI sets one (it comes later, so it wins): libpq's default is none,
    // and a reconnect to an unreachable host would hold the database mutex for minutes of SYN retries.
    const char * keys[] = {"connect_timeout", "dbname", nullptr};
    const char * values[] = {"10", uri.c_str(), nullptr};
    PGconn * raw = PQconnectdbParams(keys, values, /*expand_dbname=*/1);
    std::random_device random;  // an owner id in [1, 2^31): collisions between live front ends are negligible
    const int64_t owner = 1 + static_cast<int64_t>(random() % 0x7ffffffeu);
    // PQfinish on every path
    auto conn = std::make_unique<PgConnection>(raw, owner, FRONT_END_GRACE_HEARTBEATS * heartbeat_seconds);
    if (raw == nullptr || PQstatus(raw) != CONNECTION_OK) {
        // The message names host, port and user, never the password.
        return pg_error("connect", raw != nullptr ? PQerrorMessage(raw) : "out of memory");
    }
    PQsetNoticeProcessor(raw, ignore_notice, nullptr);
    TRY_STATUS(conn->exec("SET client_min_messages = warning", "configure session"));
    TRY_STATUS(conn->announce_front_end());
    return std::unique_ptr<SqlConnection>(std::move(conn));
}

}  // namespace tinkerd::store
