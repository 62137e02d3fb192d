// Tests of the api's parts over a real SQLite database and an EngineWorker on the FakeEngine (no torch;
// built under ASan too). Registry: tenant isolation of run / checkpoint / session lookups (another
// tenant's id is the same NOT_FOUND as a missing one), register / find / unload of runs, the snapshot
// cache's per-run cap, sessions' last activity, one-time archive tokens. SamplingService with the
// worker's one loop: tokens and outcome reach the sink through the output stage, a cancelled request is
// freed in the engine at the next step, the 429 capacity counts requests until they finish, and a
// snapshot's weights are imported once into the worker's adapter LRU (a missing one fails only its request).
#include <filesystem>
#include <future>
#include <thread>
#include <unistd.h>

#include <gtest/gtest.h>

#include "api/registry.h"
#include "api/sampling_service.h"
#include "scheduler/fake_engine.h"

namespace tinkerd::api {
namespace {

namespace fs = std::filesystem;
using namespace std::chrono_literals;

class RegistryTest : public ::testing::Test {
  protected:
    void SetUp() override {
        dir_ = fs::temp_directory_path() / ("tinkerd-api-parts-test-" + std::to_string(::getpid()));
        fs::remove_all(dir_);
        fs::create_directories(dir_);
        auto db = store::Database::open((dir_ / "tinkerd.db").string());
        ASSERT_TRUE(db.ok()) << db.error().message;
        db_ = std::move(*db);
        registry_ = std::make_unique<Registry>(*db_);
        model_.name = "fake";
        model_.engine = &engine_;
        model_.worker = std::make_unique<scheduler::EngineWorker>(engine_, "fake");
        model_.worker->start();
    }
    void TearDown() override {
        model_.worker->stop();
        registry_.reset();
        db_.reset();
        fs::remove_all(dir_);
    }

    // A run row (and its session's, once) in the database.
    store::TrainingRunRow run_row(const std::string & tenant, const std::string & run_id) {
        store::SessionRow session;
        session.session_id = run_id.substr(0, run_id.find(':'));
        session.tenant = tenant;
        (void)db_->insert_session(session);
        store::TrainingRunRow row;
        row.run_id = run_id;
        row.tenant = tenant;
        row.session_id = run_id.substr(0, run_id.find(':'));
        row.base_model = "fake";
        EXPECT_TRUE(db_->insert_run(row).ok());
        return row;
    }

