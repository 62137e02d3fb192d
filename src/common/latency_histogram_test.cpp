// Unit tests for the latency histogram (common/latency_histogram.h): the edges' values, every latency in
// the bucket whose range holds it (edges inclusive above), and quantiles interpolated inside a bucket.
#include "common/latency_histogram.h"

#include <cmath>

#include <gtest/gtest.h>

namespace tinkerd::latency_histogram {
namespace {

TEST(LatencyHistogram, EdgesAreLogSpacedFrom1msTo1000s) {
    EXPECT_DOUBLE_EQ(edge_seconds(0), 1e-3);
    EXPECT_NEAR(edge_seconds(EDGES_PER_DECADE), 1e-2, 1e-15);
    EXPECT_NEAR(edge_seconds(LAST_EDGE_INDEX), 1000.0, 1e-9);
    EXPECT_NEAR(edge_seconds(1) / edge_seconds(0), std::pow(10.0, 0.05), 1e-12);
    EXPECT_GE(edge_seconds(LAST_EDGE_INDEX), 600.0);  // ten minutes fit below the open bucket
}

TEST(LatencyHistogram, ALatencyFallsInTheBucketThatHoldsIt) {
    EXPECT_EQ(bucket_of(0.0), 0);
    EXPECT_EQ(bucket_of(-1.0), 0);
    EXPECT_EQ(bucket_of(std::nan("")), 0);
    EXPECT_EQ(bucket_of(1e-3), 0);  // upper edges are inclusive
    EXPECT_EQ(bucket_of(1.0001e-3), 1);
    EXPECT_EQ(bucket_of(1e5), BUCKET_COUNT - 1);
    for (int k = 1; k <= LAST_EDGE_INDEX; ++k) {
        EXPECT_EQ(bucket_of(edge_seconds(k)), k) << k;
        const double inside = std::sqrt(edge_seconds(k - 1) * edge_seconds(k));
        EXPECT_EQ(bucket_of(inside), k) << k;
    }
}

TEST(LatencyHistogram, QuantilesInterpolateInsideTheBucket) {
    EXPECT_FALSE(quantile({}, 0.5).has_value());
    EXPECT_FALSE(quantile({{3, 0}}, 0.5).has_value());
    const int b = bucket_of(0.1);  // 0.1 s is edge 40 exactly: bucket 40 = (edge 39, 0.1]
    ASSERT_EQ(b, 40);
    const double lo = edge_seconds(39);
    const double hi = edge_seconds(40);
    EXPECT_NEAR(*quantile({{b, 4}}, 0.5), lo + (hi - lo) * 0.5, 1e-12);  // rank 2 of 4
    EXPECT_NEAR(*quantile({{b, 4}}, 0.95), lo + (hi - lo) * 0.95, 1e-12);
    EXPECT_NEAR(*quantile({{b, 4}}, 0.0), lo, 1e-12);
    // 10 in bucket 0 ([0, 1 ms]) and 10 in bucket 40: p50 is the top of bucket 0, p75 half-way up bucket 40.
    const std::map<int, int64_t> two = {{0, 10}, {b, 10}};
    EXPECT_NEAR(*quantile(two, 0.5), 1e-3, 1e-15);
    EXPECT_NEAR(*quantile(two, 0.75), lo + (hi - lo) * 0.5, 1e-12);
    EXPECT_NEAR(*quantile(two, 0.25), 0.5e-3, 1e-15);
    // The open bucket above 1000 s answers its lower edge; unknown indices are ignored.
    EXPECT_NEAR(*quantile({{BUCKET_COUNT - 1, 1}, {BUCKET_COUNT + 5, 100}, {-1, 100}}, 0.5), 1000.0, 1e-9);
}

TEST(LatencyHistogram, AQuantileIsWithinItsBucketsRelativeWidthOfTheTrueValue) {
    std::map<int, int64_t> counts;
    for (int i = 1; i <= 100; ++i) {  // 10 ms, 20 ms, ..., 1 s
        counts[bucket_of(0.01 * i)]++;
    }
    const double width = std::pow(10.0, 1.0 / EDGES_PER_DECADE);  // ~1.122
    EXPECT_NEAR(std::log(*quantile(counts, 0.5) / 0.5), 0.0, std::log(width));
    EXPECT_NEAR(std::log(*quantile(counts, 0.95) / 0.95), 0.0, std::log(width));
}

}  // namespace
}  // namespace tinkerd::latency_histogram
