// Unit tests for the metrics tables (store/run_metrics.cpp): points read back in time order and filtered
// by step, kept across a reopen of the file, thinned to the per-op bound with every op still counted
// and weighted means preserved, sampler usage summed per (tenant, sampler) across a reopen, and sampler
// latency histograms (counts per bucket, in the usage's transaction) summed and kept across a reopen; a
// telemetry batch (one transaction) thinned to the bound at once with its usage summed per sampler; and
// the retention rule (prune_metrics) on runs, checkpoints and samplers; numbered points after an id (push streams).
#include <cmath>
#include <filesystem>
#include <numeric>
#include <stdlib.h>
#include <string>

#include <gtest/gtest.h>

#include "store/database.h"
#include "store/store_test_backends.h"

namespace tinkerd::store {
namespace {

using testing_backends::Backend;

class RunMetricsTest : public testing_backends::BackendTest {
  protected:
    void SetUp() override {
        BackendTest::SetUp();
        if (IsSkipped() || HasFatalFailure()) {
            return;
        }
        reopen();
    }
    void TearDown() override {
        db_.reset();
        BackendTest::TearDown();
    }
    void reopen() {
        db_.reset();
        auto db = Database::open(location_);
        ASSERT_TRUE(db.ok()) << db.error().message;
        db_ = std::move(db.value());
    }
    void record(const std::string & op, int64_t step, double time, double loss, int64_t max_points = 1000) {
        MetricPoint p;
        p.run_id = "run-1";
        p.op = op;
        p.step = step;
        p.time = time;
        p.duration_s = 0.5;
        p.values = {{"loss:sum", loss}, {"num_tokens", 10.0}};
        auto done = db_->record_metric_point(p, max_points);
        ASSERT_TRUE(done.ok()) << done.error().message;
    }
    std::vector<MetricPoint> points(int64_t since_step = 0) {
        auto got = db_->metric_points("run-1", since_step);
        EXPECT_TRUE(got.ok()) << got.error().message;
        return got.ok() ? *got : std::vector<MetricPoint>{};
    }

