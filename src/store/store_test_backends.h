// Test support: the two store backends the store tests run against. SQLite gets a file in a fresh temp dir;
// PostgreSQL a fresh database on the test server: the one ctest's store_pg fixture started
// (TINKERD_TEST_PG_DIR/url, scripts/pg-test-server.sh), else a private one this process starts.
#pragma once

#include <filesystem>
#include <optional>
#include <ostream>
#include <string>

#include <gtest/gtest.h>

namespace tinkerd::store::testing_backends {

enum class Backend { SQLITE, POSTGRES };

// "SQLite" / "PostgreSQL", for test names.
std::string backend_name(Backend backend);
inline void PrintTo(Backend backend, std::ostream * out) {
    *out << backend_name(backend);
}

// The location Database::open takes for a new, empty database of the backend; nullopt when no PostgreSQL
// server could be reached or started, with the reason in `why_not`. `sqlite_dir` holds SQLite's file.
std::optional<std::string> fresh_database(Backend backend, const std::string & sqlite_dir, std::string & why_not);

// Whether the tests must fail rather than skip when PostgreSQL is missing (ctest's fixture was asked for).
bool postgres_required();

// Runs constant SQL on a PostgreSQL database, outside Database (tests that inspect or edit raw rows);
// returns the first column of the first row, or an error text starting with "error: ".
std::string postgres_query(const std::string & location, const std::string & sql);

// A test fixture over both backends: SetUp makes `dir_` (a fresh temp dir) and `location_` (a fresh database
// of the backend), failing when ctest's PostgreSQL fixture is missing and skipping loudly when run alone
// without a server. Subclasses open the database in their own SetUp after calling this one.
class BackendTest : public ::testing::TestWithParam<Backend> {
  protected:
    void SetUp() override;
    void TearDown() override;
    bool postgres() const { return GetParam() == Backend::POSTGRES; }

    std::filesystem::path dir_;
    std::string location_;
};

}  // namespace tinkerd::store::testing_backends