    fs::path dir_;
    std::unique_ptr<store::Database> db_;
    std::unique_ptr<Registry> registry_;
    scheduler::fakes::FakeEngine engine_;
    ServedModel model_;
};

TEST_F(RegistryTest, AnotherTenantsRowsAreNotFoundLikeMissingOnes) {
    run_row("alice", "s1:train:0");
    store::CheckpointRow checkpoint;
    checkpoint.run_id = "s1:train:0";
    checkpoint.checkpoint_id = "weights/w";
    checkpoint.checkpoint_type = "training";
    checkpoint.tenant = "alice";
    checkpoint.dir = (dir_ / "w").string();
    ASSERT_TRUE(db_->upsert_checkpoint(checkpoint).ok());
    EXPECT_TRUE(registry_->find_run_row("alice", "s1:train:0", false).ok());
    auto theirs = registry_->find_run_row("bob", "s1:train:0", true);
    auto missing = registry_->find_run_row("bob", "s9:train:0", true);
    ASSERT_FALSE(theirs.ok());
    EXPECT_EQ(theirs.error().kind, ErrorKind::NOT_FOUND);
    EXPECT_EQ(missing.error().kind, ErrorKind::NOT_FOUND);

    const TinkerPath path{"s1:train:0", "weights", "w"};
    EXPECT_TRUE(registry_->find_checkpoint("alice", path, false).ok());
    EXPECT_EQ(registry_->find_checkpoint("bob", path, true).error().kind, ErrorKind::NOT_FOUND);
    checkpoint.is_public = true;  // published: readable by others where allowed, never otherwise
    ASSERT_TRUE(db_->upsert_checkpoint(checkpoint).ok());
    EXPECT_TRUE(registry_->find_checkpoint("bob", path, true).ok());
    EXPECT_FALSE(registry_->find_checkpoint("bob", path, false).ok());
    EXPECT_TRUE(registry_->find_run_row("bob", "s1:train:0", true).ok());
    EXPECT_FALSE(registry_->find_run_row("bob", "s1:train:0", false).ok());

    EXPECT_TRUE(registry_->find_session("alice", "s1").ok());
    EXPECT_EQ(registry_->find_session("bob", "s1").error().kind, ErrorKind::NOT_FOUND);
}

TEST_F(RegistryTest, RegisterFindAndUnloadARun) {
    RunPtr run = registry_->register_run(run_row("alice", "s1:train:0"), &model_, engine::LoraSpec{}, "req-1");
    model_.worker->open_run("s1:train:0", 1, "alice");
    EXPECT_EQ(registry_->find_run("s1:train:0"), run);
    EXPECT_EQ(registry_->find_tenant_run("alice", "s1:train:0"), run);
    EXPECT_EQ(registry_->find_tenant_run("bob", "s1:train:0"), nullptr);
    EXPECT_EQ(registry_->find_run("nope"), nullptr);

    auto snapshot = std::make_shared<SamplerSnapshot>();
    snapshot->run_id = "s1:train:0";
    registry_->keep_snapshot("s1:sample:0", snapshot);
    run->ready = true;
    registry_->unload_run(run, "test");
    EXPECT_FALSE(run->loaded);
    EXPECT_FALSE(run->ready);
    EXPECT_FALSE(model_.worker->has_run("s1:train:0"));
    EXPECT_EQ(registry_->find_snapshot("s1:sample:0"), nullptr);  // its memory copy (files stay)
    EXPECT_TRUE(db_->get_run("s1:train:0")->value().unloaded);
    registry_->unload_run(run, "again");  // idempotent
    EXPECT_EQ(registry_->runs_where([](const RunState & r) { return r.loaded.load(); }).size(), 0u);
}

TEST_F(RegistryTest, TheSnapshotCacheKeepsARunsNewest) {
    for (size_t i = 0; i < Registry::MAX_CACHED_SNAPSHOTS_PER_RUN + 3; ++i) {
        auto snapshot = std::make_shared<SamplerSnapshot>();
        snapshot->run_id = "r";
        snapshot->bytes = 10;
        registry_->keep_snapshot("r:sample:" + std::to_string(i), snapshot);
    }
    EXPECT_EQ(registry_->cached_snapshots(), Registry::MAX_CACHED_SNAPSHOTS_PER_RUN);
    EXPECT_NE(registry_->find_snapshot("r:sample:10"), nullptr);
    registry_->forget_snapshot("r:sample:10");
    EXPECT_EQ(registry_->find_snapshot("r:sample:10"), nullptr);
}

TEST_F(RegistryTest, SessionsAndArchiveTokens) {
    EXPECT_FALSE(registry_->session_last_seen("s1"));
    registry_->note_session_activity("s1");
    EXPECT_GT(registry_->session_last_seen("s1").value_or(0), 0);
    registry_->forget_session("s1");
    EXPECT_FALSE(registry_->session_last_seen("s1"));

    registry_->add_archive_token("t1", "/d1", 100);
    registry_->add_archive_token("t2", "/d2", 50);
    EXPECT_FALSE(registry_->take_archive_token("t2", 60));  // expired
    EXPECT_EQ(registry_->take_archive_token("t1", 60).value_or(""), "/d1");
    EXPECT_FALSE(registry_->take_archive_token("t1", 60));  // one use only
    registry_->add_archive_token("t3", "/d3", 10);
    registry_->expire_archive_tokens(20);
    EXPECT_FALSE(registry_->take_archive_token("t3", 0));
}

// Collects a request's tokens and outcome (output thread) for the test thread.
struct Collector {
    std::mutex mutex;
    std::vector<int64_t> tokens;
    std::promise<Result<engine::SampleOutput>> done;
    std::shared_ptr<SampleSink> sink() {
        return std::make_shared<FunctionSink>([this](Result<engine::SampleOutput> out) { done.set_value(out); },
                                              [this](std::vector<GeneratedToken> step) {
                                                  std::lock_guard lock(mutex);
                                                  for (const auto & t : step) {
                                                      tokens.push_back(t.token);
                                                  }
                                              });
    }
    size_t count() {
        std::lock_guard lock(mutex);
        return tokens.size();
    }
};

class SamplingServiceTest : public RegistryTest {
  protected:
    void SetUp() override {
        RegistryTest::SetUp();
        service_ = std::make_unique<SamplingService>(*registry_, *db_, output_, 1);
    }
    void TearDown() override {
        model_.worker->stop();
        output_.stop();
        RegistryTest::TearDown();
    }
    SampleSubmission request(int64_t first, int64_t max_tokens, Collector & collector) {
        SampleSubmission s;
        s.sampler.sampler_id = "base";
        s.request.prompt = {first};
        s.request.params.max_tokens = max_tokens;
        s.sink = collector.sink();
        s.stream_tokens = true;
        return s;
    }

