// Unit tests for what only a shared PostgreSQL store does: front ends starting at once migrate once, each
// sees the others' sessions, runs, checkpoints and finished futures, counters stay distinct across them,
// a starting front end learns whether another one is running, a stopped one's pending futures fail in the
// others, and a lost connection is reopened; plus the SQLite -> PostgreSQL dialect.
#include <chrono>
#include <filesystem>
#include <set>
#include <string>
#include <thread>
#include <vector>

#include <gtest/gtest.h>

#include "store/database.h"
#include "store/sql_dialect.h"
#include "store/store_test_backends.h"

namespace tinkerd::store {
namespace {

using testing_backends::Backend;

// Whether `condition` holds within 10 s: a closed connection's server process (and its locks) goes away
// shortly after PQfinish returns, not at once.
template <typename Condition>
bool eventually(Condition condition) {
    for (int i = 0; i < 200; ++i) {
        if (condition()) {
            return true;
        }
        std::this_thread::sleep_for(std::chrono::milliseconds(50));
    }
    return false;
}

class SharedPostgresTest : public testing::Test {
  protected:
    void SetUp() override {
        std::string why_not;
        auto location = testing_backends::fresh_database(Backend::POSTGRES, "", why_not);
        if (!location) {
            ASSERT_FALSE(testing_backends::postgres_required()) << "no PostgreSQL server: " << why_not;
            GTEST_SKIP() << "SKIPPED: no PostgreSQL server could be started: " << why_not;
        }
        location_ = *location;
    }
    std::unique_ptr<Database> open_front_end() {
        auto db = Database::open(location_);
        EXPECT_TRUE(db.ok()) << db.error().message;
        return db.ok() ? std::move(db.value()) : nullptr;
    }

