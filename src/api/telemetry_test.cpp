// Unit tests of Telemetry's sampler latencies on a real store file: quantiles of known latencies within
// a bucket's width of the exact ones, failed requests counted but not timed, tenants apart, and the very
// same numbers from a new Telemetry on the reopened file (a restart); and its TelemetryWriter: a flush makes
// what was queued readable, stop() drains the queue, and a full or stopped queue drops (and counts) records
// instead of blocking.
#include "api/telemetry.h"

#include <cmath>
#include <filesystem>
#include <unistd.h>

#include <gtest/gtest.h>

#include "common/latency_histogram.h"

namespace tinkerd::api {
namespace {

namespace fs = std::filesystem;

class TelemetryLatencyTest : public ::testing::Test {
  protected:
    void SetUp() override {
        path_ = fs::temp_directory_path() / ("tinkerd-telemetry-test-" + std::to_string(::getpid()) + ".db");
        fs::remove(path_);
        reopen();
    }
    void TearDown() override {
        telemetry_.reset();
        db_.reset();
        for (const char * suffix : {"", "-wal", "-shm"}) {
            fs::remove(path_.string() + suffix);
        }
    }
    void reopen() {
        telemetry_.reset();
        db_.reset();
        auto db = store::Database::open(path_.string());
        ASSERT_TRUE(db.ok()) << db.error().message;
        db_ = std::move(*db);
        telemetry_ = std::make_unique<Telemetry>(*db_, 100);
    }
    void sample(const std::string & tenant, double latency_s, bool ok = true) {
        telemetry_->record_sample(SampleUsage{tenant, "s:sample:0", "base", 3, latency_s, ok});
    }
    std::map<std::string, SamplerLatency> latencies(const std::string & tenant) {
        auto got = telemetry_->sampler_latencies(tenant, 100);
        EXPECT_TRUE(got.ok()) << got.error().message;
        return got.ok() ? *got : std::map<std::string, SamplerLatency>{};
    }

    fs::path path_;
    std::unique_ptr<store::Database> db_;
    std::unique_ptr<Telemetry> telemetry_;
};

TEST_F(TelemetryLatencyTest, QuantilesComeFromTheStoredHistogramAndSurviveARestart) {
    for (int i = 1; i <= 100; ++i) {  // 10 ms .. 1 s: exact p50 0.5 s, p95 0.95 s
        sample("alice", 0.01 * i);
    }
    sample("alice", 500.0, false);  // failed: counted as a request, its latency left out
    sample("bob", 2.0);
    const double width = std::log(std::pow(10.0, 1.0 / latency_histogram::EDGES_PER_DECADE));
    const auto before = latencies("alice");
    ASSERT_EQ(before.size(), 1u);
    const SamplerLatency live = before.at("s:sample:0");
    ASSERT_TRUE(live.p50 && live.p95);
    EXPECT_NEAR(std::log(*live.p50 / 0.5), 0.0, width);
    EXPECT_NEAR(std::log(*live.p95 / 0.95), 0.0, width);
    telemetry_->flush();
    EXPECT_EQ(db_->sampler_usage("alice")->at(0).requests, 101);
    EXPECT_NEAR(std::log(*latencies("bob").at("s:sample:0").p50 / 2.0), 0.0, width);  // only bob's request

    reopen();  // a restart: a new Telemetry on the same file
    const SamplerLatency restarted = latencies("alice").at("s:sample:0");
    EXPECT_EQ(restarted.p50, live.p50);
    EXPECT_EQ(restarted.p95, live.p95);
    EXPECT_TRUE(latencies("carol").empty());
}

class TelemetryWriterTest : public TelemetryLatencyTest {
  protected:
    static store::MetricPoint point(int64_t step) {
        return store::MetricPoint{
            "run-1", "optim_step", step, 100.0 + static_cast<double>(step), 0.1, {{"learning_rate", 1e-3}}};
    }
    size_t stored_points() { return db_->metric_points("run-1", 0).value().size(); }
};

TEST_F(TelemetryWriterTest, AFlushMakesQueuedRecordsReadable) {
    TelemetryWriter writer(*db_, TelemetryWriter::Options{100});
    for (int64_t step = 0; step < 50; ++step) {
        ASSERT_TRUE(writer.add_point(point(step)));
    }
    ASSERT_TRUE(writer.add_usage(store::SamplerUsageDelta{{"s:sample:0", "alice", "base", 1, 5, 1.0}, 3}));
    ASSERT_TRUE(writer.flush());
    EXPECT_EQ(stored_points(), 50u);
    EXPECT_EQ(db_->sampler_usage("alice")->at(0).tokens_sampled, 5);
    EXPECT_EQ(writer.dropped(), 0);
}

TEST_F(TelemetryWriterTest, StopDrainsTheQueueThenDrops) {
    TelemetryWriter writer(*db_, TelemetryWriter::Options{100});
    for (int64_t step = 0; step < 200; ++step) {
        ASSERT_TRUE(writer.add_point(point(step)));
    }
    writer.stop();
    EXPECT_EQ(db_->metric_points("run-1", 0)->back().step, 199);  // the last one queued was written
    EXPECT_FALSE(writer.add_point(point(200)));
    EXPECT_EQ(writer.dropped(), 1);
}

TEST_F(TelemetryWriterTest, AFullQueueDropsInsteadOfBlocking) {
    TelemetryWriter writer(*db_, TelemetryWriter::Options{100, 0});  // no room at all
    EXPECT_FALSE(writer.add_point(point(0)));
    EXPECT_FALSE(writer.add_usage(store::SamplerUsageDelta{{"s:sample:0", "alice", "base", 1, 5, 1.0}, 3}));
    EXPECT_EQ(writer.dropped(), 2);
    ASSERT_TRUE(writer.flush());
    EXPECT_EQ(stored_points(), 0u);
}

}  // namespace
}  // namespace tinkerd::api
