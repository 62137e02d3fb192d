// Unit tests for Database, each run against both backends (SQLite file, PostgreSQL database): idempotent
// migrations, every table's insert/get/list/update calls (pagination, totals, tenant filters, NULL columns,
// BLOB bytes), futures recovery and counters; PostgreSQL's several-front-end cases in database_pg_test.cpp.
#include "store/database.h"

#include <algorithm>
#include <filesystem>
#include <set>
#include <sqlite3.h>
#include <stdlib.h>
#include <string>
#include <thread>
#include <vector>

#include <gtest/gtest.h>

#include "store/migrations.h"
#include "store/store_test_backends.h"

namespace tinkerd::store {
namespace {

using testing_backends::Backend;

// A fresh database per test: a file in a fresh directory, or a fresh PostgreSQL database.
class DatabaseTest : public testing_backends::BackendTest {
  protected:
    void SetUp() override {
        BackendTest::SetUp();
        if (IsSkipped() || HasFatalFailure()) {
            return;
        }
        db_ = open_db();
    }
    void TearDown() override {
        db_.reset();
        BackendTest::TearDown();
    }
    std::unique_ptr<Database> open_db() {
        auto db = Database::open(location_);
        EXPECT_TRUE(db.ok()) << db.error().message;
        return db.ok() ? std::move(db.value()) : nullptr;
    }
    std::string error_prefix() const { return postgres() ? "postgresql: " : "sqlite: "; }
    // Constant SQL on the raw database, beside Database: the first column of the first row ("" if none).
    std::string raw_query(const std::string & sql) {
        if (postgres()) {
            return testing_backends::postgres_query(location_, sql);
        }
        sqlite3 * raw = nullptr;
        std::string out;
        if (sqlite3_open(location_.c_str(), &raw) != SQLITE_OK) {
            out = "error: open";
        } else {
            sqlite3_stmt * stmt = nullptr;
            if (sqlite3_prepare_v2(raw, sql.c_str(), -1, &stmt, nullptr) != SQLITE_OK) {
                out = std::string("error: ") + sqlite3_errmsg(raw);
            } else if (sqlite3_step(stmt) == SQLITE_ROW) {
                const auto * text = reinterpret_cast<const char *>(sqlite3_column_text(stmt, 0));
                out = text != nullptr ? text : "";
            }
            sqlite3_finalize(stmt);
        }
        sqlite3_close(raw);
        return out;
    }
    void add_session(const std::string & id, const std::string & tenant, double created_at) {
        SessionRow row;
        row.session_id = id;
        row.tenant = tenant;
        row.created_at = created_at;
        row.last_heartbeat = created_at;
        ASSERT_TRUE(db_->insert_session(row).ok());
    }
    void add_run(const std::string & id, const std::string & tenant, double created_at,
                 const std::string & session = "s1") {
        TrainingRunRow row;
        row.run_id = id;
        row.tenant = tenant;
        row.session_id = session;
        row.base_model = "tiny";
        row.created_at = created_at;
        auto inserted = db_->insert_run(row);
        ASSERT_TRUE(inserted.ok()) << inserted.error().message;
    }
    CheckpointRow make_checkpoint(const std::string & run, const std::string & id, double created_at) {
        CheckpointRow row;
        row.run_id = run;
        row.checkpoint_id = id;
        row.checkpoint_type = id.rfind("sampler_weights/", 0) == 0 ? "sampler" : "training";
        row.tenant = "t1";
        row.dir = "/data/runs/" + run + "/" + id;
        row.created_at = created_at;
        row.size_bytes = 1234;
        return row;
    }

