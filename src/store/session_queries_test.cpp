// Unit tests for SDK 0.38's session queries (session_queries.cpp) on both backends: display names and
// finish reasons round-trip, the newest-first walk resumes after a cursor, checkpoint metadata is kept and
// replaced on overwrite, and storage is summed per session and per project.
#include <gtest/gtest.h>

#include "store/database.h"
#include "store/store_test_backends.h"

namespace tinkerd::store {
namespace {

using testing_backends::Backend;

class SessionQueriesTest : public testing_backends::BackendTest {
  protected:
    void SetUp() override {
        BackendTest::SetUp();
        if (IsSkipped() || HasFatalFailure()) {
            return;
        }
        auto db = Database::open(location_);
        ASSERT_TRUE(db.ok()) << db.error().message;
        db_ = std::move(db.value());
    }
    void TearDown() override {
        db_.reset();
        BackendTest::TearDown();
    }
    void add_session(const std::string & id, double created_at, const std::string & project = "") {
        SessionRow row;
        row.session_id = id;
        row.tenant = "t1";
        row.project_id = project;
        row.display_name = "Run " + id;
        row.created_at = created_at;
        row.last_heartbeat = created_at;
        ASSERT_TRUE(db_->insert_session(row).ok());
    }
    void add_checkpoint(const std::string & session, const std::string & name, int64_t bytes) {
        TrainingRunRow run;
        run.run_id = session + ":train:0";
        run.tenant = "t1";
        run.session_id = session;
        run.base_model = "tiny";
        (void)db_->insert_run(run);  // once per session
        CheckpointRow row;
        row.run_id = run.run_id;
        row.checkpoint_id = "weights/" + name;
        row.checkpoint_type = "training";
        row.tenant = "t1";
        row.dir = "/d/" + name;
        row.size_bytes = bytes;
        row.user_metadata_json = R"({"renderer":"qwen3"})";
        ASSERT_TRUE(db_->upsert_checkpoint(row).ok());
    }
    std::unique_ptr<Database> db_;
};

INSTANTIATE_TEST_SUITE_P(Backends, SessionQueriesTest, testing::Values(Backend::SQLITE, Backend::POSTGRES),
                         [](const auto & info) { return testing_backends::backend_name(info.param); });

TEST_P(SessionQueriesTest, DisplayNameAndFinishReasonRoundTrip) {
    add_session("a", 10);
    ASSERT_TRUE(db_->set_session_finish_reason("a", "interrupted").ok());
    auto got = db_->get_session("a");
    ASSERT_TRUE(got.ok() && got->has_value());
    EXPECT_EQ((*got)->display_name, "Run a");
    EXPECT_EQ((*got)->finish_reason, "interrupted");
    EXPECT_EQ(db_->set_session_finish_reason("nope", "success").error().kind, ErrorKind::NOT_FOUND);
}

TEST_P(SessionQueriesTest, WalkResumesAfterTheCursorNewestFirst) {
    add_session("a", 10);
    add_session("b", 20);
    add_session("c", 20);  // same time as b: ties ordered by id, descending
    add_session("d", 30);
    auto first = db_->sessions_after("t1", std::nullopt, 2);
    ASSERT_TRUE(first.ok());
    ASSERT_EQ(first->size(), 2u);
    EXPECT_EQ((*first)[0].session_id, "d");
    EXPECT_EQ((*first)[1].session_id, "c");
    auto rest = db_->sessions_after("t1", SessionCursor{20, "c"}, 10);
    ASSERT_TRUE(rest.ok());
    ASSERT_EQ(rest->size(), 2u);
    EXPECT_EQ((*rest)[0].session_id, "b");
    EXPECT_EQ((*rest)[1].session_id, "a");
    EXPECT_TRUE(db_->sessions_after("t2", std::nullopt, 10)->empty());
}

TEST_P(SessionQueriesTest, CheckpointMetadataIsKeptAndReplacedOnOverwrite) {
    add_session("a", 10);
    add_checkpoint("a", "c1", 100);
    auto got = db_->get_checkpoint("a:train:0", "weights/c1");
    ASSERT_TRUE(got.ok() && got->has_value());
    EXPECT_EQ((*got)->user_metadata_json, R"({"renderer":"qwen3"})");
    CheckpointRow replaced = **got;
    replaced.user_metadata_json = "{}";
    ASSERT_TRUE(db_->upsert_checkpoint(replaced).ok());
    auto again = db_->get_checkpoint("a:train:0", "weights/c1");
    ASSERT_TRUE(again.ok() && again->has_value());
    EXPECT_EQ((*again)->user_metadata_json, "{}");
}

TEST_P(SessionQueriesTest, StorageIsSummedPerSessionAndPerProject) {
    add_session("a", 10, "p1");
    add_session("b", 20, "p1");
    add_session("c", 30, "");
    add_checkpoint("a", "c1", 100);
    add_checkpoint("a", "c2", 50);
    add_checkpoint("b", "c3", 7);
    add_checkpoint("c", "c4", 1);
    auto usage = db_->session_checkpoint_usage("a");
    ASSERT_TRUE(usage.ok());
    EXPECT_EQ(usage->count, 2);
    EXPECT_EQ(usage->size_bytes, 150);
    auto projects = db_->checkpoint_usage_by_project("t1", std::nullopt);
    ASSERT_TRUE(projects.ok());
    ASSERT_EQ(projects->size(), 2u);
    EXPECT_EQ((*projects)[0].project_id, "");
    EXPECT_EQ((*projects)[0].size_bytes, 1);
    EXPECT_EQ((*projects)[1].project_id, "p1");
    EXPECT_EQ((*projects)[1].count, 3);
    EXPECT_EQ((*projects)[1].size_bytes, 157);
    auto one = db_->checkpoint_usage_by_project("t1", std::string("p1"));
    ASSERT_TRUE(one.ok());
    ASSERT_EQ(one->size(), 1u);
    EXPECT_EQ((*one)[0].count, 3);
}

}  // namespace
}  // namespace tinkerd::store
