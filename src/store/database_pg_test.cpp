// Unit tests for what only a shared PostgreSQL store does: front ends starting at once migrate once, each
// sees the others' sessions, runs, checkpoints and finished futures, counters stay distinct across them,
// a starting front end learns whether another one is running, a stopped one's pending futures fail in the
// others, a lost connection is reopened, a live front end whose connection dropped keeps its futures (its
// heartbeat is recent) while a silent one's fail, and a stale session holding its lock blocks nothing; plus
// the SQLite -> PostgreSQL dialect.
#include <chrono>
#include <filesystem>
#include <libpq-fe.h>
#include <set>
#include <string>
#include <thread>
#include <vector>

#include <gtest/gtest.h>

#include "store/database.h"
#include "store/migrations.h"
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
    // heartbeat_seconds 60: no heartbeat runs during a test unless it calls heartbeat(); grace 180 s.
    std::unique_ptr<Database> open_front_end(double heartbeat_seconds = 3.0) {
        auto db = Database::open(location_, StoreOptions{heartbeat_seconds});
        EXPECT_TRUE(db.ok()) << db.error().message;
        return db.ok() ? std::move(db.value()) : nullptr;
    }

    std::string query(const std::string & sql) { return testing_backends::postgres_query(location_, sql); }
    // A pending future of `db`, and the owner id it was recorded with.
    std::string pending_future(Database & db, const std::string & request_id) {
        FutureRow future;
        future.request_id = request_id;
        future.tenant = "t1";
        future.request_type = "ForwardBackward";
        EXPECT_TRUE(db.insert_future(future).ok());
        return query("SELECT owner FROM futures WHERE request_id = '" + request_id + "'");
    }
    std::string owner_locks(const std::string & owner) {
        return query(
            "SELECT COUNT(*) FROM pg_locks WHERE locktype = 'advisory' AND classid = 1953195110 AND objsubid = 2"
            " AND granted AND objid = " +
            owner);
    }
    // Terminates the server process holding `owner`'s lock, as a PostgreSQL restart or a dropped network
    // connection would, and waits until the lock is gone with it.
    void drop_connection_of(const std::string & owner) {
        ASSERT_EQ(query("SELECT COUNT(pg_terminate_backend(pid)) FROM pg_locks WHERE locktype = 'advisory'"
                        " AND classid = 1953195110 AND objsubid = 2 AND objid = " +
                        owner),
                  "1");
        ASSERT_TRUE(eventually([&] { return owner_locks(owner) == "0"; }));
    }
    std::string state_of(Database & db, const std::string & request_id) {
        auto row = db.get_future(request_id);
        return row.ok() && row->has_value() ? (*row)->state : "missing";
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
        EXPECT_EQ(db->schema_version(), latest_schema_version());
        EXPECT_TRUE(db->shared());
    }
    EXPECT_EQ(testing_backends::postgres_query(location_, "SELECT COUNT(*) FROM schema_version"),
              std::to_string(latest_schema_version()));
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

// Front ends A and B with 60 s heartbeats (none runs during a test unless it calls heartbeat(); grace
// 180 s); A has a pending future, req-a, and A's connection has just dropped: its lock is gone.
class DroppedConnectionTest : public SharedPostgresTest {
  protected:
    void SetUp() override {
        SharedPostgresTest::SetUp();
        if (IsSkipped() || HasFatalFailure()) {
            return;
        }
        a_ = open_front_end(60.0);
        b_ = open_front_end(60.0);
        ASSERT_TRUE(a_ && b_);
        owner_ = pending_future(*a_, "req-a");
        ASSERT_EQ(owner_locks(owner_), "1");
        drop_connection_of(owner_);
    }
    Result<void> finish_req_a() {
        FutureRow done;
        done.request_id = "req-a";
        done.state = "done";
        return a_->finish_future(done);
    }

    std::unique_ptr<Database> a_;
    std::unique_ptr<Database> b_;
    std::string owner_;
};

TEST_F(DroppedConnectionTest, ALiveFrontEndKeepsItsFutures) {
    EXPECT_EQ(b_->fail_orphaned_futures("gone", 5.0).value(), 0);  // A's heartbeat is recent
    EXPECT_EQ(state_of(*b_, "req-a"), "pending");
    auto c = open_front_end(60.0);  // a front end starting meanwhile is not alone: it recovers nothing
    ASSERT_NE(c, nullptr);
    EXPECT_FALSE(c->sole_user_at_open());
    EXPECT_EQ(state_of(*a_, "req-a"), "pending");  // A reconnects and takes its lock again
    EXPECT_EQ(owner_locks(owner_), "1");
    EXPECT_TRUE(finish_req_a().ok());
}

TEST_F(DroppedConnectionTest, ASilentFrontEndsFuturesFail) {
    // A killed an hour ago: no lock, and its last heartbeat older than the grace period.
    ASSERT_EQ(
        query("UPDATE front_ends SET heartbeat_at = heartbeat_at - 3600 WHERE owner = " + owner_ + " RETURNING owner"),
        owner_);
    EXPECT_EQ(b_->fail_orphaned_futures("gone", 5.0).value(), 1);
    EXPECT_EQ(state_of(*b_, "req-a"), "failed");
    EXPECT_EQ(finish_req_a().error().kind, ErrorKind::NOT_FOUND);  // a late result does not overwrite it
    EXPECT_EQ(state_of(*b_, "req-a"), "failed");
}

TEST_F(DroppedConnectionTest, AStaleSessionHoldingTheOwnerLockBlocksNothing) {
    PGconn * stale = PQconnectdb(location_.c_str());  // the old session, as the server still sees it
    ASSERT_EQ(PQstatus(stale), CONNECTION_OK);
    PGresult * held = PQexec(stale, ("SELECT pg_advisory_lock(1953195110, " + owner_ + ")").c_str());
    ASSERT_EQ(PQresultStatus(held), PGRES_TUPLES_OK);
    PQclear(held);
    EXPECT_EQ(state_of(*a_, "req-a"), "pending");  // A reconnects: tries its lock a few seconds, then goes on
    ASSERT_TRUE(a_->heartbeat().ok());
    EXPECT_EQ(b_->fail_orphaned_futures("gone", 5.0).value(), 0);
    PQfinish(stale);
    ASSERT_TRUE(eventually([&] { return owner_locks(owner_) == "0"; }));
    ASSERT_TRUE(a_->heartbeat().ok());  // the next heartbeat takes the lock back
    EXPECT_EQ(owner_locks(owner_), "1");
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