    OutputStage output_;
    std::unique_ptr<SamplingService> service_;
};

TEST_F(SamplingServiceTest, TokensAndOutcomeReachTheSink) {
    Collector c;
    service_->submit(model_, request(40, 3, c));
    auto done = c.done.get_future();
    ASSERT_EQ(done.wait_for(5s), std::future_status::ready);
    auto out = done.get();
    ASSERT_TRUE(out.ok()) << out.error().message;
    EXPECT_EQ(out->sequences.at(0).tokens, (std::vector<int64_t>{41, 42, 43}));
    EXPECT_EQ(c.tokens, (std::vector<int64_t>{41, 42, 43}));  // each step's, before the outcome
    EXPECT_EQ(service_->in_flight(), 0);
}

TEST_F(SamplingServiceTest, ACancelledRequestIsFreedAndCapacityComesBack) {
    Collector c;
    SampleSubmission s = request(1, 1000000, c);
    s.cancelled = std::make_shared<std::atomic<bool>>(false);
    auto cancelled = s.cancelled;
    service_->submit(model_, std::move(s));
    EXPECT_EQ(service_->check_capacity().error().kind, ErrorKind::UNAVAILABLE);  // max 1 in flight: a 429
    while (c.count() < 2) {
        std::this_thread::sleep_for(1ms);
    }
    cancelled->store(true);
    auto done = c.done.get_future();
    ASSERT_EQ(done.wait_for(5s), std::future_status::ready);
    EXPECT_EQ(done.get().error().message, "cancelled: the client went away");
    EXPECT_EQ(engine_.sampling_requests(), 0u);
    EXPECT_EQ(engine_.cancelled().size(), 1u);
    EXPECT_TRUE(service_->check_capacity().ok());
}

TEST_F(SamplingServiceTest, ASnapshotIsImportedOnceAndAMissingOneFailsAlone) {
    auto snapshot = std::make_shared<SamplerSnapshot>();
    snapshot->run_id = "s1:train:0";
    registry_->keep_snapshot("s1:sample:0", snapshot);
    for (int i = 0; i < 2; ++i) {
        Collector c;
        SampleSubmission s = request(1, 1, c);
        s.sampler.sampler_id = "s1:sample:0";
        s.sampler.run_id = "s1:train:0";
        service_->submit(model_, std::move(s));
        auto done = c.done.get_future();
        ASSERT_EQ(done.wait_for(5s), std::future_status::ready);
        EXPECT_TRUE(done.get().ok());
    }
    EXPECT_EQ(engine_.live_adapters().size(), 1u);  // one import, kept in the LRU
    Collector gone;
    SampleSubmission s = request(1, 1, gone);
    s.sampler.sampler_id = "s1:sample:9";
    s.sampler.run_id = "s1:train:0";
    service_->submit(model_, std::move(s));
    auto done = gone.done.get_future();
    ASSERT_EQ(done.wait_for(5s), std::future_status::ready);
    auto out = done.get();
    ASSERT_FALSE(out.ok());
    EXPECT_EQ(out.error().kind, ErrorKind::NOT_FOUND);
}

}  // namespace
}  // namespace tinkerd::api
