// Test support for the store tests' two backends: fresh SQLite files and fresh PostgreSQL databases on the
// test server (ctest's fixture server, or one started here through scripts/pg-test-server.sh and stopped at
// exit).
#include "store/store_test_backends.h"

#include <atomic>
#include <cstdio>
#include <cstdlib>
#include <fstream>
#include <libpq-fe.h>
#include <mutex>
#include <stdlib.h>
#include <unistd.h>

namespace tinkerd::store::testing_backends {
namespace {

std::string read_first_line(const std::string & path) {
    std::ifstream in(path);
    std::string line;
    std::getline(in, line);
    return line;
}

std::string own_state_dir() {
    return "/tmp/tinkerd-store-test-pg-" + std::to_string(getpid());
}

void stop_own_server() {
    const std::string cmd = std::string(TINKERD_PG_TEST_SCRIPT) + " stop " + own_state_dir() + " >/dev/null 2>&1";
    (void)std::system(cmd.c_str());
}

// The admin URL (database "postgres") of the test server; "" with `why_not` set when none.
std::string admin_url(std::string & why_not) {
    static std::once_flag once;
    static std::string url;
    static std::string reason;
    std::call_once(once, [] {
        const char * fixture_dir = std::getenv("TINKERD_TEST_PG_DIR");
        if (fixture_dir != nullptr && *fixture_dir != '\0') {
            url = read_first_line(std::string(fixture_dir) + "/url");
            reason = url.empty() ? std::string("ctest's store_pg fixture wrote no ") + fixture_dir + "/url" : "";
            return;
        }
        const std::string cmd = std::string(TINKERD_PG_TEST_SCRIPT) + " start " + own_state_dir() + " 2>&1";
        const int rc = std::system((cmd + " >" + own_state_dir() + ".log").c_str());
        url = rc == 0 ? read_first_line(own_state_dir() + "/url") : "";
        std::atexit(stop_own_server);
        if (url.empty()) {
            reason = "scripts/pg-test-server.sh could not start a server: " + read_first_line(own_state_dir() + ".log");
        }
        std::remove((own_state_dir() + ".log").c_str());
    });
    why_not = reason;
    return url;
}

std::string with_database(const std::string & url, const std::string & db) {
    const std::string from = "/postgres?";
    const size_t at = url.find(from);
    return at == std::string::npos ? url : url.substr(0, at) + "/" + db + "?" + url.substr(at + from.size());
}

}  // namespace

std::string backend_name(Backend backend) {
    return backend == Backend::SQLITE ? "SQLite" : "PostgreSQL";
}

bool postgres_required() {
    const char * fixture_dir = std::getenv("TINKERD_TEST_PG_DIR");
    return fixture_dir != nullptr && *fixture_dir != '\0';
}

std::optional<std::string> fresh_database(Backend backend, const std::string & sqlite_dir, std::string & why_not) {
    if (backend == Backend::SQLITE) {
        return sqlite_dir + "/tinkerd.db";
    }
    const std::string admin = admin_url(why_not);
    if (admin.empty()) {
        return std::nullopt;
    }
    static std::atomic<int> counter{0};
    const std::string name = "t_" + std::to_string(getpid()) + "_" + std::to_string(counter++);
    const std::string created = postgres_query(admin, "CREATE DATABASE " + name);
    if (created.rfind("error: ", 0) == 0) {
        why_not = "CREATE DATABASE failed: " + created;
        return std::nullopt;
    }
    return with_database(admin, name);
}

std::string postgres_query(const std::string & location, const std::string & sql) {
    PGconn * conn = PQconnectdb(location.c_str());
    std::string out;
    if (PQstatus(conn) != CONNECTION_OK) {
        out = std::string("error: ") + PQerrorMessage(conn);
    } else {
        PGresult * result = PQexec(conn, sql.c_str());
        const ExecStatusType status = PQresultStatus(result);
        if (status != PGRES_COMMAND_OK && status != PGRES_TUPLES_OK) {
            out = std::string("error: ") + PQresultErrorMessage(result);
        } else if (PQntuples(result) > 0) {
            out = PQgetvalue(result, 0, 0);
        }
        PQclear(result);
    }
    PQfinish(conn);
    return out;
}

void BackendTest::SetUp() {
    std::string pattern = (std::filesystem::path(::testing::TempDir()) / "store_test_XXXXXX").string();
    ASSERT_NE(mkdtemp(pattern.data()), nullptr);
    dir_ = pattern;
    std::string why_not;
    auto location = fresh_database(GetParam(), dir_.string(), why_not);
    if (!location) {
        ASSERT_FALSE(postgres_required()) << "no PostgreSQL server: " << why_not;
        GTEST_SKIP() << "SKIPPED: no PostgreSQL server could be started: " << why_not;
    }
    location_ = *location;
}

void BackendTest::TearDown() {
    std::filesystem::remove_all(dir_);
}

}  // namespace tinkerd::store::testing_backends