    std::unique_ptr<Database> db_;
};

INSTANTIATE_TEST_SUITE_P(Backends, DatabaseTest, testing::Values(Backend::SQLITE, Backend::POSTGRES),
                         [](const auto & info) { return testing_backends::backend_name(info.param); });

TEST_P(DatabaseTest, MigrationsRunOnceAndReopenIsIdempotent) {
    EXPECT_EQ(db_->schema_version(), latest_schema_version());
    add_session("s1", "t1", 1.0);
    db_.reset();
    db_ = open_db();  // second open: no migration re-runs (CREATE TABLE would fail if it did)
    ASSERT_NE(db_, nullptr);
    EXPECT_EQ(db_->schema_version(), latest_schema_version());
    auto session = db_->get_session("s1");
    ASSERT_TRUE(session.ok());
    EXPECT_TRUE(session->has_value());

    EXPECT_EQ(raw_query("SELECT COUNT(*) FROM schema_version"), std::to_string(latest_schema_version()));
    EXPECT_EQ(raw_query("SELECT MAX(version) FROM schema_version"), std::to_string(latest_schema_version()));
    if (!postgres()) {
        EXPECT_EQ(raw_query("PRAGMA journal_mode"), "wal");
    }
}

TEST(SqliteDatabaseTest, InMemoryDatabaseWorks) {
    auto db = Database::open(":memory:");
    ASSERT_TRUE(db.ok()) << db.error().message;
    EXPECT_EQ(db.value()->schema_version(), latest_schema_version());
    auto n = db.value()->next_counter("x");
    ASSERT_TRUE(n.ok());
    EXPECT_EQ(n.value(), 1);
}

TEST_P(DatabaseTest, OpenFailureIsInternalError) {
    const std::string missing = postgres() ? "postgresql:///tinkerd?host=" + (dir_ / "no_server").string()
                                           : (dir_ / "missing_dir" / "tinkerd.db").string();
    auto db = Database::open(missing);
    ASSERT_FALSE(db.ok());
    EXPECT_EQ(db.error().kind, ErrorKind::INTERNAL);
    EXPECT_EQ(db.error().message.rfind(error_prefix() + (postgres() ? "connect" : "open"), 0), 0u)
        << db.error().message;
}

TEST_P(DatabaseTest, SessionsRoundTripTouchExpireAndStale) {
    SessionRow row;
    row.session_id = "s1";
    row.tenant = "t1";
    row.tags_json = R"(["a","b"])";
    row.user_metadata_json = R"({"k":"v"})";
    row.project_id = "proj";
    row.sdk_version = "0.3.0";
    row.created_at = 100.5;
    row.last_heartbeat = 100.5;
    ASSERT_TRUE(db_->insert_session(row).ok());
    auto got = db_->get_session("s1");
    ASSERT_TRUE(got.ok());
    ASSERT_TRUE(got->has_value());
    const SessionRow & s = **got;
    EXPECT_EQ(s.tenant, "t1");
    EXPECT_EQ(s.tags_json, row.tags_json);
    EXPECT_EQ(s.user_metadata_json, row.user_metadata_json);
    EXPECT_EQ(s.project_id, "proj");
    EXPECT_EQ(s.sdk_version, "0.3.0");
    EXPECT_DOUBLE_EQ(s.created_at, 100.5);
    EXPECT_FALSE(s.expired);
    EXPECT_FALSE(db_->get_session("nope")->has_value());

    // Duplicate ids are a SQLite constraint error with the documented prefix.
    auto dup = db_->insert_session(row);
    ASSERT_FALSE(dup.ok());
    EXPECT_EQ(dup.error().kind, ErrorKind::INTERNAL);
    EXPECT_NE(dup.error().message.find(error_prefix() + "insert_session: "), std::string::npos) << dup.error().message;

    add_session("s2", "t1", 100.0);
    add_session("s3", "t1", 100.0);
    ASSERT_TRUE(db_->touch_session("s1", 200.0).ok());
    EXPECT_DOUBLE_EQ(db_->get_session("s1")->value().last_heartbeat, 200.0);
    ASSERT_TRUE(db_->mark_session_expired("s3").ok());
    EXPECT_TRUE(db_->get_session("s3")->value().expired);
    EXPECT_EQ(db_->touch_session("nope", 1.0).error().kind, ErrorKind::NOT_FOUND);
    EXPECT_EQ(db_->mark_session_expired("nope").error().kind, ErrorKind::NOT_FOUND);

    auto stale = db_->stale_sessions(150.0);  // s2 is old and live; s3 is expired; s1 was touched
    ASSERT_TRUE(stale.ok());
    ASSERT_EQ(stale->size(), 1u);
    EXPECT_EQ((*stale)[0].session_id, "s2");
}

TEST_P(DatabaseTest, ListSessionsPaginatesNewestFirstPerTenant) {
    for (int i = 0; i < 5; ++i) {
        add_session(std::string("a") + std::to_string(i), "t1", 10.0 + i);
    }
    add_session("b0", "t2", 50.0);
    auto first = db_->list_sessions("t1", Page{2, 0});
    ASSERT_TRUE(first.ok());
    EXPECT_EQ(first->second, 5);
    ASSERT_EQ(first->first.size(), 2u);
    EXPECT_EQ(first->first[0].session_id, "a4");
    EXPECT_EQ(first->first[1].session_id, "a3");
    auto last = db_->list_sessions("t1", Page{2, 4});
    ASSERT_TRUE(last.ok());
    ASSERT_EQ(last->first.size(), 1u);
    EXPECT_EQ(last->first[0].session_id, "a0");
    EXPECT_EQ(last->second, 5);
    auto other = db_->list_sessions("t2", Page{});
    ASSERT_TRUE(other.ok());
    EXPECT_EQ(other->second, 1);
    auto none = db_->list_sessions("t3", Page{});
    ASSERT_TRUE(none.ok());
    EXPECT_EQ(none->second, 0);
    EXPECT_TRUE(none->first.empty());
}

TEST_P(DatabaseTest, TrainingRunsRoundTripWithNullSeed) {
    add_session("s1", "t1", 1.0);
    TrainingRunRow row;
    row.run_id = "s1:train:0";
    row.tenant = "t1";
    row.session_id = "s1";
    row.base_model = "Qwen/Qwen3-8B";
    row.lora_rank = 8;
    row.train_attn = false;
    row.train_mlp = true;
    row.train_unembed = false;
    row.seed = 42;
    row.user_metadata_json = R"({"x":1})";
    row.created_at = 5.0;
    row.last_request_time = 5.0;
    ASSERT_TRUE(db_->insert_run(row).ok());
    add_run("s1:train:1", "t1", 6.0);  // seed left unset

    auto got = db_->get_run("s1:train:0");
    ASSERT_TRUE(got.ok());
    ASSERT_TRUE(got->has_value());
    const TrainingRunRow & r = **got;
    EXPECT_EQ(r.base_model, "Qwen/Qwen3-8B");
    EXPECT_EQ(r.lora_rank, 8);
    EXPECT_FALSE(r.train_attn);
    EXPECT_TRUE(r.train_mlp);
    EXPECT_FALSE(r.train_unembed);
    ASSERT_TRUE(r.seed.has_value());
    EXPECT_EQ(*r.seed, 42);
    EXPECT_EQ(r.user_metadata_json, R"({"x":1})");
    EXPECT_FALSE(r.unloaded);
    EXPECT_FALSE(db_->get_run("s1:train:1")->value().seed.has_value());
    EXPECT_FALSE(db_->get_run("nope")->has_value());

    ASSERT_TRUE(db_->touch_run("s1:train:0", 9.0).ok());
    EXPECT_DOUBLE_EQ(db_->get_run("s1:train:0")->value().last_request_time, 9.0);
    ASSERT_TRUE(db_->mark_run_unloaded("s1:train:0").ok());
    EXPECT_TRUE(db_->get_run("s1:train:0")->value().unloaded);
    EXPECT_FALSE(db_->get_run("s1:train:1")->value().unloaded);
    ASSERT_TRUE(db_->mark_all_runs_unloaded().ok());
    EXPECT_TRUE(db_->get_run("s1:train:1")->value().unloaded);
    EXPECT_EQ(db_->touch_run("nope", 1.0).error().kind, ErrorKind::NOT_FOUND);
    EXPECT_EQ(db_->mark_run_unloaded("nope").error().kind, ErrorKind::NOT_FOUND);
}

TEST_P(DatabaseTest, RunNeedsAnExistingSession) {
    TrainingRunRow row;
    row.run_id = "ghost:train:0";
    row.session_id = "ghost";
    auto inserted = db_->insert_run(row);
    ASSERT_FALSE(inserted.ok());
    std::string message = inserted.error().message;
    std::transform(message.begin(), message.end(), message.begin(), ::tolower);
    EXPECT_NE(message.find("foreign key"), std::string::npos) << message;
}

TEST_P(DatabaseTest, ListRunsFiltersByTenantOrListsAll) {
    add_session("s1", "t1", 1.0);
    add_session("s2", "t2", 1.0);
    for (int i = 0; i < 3; ++i) {
        add_run(std::string("s1:train:") + std::to_string(i), "t1", 10.0 + i, "s1");
    }
    add_run("s2:train:0", "t2", 20.0, "s2");
    auto t1 = db_->list_runs("t1", Page{2, 1});
    ASSERT_TRUE(t1.ok());
    EXPECT_EQ(t1->second, 3);
    ASSERT_EQ(t1->first.size(), 2u);
    EXPECT_EQ(t1->first[0].run_id, "s1:train:1");
    EXPECT_EQ(t1->first[1].run_id, "s1:train:0");
    auto all = db_->list_runs("", Page{10, 0});
    ASSERT_TRUE(all.ok());
    EXPECT_EQ(all->second, 4);
    ASSERT_EQ(all->first.size(), 4u);
    EXPECT_EQ(all->first[0].run_id, "s2:train:0");
    auto of_session = db_->runs_of_session("s1");
    ASSERT_TRUE(of_session.ok());
    ASSERT_EQ(of_session->size(), 3u);
    EXPECT_EQ((*of_session)[0].run_id, "s1:train:0");
    EXPECT_TRUE(db_->runs_of_session("s9")->empty());
}

TEST_P(DatabaseTest, CheckpointsUpsertListExpireAndDelete) {
    add_session("s1", "t1", 1.0);
    add_run("r1", "t1", 1.0);
    add_run("r2", "t1", 1.0);
    ASSERT_TRUE(db_->upsert_checkpoint(make_checkpoint("r1", "weights/a", 10.0)).ok());
    ASSERT_TRUE(db_->upsert_checkpoint(make_checkpoint("r1", "sampler_weights/b", 11.0)).ok());
    ASSERT_TRUE(db_->upsert_checkpoint(make_checkpoint("r1", "weights/c", 12.0)).ok());
    ASSERT_TRUE(db_->upsert_checkpoint(make_checkpoint("r2", "weights/a", 13.0)).ok());

    auto got = db_->get_checkpoint("r1", "weights/a");
    ASSERT_TRUE(got.ok());
    ASSERT_TRUE(got->has_value());
    EXPECT_EQ((*got)->checkpoint_type, "training");
    EXPECT_EQ((*got)->dir, "/data/runs/r1/weights/a");
    EXPECT_EQ((*got)->size_bytes, 1234);
    EXPECT_FALSE((*got)->expires_at.has_value());
    EXPECT_FALSE((*got)->is_public);

    // Upsert replaces the row with the same key.
    CheckpointRow replaced = make_checkpoint("r1", "weights/a", 14.0);
    replaced.size_bytes = 99;
    replaced.expires_at = 500.0;
    ASSERT_TRUE(db_->upsert_checkpoint(replaced).ok());
    got = db_->get_checkpoint("r1", "weights/a");
    EXPECT_EQ((*got)->size_bytes, 99);
    ASSERT_TRUE((*got)->expires_at.has_value());
    EXPECT_DOUBLE_EQ(*(*got)->expires_at, 500.0);

    auto of_run = db_->list_run_checkpoints("r1");
    ASSERT_TRUE(of_run.ok());
    ASSERT_EQ(of_run->size(), 3u);
    EXPECT_EQ((*of_run)[0].checkpoint_id, "sampler_weights/b");  // oldest first
    EXPECT_EQ((*of_run)[2].checkpoint_id, "weights/a");

    auto page = db_->list_tenant_checkpoints("t1", Page{2, 0});
    ASSERT_TRUE(page.ok());
    EXPECT_EQ(page->second, 4);
    ASSERT_EQ(page->first.size(), 2u);
    EXPECT_EQ(page->first[0].checkpoint_id, "weights/a");  // created_at 14
    EXPECT_EQ(page->first[0].run_id, "r1");
    EXPECT_EQ(page->first[1].run_id, "r2");
    EXPECT_EQ(db_->list_tenant_checkpoints("t2", Page{})->second, 0);

    auto last_training = db_->last_checkpoint("r1", "training");
    ASSERT_TRUE(last_training.ok());
    EXPECT_EQ((*last_training)->checkpoint_id, "weights/a");
    EXPECT_EQ(db_->last_checkpoint("r1", "sampler")->value().checkpoint_id, "sampler_weights/b");
    EXPECT_FALSE(db_->last_checkpoint("r2", "sampler")->has_value());

    ASSERT_TRUE(db_->set_checkpoint_public("r1", "weights/c", true).ok());
    EXPECT_TRUE(db_->get_checkpoint("r1", "weights/c")->value().is_public);
    ASSERT_TRUE(db_->set_checkpoint_expiry("r1", "weights/c", 100.0).ok());
    auto expired = db_->expired_checkpoints(200.0);
    ASSERT_TRUE(expired.ok());
    ASSERT_EQ(expired->size(), 1u);
    EXPECT_EQ((*expired)[0].checkpoint_id, "weights/c");
    EXPECT_EQ(db_->expired_checkpoints(1000.0)->size(), 2u);
    ASSERT_TRUE(db_->set_checkpoint_expiry("r1", "weights/c", std::nullopt).ok());
    EXPECT_FALSE(db_->get_checkpoint("r1", "weights/c")->value().expires_at.has_value());
    EXPECT_TRUE(db_->expired_checkpoints(200.0)->empty());

    ASSERT_TRUE(db_->delete_checkpoint("r1", "weights/c").ok());
    EXPECT_FALSE(db_->get_checkpoint("r1", "weights/c")->has_value());
    EXPECT_EQ(db_->delete_checkpoint("r1", "weights/c").error().kind, ErrorKind::NOT_FOUND);
    EXPECT_EQ(db_->set_checkpoint_public("r1", "nope", true).error().kind, ErrorKind::NOT_FOUND);
    EXPECT_EQ(db_->set_checkpoint_expiry("r1", "nope", 1.0).error().kind, ErrorKind::NOT_FOUND);
}

TEST_P(DatabaseTest, SamplersRoundTrip) {
    add_session("s1", "t1", 1.0);
    SamplerRow row;
    row.sampler_id = "s1:sample:0";
    row.tenant = "t1";
    row.session_id = "s1";
    row.base_model = "tiny";
    row.model_path = "tinker://r1/sampler_weights/b";
    row.run_id = "r1";
    row.created_at = 3.0;
    ASSERT_TRUE(db_->insert_sampler(row).ok());
    SamplerRow base = row;
    base.sampler_id = "s1:sample:1";
    base.model_path = "";
    base.run_id = "";
    base.created_at = 4.0;
    ASSERT_TRUE(db_->insert_sampler(base).ok());
    auto got = db_->get_sampler("s1:sample:0");
    ASSERT_TRUE(got.ok());
    ASSERT_TRUE(got->has_value());
    EXPECT_EQ((*got)->model_path, row.model_path);
    EXPECT_EQ((*got)->run_id, "r1");
    EXPECT_DOUBLE_EQ((*got)->created_at, 3.0);
    EXPECT_FALSE(db_->get_sampler("nope")->has_value());
    auto all = db_->samplers_of_session("s1");
    ASSERT_TRUE(all.ok());
    ASSERT_EQ(all->size(), 2u);
    EXPECT_EQ((*all)[1].sampler_id, "s1:sample:1");
    EXPECT_EQ((*all)[1].model_path, "");
}

// Unnamed sampler snapshots: dir, size and expiry round-trip; the budget sums only snapshots; expiry is
// scheduled only for snapshots of expired sessions, once; expired ones are listed, then deleted.
TEST_P(DatabaseTest, SnapshotSamplersBudgetExpiryAndDelete) {
    add_session("s1", "t1", 1.0);
    add_session("s2", "t1", 1.0);
    // A snapshot of s1 and one of s2 (with files), and a base-model sampler of s1 (none, not counted).
    auto sampler = [](const std::string & id, const std::string & session, const std::string & dir, int64_t size) {
        SamplerRow row;
        row.sampler_id = id;
        row.tenant = "t1";
        row.session_id = session;
        row.base_model = "tiny";
        row.run_id = dir.empty() ? "" : session + ":train:0";
        row.created_at = 2.0;
        row.dir = dir;
        row.size_bytes = size;
        return row;
    };
    const SamplerRow snap = sampler("s1:sample:0", "s1", "/data/snapshots/s1:sample:0", 1000);
    ASSERT_TRUE(db_->insert_sampler(snap).ok());
    ASSERT_TRUE(db_->insert_sampler(sampler("s2:sample:0", "s2", "/data/snapshots/s2:sample:0", 500)).ok());
    ASSERT_TRUE(db_->insert_sampler(sampler("s1:sample:1", "s1", "", 7)).ok());

    auto got = db_->get_sampler("s1:sample:0");
    ASSERT_TRUE(got.ok() && got->has_value());
    EXPECT_EQ((*got)->dir, snap.dir);
    EXPECT_EQ((*got)->size_bytes, 1000);
    EXPECT_FALSE((*got)->expires_at.has_value());
    EXPECT_EQ(db_->snapshot_bytes().value(), 1500);
    auto all = db_->snapshot_samplers();
    ASSERT_TRUE(all.ok());
    ASSERT_EQ(all->size(), 2u);
    EXPECT_EQ((*all)[0].sampler_id, "s1:sample:0");

    EXPECT_EQ(db_->schedule_snapshot_expiry(100.0).value(), 0);  // no session has ended
    ASSERT_TRUE(db_->mark_session_expired("s1").ok());
    EXPECT_EQ(db_->schedule_snapshot_expiry(100.0).value(), 1);  // s1's snapshot only, not its base sampler
    EXPECT_EQ(db_->schedule_snapshot_expiry(200.0).value(), 0);  // already scheduled: kept at 100
    EXPECT_DOUBLE_EQ(db_->get_sampler("s1:sample:0")->value().expires_at.value(), 100.0);
    EXPECT_FALSE(db_->get_sampler("s1:sample:1")->value().expires_at.has_value());
    EXPECT_TRUE(db_->expired_snapshots(99.0)->empty());
    auto expired = db_->expired_snapshots(100.0);
    ASSERT_TRUE(expired.ok());
    ASSERT_EQ(expired->size(), 1u);
    EXPECT_EQ((*expired)[0].dir, snap.dir);

    ASSERT_TRUE(db_->delete_sampler("s1:sample:0").ok());
    EXPECT_FALSE(db_->get_sampler("s1:sample:0")->has_value());
    EXPECT_EQ(db_->delete_sampler("s1:sample:0").error().kind, ErrorKind::NOT_FOUND);
    EXPECT_EQ(db_->snapshot_bytes().value(), 500);
}

// A sampler row written before migration 2 (no dir, size or expiry) reads with the defaults.
TEST_P(DatabaseTest, SamplerRowsFromVersion1ReadWithDefaults) {
    add_session("s1", "t1", 1.0);
    db_.reset();
    EXPECT_EQ(raw_query("INSERT INTO samplers (sampler_id, tenant, session_id, base_model, model_path, run_id,"
                        " created_at) VALUES ('s1:sample:0', 't1', 's1', 'tiny', '', 's1:train:0', 2.0)"),
              "");
    db_ = open_db();
    ASSERT_NE(db_, nullptr);
    auto got = db_->get_sampler("s1:sample:0");
    ASSERT_TRUE(got.ok() && got->has_value());
    EXPECT_EQ((*got)->dir, "");
    EXPECT_EQ((*got)->size_bytes, 0);
    EXPECT_FALSE((*got)->expires_at.has_value());
    EXPECT_EQ(db_->snapshot_bytes().value(), 0);
}

TEST_P(DatabaseTest, FuturesKeepBinaryResultsAndRecover) {
    FutureRow row;
    row.request_id = "req-1";
    row.tenant = "t1";
    row.request_type = "ForwardBackward";
    row.run_id = "r1";
    row.seq_id = 7;
    row.body_hash = "abc";
    row.state = "pending";
    row.created_at = 10.0;
    ASSERT_TRUE(db_->insert_future(row).ok());
    FutureRow other = row;
    other.request_id = "req-2";
    other.seq_id = 8;
    ASSERT_TRUE(db_->insert_future(other).ok());

    auto by_seq = db_->future_by_seq("r1", 7);
    ASSERT_TRUE(by_seq.ok());
    ASSERT_TRUE(by_seq->has_value());
    EXPECT_EQ((*by_seq)->request_id, "req-1");
    EXPECT_FALSE(db_->future_by_seq("r1", 9)->has_value());
    EXPECT_FALSE(db_->future_by_seq("r2", 7)->has_value());

    const std::string proto("\x00\x01\xff\x00payload\x00", 12);
    row.state = "done";
    row.result_json = R"({"loss":1.5})";
    row.result_proto = proto;
    row.finished_at = 11.0;
    ASSERT_TRUE(db_->finish_future(row).ok());
    auto got = db_->get_future("req-1");
    ASSERT_TRUE(got.ok());
    ASSERT_TRUE(got->has_value());
    EXPECT_EQ((*got)->state, "done");
    EXPECT_EQ((*got)->result_json, R"({"loss":1.5})");
    EXPECT_EQ((*got)->result_proto.size(), 12u);
    EXPECT_EQ((*got)->result_proto, proto);
    EXPECT_EQ((*got)->body_hash, "abc");
    EXPECT_EQ((*got)->seq_id, 7);
    EXPECT_DOUBLE_EQ((*got)->finished_at, 11.0);
    EXPECT_EQ(db_->get_future("req-2")->value().result_proto, "");
    FutureRow missing = row;
    missing.request_id = "nope";
    EXPECT_EQ(db_->finish_future(missing).error().kind, ErrorKind::NOT_FOUND);
    FutureRow again = row;  // an outcome is written once: a second one changes nothing
    again.state = "failed";
    again.error = "late";
    EXPECT_EQ(db_->finish_future(again).error().kind, ErrorKind::NOT_FOUND);
    EXPECT_EQ(db_->get_future("req-1")->value().state, "done");

    auto failed = db_->fail_pending_futures("server restarted", 20.0);
    ASSERT_TRUE(failed.ok());
    EXPECT_EQ(failed.value(), 1);
    auto req2 = db_->get_future("req-2");
    EXPECT_EQ((*req2)->state, "failed");
    EXPECT_EQ((*req2)->error, "server restarted");
    EXPECT_EQ((*req2)->error_category, "server");
    EXPECT_DOUBLE_EQ((*req2)->finished_at, 20.0);
    EXPECT_EQ(db_->get_future("req-1")->value().state, "done");  // finished ones are untouched
    EXPECT_EQ(db_->fail_pending_futures("again", 21.0).value(), 0);

    auto pruned = db_->prune_futures(15.0);  // only req-1 finished before 15
    ASSERT_TRUE(pruned.ok());
    EXPECT_EQ(pruned.value(), 1);
    EXPECT_FALSE(db_->get_future("req-1")->has_value());
    EXPECT_TRUE(db_->get_future("req-2")->has_value());
}

TEST_P(DatabaseTest, CountersAreMonotonicAcrossReopen) {
    EXPECT_EQ(db_->next_counter("request").value(), 1);
    EXPECT_EQ(db_->next_counter("request").value(), 2);
    EXPECT_EQ(db_->next_counter("session").value(), 1);
    db_.reset();
    db_ = open_db();
    ASSERT_NE(db_, nullptr);
    EXPECT_EQ(db_->next_counter("request").value(), 3);
    EXPECT_EQ(db_->next_counter("session").value(), 2);
}

TEST_P(DatabaseTest, ConcurrentCountersAreDistinct) {
    constexpr int THREADS = 4;
    constexpr int PER_THREAD = 25;
    std::vector<std::vector<int64_t>> seen(THREADS);
    std::vector<std::thread> threads;
    for (int t = 0; t < THREADS; ++t) {
        threads.emplace_back([&, t] {
            for (int i = 0; i < PER_THREAD; ++i) {
                auto value = db_->next_counter("shared");
                seen[t].push_back(value.ok() ? value.value() : -1);
            }
        });
    }
    for (std::thread & thread : threads) {
        thread.join();
    }
    std::set<int64_t> all;
    for (const auto & values : seen) {
        all.insert(values.begin(), values.end());
    }
    EXPECT_EQ(all.size(), static_cast<size_t>(THREADS * PER_THREAD));
    EXPECT_EQ(*all.begin(), 1);
    EXPECT_EQ(*all.rbegin(), THREADS * PER_THREAD);
}

TEST_P(DatabaseTest, UserTextIsBoundNotInterpolated) {
    const std::string tricky = "t'); DROP TABLE sessions; --";
    add_session("x'y", tricky, 1.0);
    auto got = db_->get_session("x'y");
    ASSERT_TRUE(got.ok());
    ASSERT_TRUE(got->has_value());
    EXPECT_EQ((*got)->tenant, tricky);
    EXPECT_EQ(db_->list_sessions(tricky, Page{})->second, 1);
}

}  // namespace
}  // namespace tinkerd::store