    std::string location_;
};

TEST_F(SharedPostgresTest, FrontEndsStartingAtOnceMigrateOnce) {
    constexpr int FRONT_ENDS = 6;
    std::vector<std::unique_ptr<Database>> opened(FRONT_ENDS);
    std::vector<std::thread> threads;
    for (int i = 0; i < FRONT_ENDS; ++i) {
        threads.emplace_back([&, i] { opened[i] = open_front_end(); });
    }
    for (auto & thread : threads) {
        thread.join();
    }
    for (const auto & db : opened) {
        ASSERT_NE(db, nullptr);
        EXPECT_EQ(db->schema_version(), 5);
        EXPECT_TRUE(db->shared());
    }
    EXPECT_EQ(testing_backends::postgres_query(location_, "SELECT COUNT(*) FROM schema_version"), "5");
}

TEST_F(SharedPostgresTest, EachFrontEndSeesTheOthersRows) {
    auto a = open_front_end();
    auto b = open_front_end();
    ASSERT_TRUE(a && b);
    SessionRow session{"s1", "t1", "[]", "{}", "", "0.38", 1.0, 1.0, false};
    ASSERT_TRUE(a->insert_session(session).ok());
    TrainingRunRow run;
    run.run_id = "s1:train:0";
    run.tenant = "t1";
    run.session_id = "s1";
    run.base_model = "tiny";
    run.created_at = 2.0;
    ASSERT_TRUE(a->insert_run(run).ok());
    CheckpointRow ckpt{"s1:train:0", "weights/a", "training", "t1", "/shared/runs/a", 3.0, 99, std::nullopt, false};
    ASSERT_TRUE(a->upsert_checkpoint(ckpt).ok());
    FutureRow future;
    future.request_id = "req-1";
    future.tenant = "t1";
    future.request_type = "SaveWeights";
    future.created_at = 4.0;
    ASSERT_TRUE(a->insert_future(future).ok());
    future.state = "done";
    future.result_proto = std::string("\x00\x01\xff", 3);
    ASSERT_TRUE(a->finish_future(future).ok());

    auto runs = b->list_runs("t1", Page{});
    ASSERT_TRUE(runs.ok()) << runs.error().message;
    ASSERT_EQ(runs->second, 1);
    EXPECT_EQ(runs->first[0].run_id, "s1:train:0");
    auto seen = b->get_checkpoint("s1:train:0", "weights/a");
    ASSERT_TRUE(seen.ok() && seen->has_value());
    EXPECT_EQ((*seen)->dir, "/shared/runs/a");
    auto done = b->get_future("req-1");
    ASSERT_TRUE(done.ok() && done->has_value());
    EXPECT_EQ((*done)->state, "done");
    EXPECT_EQ((*done)->result_proto, std::string("\x00\x01\xff", 3));
}

TEST_F(SharedPostgresTest, CountersStayDistinctAcrossFrontEnds) {
    auto a = open_front_end();
    auto b = open_front_end();
    ASSERT_TRUE(a && b);
    std::set<int64_t> values;
    for (int i = 0; i < 20; ++i) {
        values.insert(a->next_counter("request").value());
        values.insert(b->next_counter("request").value());
    }
    EXPECT_EQ(values.size(), 40u);
    EXPECT_EQ(*values.rbegin(), 40);
}

TEST_F(SharedPostgresTest, AStartingFrontEndKnowsWhetherOthersRun) {
    auto first = open_front_end();
    ASSERT_NE(first, nullptr);
    EXPECT_TRUE(first->sole_user_at_open());
    auto second = open_front_end();
    ASSERT_NE(second, nullptr);
    EXPECT_FALSE(second->sole_user_at_open());
    first.reset();
    auto third = open_front_end();  // `second` still runs
    ASSERT_NE(third, nullptr);
    EXPECT_FALSE(third->sole_user_at_open());
    second.reset();
    third.reset();
    EXPECT_TRUE(eventually([&] {
        auto alone = open_front_end();
        return alone != nullptr && alone->sole_user_at_open();
    }));
}

TEST_F(SharedPostgresTest, PendingFuturesOfAStoppedFrontEndFailElsewhere) {
    auto a = open_front_end();
    auto b = open_front_end();
    ASSERT_TRUE(a && b);
    FutureRow future;
    future.tenant = "t1";
    future.request_type = "ForwardBackward";
    future.request_id = "req-a";
    ASSERT_TRUE(a->insert_future(future).ok());
    future.request_id = "req-b";
    ASSERT_TRUE(b->insert_future(future).ok());
    EXPECT_EQ(b->fail_orphaned_futures("gone", 5.0).value(), 0);  // both front ends live
    a.reset();                                                    // A stops (or is killed)
    EXPECT_TRUE(eventually([&] {
        auto n = b->fail_orphaned_futures("gone", 5.0);
        return n.ok() && n.value() == 1;
    }));
    auto failed = b->get_future("req-a");
    ASSERT_TRUE(failed.ok() && failed->has_value());
    EXPECT_EQ((*failed)->state, "failed");
    EXPECT_EQ((*failed)->error_category, "server");
    auto own = b->get_future("req-b");
    ASSERT_TRUE(own.ok() && own->has_value());
    EXPECT_EQ((*own)->state, "pending");  // B's own stays pending
}

TEST_F(SharedPostgresTest, ALostConnectionIsReopenedForTheNextCall) {
    auto db = open_front_end();
    ASSERT_NE(db, nullptr);
    SessionRow session{"s1", "t1", "[]", "{}", "", "0.38", 1.0, 1.0, false};
    ASSERT_TRUE(db->insert_session(session).ok());
    const std::string killed =
        testing_backends::postgres_query(location_,
                                         "SELECT COUNT(pg_terminate_backend(pid)) FROM pg_stat_activity"
                                         " WHERE datname = current_database() AND pid <> pg_backend_pid()");
    ASSERT_EQ(killed, "1");  // the front end's one connection
    auto got = db->get_session("s1");
    ASSERT_TRUE(got.ok()) << got.error().message;
    EXPECT_TRUE(got->has_value());
    auto again = open_front_end();  // it holds the front-end lock again: a new one is not alone
    ASSERT_NE(again, nullptr);
    EXPECT_FALSE(again->sole_user_at_open());
    FutureRow future;
    future.request_id = "req-1";
    future.tenant = "t1";
    future.request_type = "OptimStep";
    ASSERT_TRUE(db->insert_future(future).ok());
    EXPECT_EQ(again->fail_orphaned_futures("gone", 5.0).value(), 0);  // its owner lock was taken again
}

TEST(PostgresDialectTest, PlaceholdersAreNumberedOutsideLiterals) {
    EXPECT_EQ(postgres_placeholders("SELECT a FROM t WHERE b = ?1 AND (?2 = '' OR c = ?2) LIMIT ?10"),
              "SELECT a FROM t WHERE b = $1 AND ($2 = '' OR c = $2) LIMIT $10");
    EXPECT_EQ(postgres_placeholders("INSERT INTO t VALUES (?, ?, 'what?', ?)"),
              "INSERT INTO t VALUES ($1, $2, 'what?', $3)");
    EXPECT_EQ(postgres_placeholders("SELECT 'it''s ?' , ?"), "SELECT 'it''s ?' , $1");
}

TEST(PostgresDialectTest, MigrationTypesBecomePostgresTypes) {
    const std::string ddl = postgres_ddl(
        "CREATE TABLE t (\n    id INTEGER PRIMARY KEY,\n    n INTEGER NOT NULL,\n    at REAL,\n"
        "    bytes BLOB NOT NULL DEFAULT x'',\n    interval_text TEXT\n);\nALTER TABLE t ADD COLUMN x REAL;");
    EXPECT_EQ(ddl,
              "CREATE TABLE t (rowid BIGINT GENERATED ALWAYS AS IDENTITY, \n"
              "    id BIGINT GENERATED BY DEFAULT AS IDENTITY PRIMARY KEY,\n    n BIGINT NOT NULL,\n"
              "    at DOUBLE PRECISION,\n    bytes BYTEA NOT NULL DEFAULT ''::bytea,\n    interval_text TEXT\n);\n"
              "ALTER TABLE t ADD COLUMN x DOUBLE PRECISION;");
}

}  // namespace
}  // namespace tinkerd::store