    std::unique_ptr<Database> db_;
};

INSTANTIATE_TEST_SUITE_P(Backends, RunMetricsTest, testing::Values(Backend::SQLITE, Backend::POSTGRES),
                         [](const auto & info) { return testing_backends::backend_name(info.param); });

TEST_P(RunMetricsTest, PointsComeBackInTimeOrderAfterReopen) {
    record("forward_backward", 0, 10.0, 3.0);
    record("optim_step", 1, 11.0, 0.0);
    record("forward_backward", 1, 12.0, 2.5);
    reopen();  // nothing is lost on restart
    auto all = points();
    ASSERT_EQ(all.size(), 3u);
    EXPECT_EQ(all[0].op, "forward_backward");
    EXPECT_EQ(all[1].op, "optim_step");
    EXPECT_EQ(all[2].step, 1);
    EXPECT_DOUBLE_EQ(all[2].values.at("loss:sum"), 2.5);
    EXPECT_DOUBLE_EQ(all[2].values.at("num_tokens"), 10.0);
    EXPECT_DOUBLE_EQ(all[0].duration_s, 0.5);
    EXPECT_EQ(points(1).size(), 2u);  // since_step
    EXPECT_TRUE(db_->metric_points("other-run", 0)->empty());
    EXPECT_FALSE(db_->metrics_downsampled("run-1").value());
}

// What a push stream reads: points numbered in the order they were written, those after an id (and up to
// another, and from a step) only, and the run's last id.
TEST_P(RunMetricsTest, NumberedPointsResumeAfterAnId) {
    EXPECT_EQ(db_->last_metric_point_id("run-1").value(), 0);
    record("forward_backward", 0, 10.0, 3.0);
    record("optim_step", 1, 11.0, 0.0);
    const int64_t first_two = db_->last_metric_point_id("run-1").value();
    record("forward_backward", 1, 12.0, 2.5);
    const int64_t last = db_->last_metric_point_id("run-1").value();
    EXPECT_GT(last, first_two);
    auto after = db_->metric_points_after("run-1", first_two, last, 0);
    ASSERT_TRUE(after.ok()) << after.error().message;
    ASSERT_EQ(after->size(), 1u);
    EXPECT_EQ((*after)[0].point_id, last);
    EXPECT_DOUBLE_EQ((*after)[0].point.values.at("loss:sum"), 2.5);
    EXPECT_EQ(db_->metric_points_after("run-1", 0, first_two, 0)->size(), 2u);
    EXPECT_EQ(db_->metric_points_after("run-1", 0, last, 1)->size(), 2u);  // since_step
    EXPECT_TRUE(db_->metric_points_after("run-1", last, last + 100, 0)->empty());
    EXPECT_EQ(db_->last_metric_point_id("other-run").value(), 0);
}

TEST_P(RunMetricsTest, NonFiniteValuesAreLeftOut) {
    MetricPoint p;
    p.run_id = "run-1";
    p.op = "forward";
    p.values = {{"loss:sum", std::nan("")}, {"num_tokens", 4.0}};
    ASSERT_TRUE(db_->record_metric_point(p, 100).ok());
    auto all = points();
    ASSERT_EQ(all.size(), 1u);
    EXPECT_EQ(all[0].values.count("loss:sum"), 0u);
    EXPECT_DOUBLE_EQ(all[0].values.at("num_tokens"), 4.0);
}

TEST_P(RunMetricsTest, DownsamplingKeepsTheBoundAndTheWeightedMean) {
    const int64_t bound = 8;
    double sum = 0;
    for (int i = 0; i < 40; i++) {
        record("forward_backward", i, 100.0 + i, static_cast<double>(i), bound);
        sum += i;
        record("optim_step", i + 1, 100.5 + i, 0.0, bound);
    }
    auto all = points();
    int64_t fb_points = 0;
    int64_t fb_ops = 0;
    double weighted = 0;
    double last_time = 0;
    for (const auto & p : all) {
        EXPECT_GE(p.time, last_time);  // still in time order
        last_time = p.time;
        if (p.op == "forward_backward") {
            fb_points++;
            fb_ops += p.merged;
            weighted += p.values.at("loss:sum") * static_cast<double>(p.merged);
        }
    }
    EXPECT_LE(fb_points, bound);
    EXPECT_GE(fb_points, bound / 2);
    EXPECT_EQ(fb_ops, 40);             // every op is still counted once
    EXPECT_NEAR(weighted, sum, 1e-9);  // merging averages, it does not lose mass
    EXPECT_EQ(all.back().step, 40);    // the newest points are never merged
    EXPECT_EQ(all.back().merged, 1);
    EXPECT_TRUE(db_->metrics_downsampled("run-1").value());
}

TEST_P(RunMetricsTest, SamplerUsageSumsPerTenantAndSurvivesReopen) {
    ASSERT_TRUE(db_->add_sampler_usage({"s:sample:0", "alice", "base", 1, 10, 5.0}).ok());
    ASSERT_TRUE(db_->add_sampler_usage({"s:sample:0", "alice", "base", 2, 7, 6.0}).ok());
    ASSERT_TRUE(db_->add_sampler_usage({"s:sample:0", "bob", "base", 1, 1, 7.0}).ok());
    reopen();
    auto alice = db_->sampler_usage("alice");
    ASSERT_TRUE(alice.ok());
    ASSERT_EQ(alice->size(), 1u);
    EXPECT_EQ((*alice)[0].requests, 3);
    EXPECT_EQ((*alice)[0].tokens_sampled, 17);
    EXPECT_DOUBLE_EQ((*alice)[0].last_used, 6.0);
    EXPECT_EQ(db_->sampler_usage("")->size(), 2u);
}

TEST_P(RunMetricsTest, SamplerLatencyHistogramsSumPerBucketAndSurviveReopen) {
    const SamplerUsageRow alice{"s:sample:0", "alice", "base", 1, 4, 5.0};
    ASSERT_TRUE(db_->add_sampler_usage(alice, 40).ok());
    ASSERT_TRUE(db_->add_sampler_usage(alice, 40).ok());
    ASSERT_TRUE(db_->add_sampler_usage(alice, 57).ok());
    ASSERT_TRUE(db_->add_sampler_usage(alice).ok());  // a failed request: counted, no latency
    ASSERT_TRUE(db_->add_sampler_usage({"s:sample:0", "bob", "base", 1, 1, 7.0}, 3).ok());
    ASSERT_TRUE(db_->add_sampler_usage({"other", "alice", "base", 1, 1, 8.0}, 0).ok());
    reopen();  // nothing is lost on restart
    auto got = db_->sampler_latency_counts("alice", 10);
    ASSERT_TRUE(got.ok()) << got.error().message;
    ASSERT_EQ(got->size(), 2u);
    EXPECT_EQ(got->at("s:sample:0"), (LatencyCounts{{40, 2}, {57, 1}}));  // bob's bucket 3 is his own
    EXPECT_EQ(got->at("other"), (LatencyCounts{{0, 1}}));
    EXPECT_EQ(db_->sampler_usage("alice")->at(1).requests, 4);  // the usage row counted every request
    auto newest = db_->sampler_latency_counts("alice", 1);      // only the most recently used sampler
    ASSERT_TRUE(newest.ok());
    ASSERT_EQ(newest->size(), 1u);
    EXPECT_EQ(newest->count("other"), 1u);
    auto bobs = db_->sampler_latency_counts("bob", 10);
    ASSERT_TRUE(bobs.ok());
    EXPECT_EQ(bobs->at("s:sample:0"), (LatencyCounts{{3, 1}}));
    EXPECT_TRUE(db_->sampler_latency_counts("carol", 10)->empty());
}

TEST_P(RunMetricsTest, ABatchIsThinnedToTheBoundAndItsUsageSummed) {
    TelemetryBatch batch;
    for (int i = 0; i < 40; i++) {
        batch.points.push_back(MetricPoint{"run-1", "forward_backward", i, 100.0 + i, 0.5, {{"loss:sum", 1.0 * i}}});
    }
    const SamplerUsageRow used{"s:sample:0", "alice", "base", 1, 4, 5.0};
    batch.usage = {
        {used, 40}, {used, 40}, {used, std::nullopt}, {SamplerUsageRow{"s:sample:0", "bob", "b", 1, 2, 6.0}, 3}};
    auto written = db_->write_telemetry(batch, 8);
    ASSERT_TRUE(written.ok()) << written.error().message;
    const auto all = points();
    EXPECT_LE(all.size(), 8u);  // one batch far over the bound is still brought under it
    EXPECT_EQ(std::accumulate(all.begin(), all.end(), int64_t{0},
                              [](int64_t n, const MetricPoint & p) { return n + p.merged; }),
              40);
    EXPECT_EQ(all.back().step, 39);
    auto alice = db_->sampler_usage("alice");
    ASSERT_TRUE(alice.ok() && alice->size() == 1u);
    EXPECT_EQ((*alice)[0].requests, 3);
    EXPECT_EQ((*alice)[0].tokens_sampled, 12);
    EXPECT_EQ(db_->sampler_latency_counts("alice", 10)->at("s:sample:0"), (LatencyCounts{{40, 2}}));
    EXPECT_EQ(db_->sampler_latency_counts("bob", 10)->at("s:sample:0"), (LatencyCounts{{3, 1}}));
}

TEST_P(RunMetricsTest, RetentionDropsIdleRunsWithoutCheckpointsAndUnusedSamplers) {
    ASSERT_TRUE(db_->insert_session(SessionRow{"s1", "alice", "[]", "{}", "", "0.38", 1.0, 1.0, false}).ok());
    for (const auto & [run_id, last_request] :
         {std::pair<std::string, double>{"idle", 100.0}, {"saved", 100.0}, {"live", 900.0}}) {
        TrainingRunRow run;
        run.run_id = run_id;
        run.tenant = "alice";
        run.session_id = "s1";
        run.base_model = "base";
        run.created_at = 50.0;
        run.last_request_time = last_request;
        ASSERT_TRUE(db_->insert_run(run).ok());
    }
    ASSERT_TRUE(db_->upsert_checkpoint(
                       CheckpointRow{"saved", "weights/a", "training", "alice", "/d", 60.0, 1, std::nullopt, false})
                    .ok());
    TelemetryBatch batch;
    for (const char * run_id : {"idle", "saved", "live", "deleted"}) {  // "deleted" has no run row
        batch.points.push_back(MetricPoint{run_id, "optim_step", 1, 100.0, 0.1, {{"learning_rate", 1e-3}}});
    }
    batch.usage = {{SamplerUsageRow{"old", "alice", "base", 1, 4, 100.0}, 10},
                   {SamplerUsageRow{"new", "alice", "base", 1, 4, 900.0}, 11}};
    ASSERT_TRUE(db_->write_telemetry(batch, 100).ok());
    auto pruned = db_->prune_metrics(500.0);
    ASSERT_TRUE(pruned.ok()) << pruned.error().message;
    EXPECT_EQ(*pruned, 4);  // idle's and deleted's points, old's usage row and its latency bucket
    for (const auto & [run_id, kept] :
         {std::pair<std::string, size_t>{"idle", 0}, {"deleted", 0}, {"saved", 1}, {"live", 1}}) {
        EXPECT_EQ(db_->metric_points(run_id, 0)->size(), kept) << run_id;
    }
    auto usage = db_->sampler_usage("alice");
    ASSERT_TRUE(usage.ok() && usage->size() == 1u);
    EXPECT_EQ((*usage)[0].sampler_id, "new");
    EXPECT_EQ(db_->sampler_latency_counts("alice", 10)->size(), 1u);
    EXPECT_EQ(db_->prune_metrics(500.0).value(), 0);
}

}  // namespace
}  // namespace tinkerd::store
