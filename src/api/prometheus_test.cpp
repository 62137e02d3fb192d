// Unit tests of PrometheusText against the text exposition format 0.0.4: HELP/TYPE lines, label escaping,
// value spelling (integers, shortest round-trip decimals, +Inf/NaN), cumulative histogram buckets.
#include "api/prometheus.h"

#include <cmath>
#include <limits>

#include <gtest/gtest.h>

namespace tinkerd::api {
namespace {

TEST(PrometheusText, FamiliesSamplesAndEscapedLabels) {
    PrometheusText out;
    out.family("tinkerd_x_total", "counter", "Things \\ counted\nhere.");
    out.sample("tinkerd_x_total", {{"route", "/a/{id}"}, {"why", "say \"hi\"\\\n"}}, 3);
    out.sample("tinkerd_x_total", {}, 0.25);
    EXPECT_EQ(out.text(),
              "# HELP tinkerd_x_total Things \\\\ counted\\nhere.\n"
              "# TYPE tinkerd_x_total counter\n"
              "tinkerd_x_total{route=\"/a/{id}\",why=\"say \\\"hi\\\"\\\\\\n\"} 3\n"
              "tinkerd_x_total 0.25\n");
}

TEST(PrometheusText, ValuesAreSpelledAsPrometheusReadsThem) {
    EXPECT_EQ(PrometheusText::format_value(42), "42");
    EXPECT_EQ(PrometheusText::format_value(-7), "-7");
    EXPECT_EQ(PrometheusText::format_value(0.005), "0.005");
    EXPECT_EQ(PrometheusText::format_value(0.1 + 0.2), "0.30000000000000004");  // round-trips exactly
    EXPECT_EQ(PrometheusText::format_value(4294967296.0), "4294967296");
    EXPECT_EQ(PrometheusText::format_value(1e300), "1e+300");
    EXPECT_EQ(PrometheusText::format_value(std::numeric_limits<double>::infinity()), "+Inf");
    EXPECT_EQ(PrometheusText::format_value(-std::numeric_limits<double>::infinity()), "-Inf");
    EXPECT_EQ(PrometheusText::format_value(std::nan("")), "NaN");
}

TEST(PrometheusText, HistogramBucketsAreCumulativeWithInf) {
    PrometheusText out;
    out.family("lat_seconds", "histogram", "Latency.");
    out.histogram("lat_seconds", {{"route", "/r"}}, {0.1, 1.0}, {2, 3}, 4.5, 6);
    EXPECT_EQ(out.text(),
              "# HELP lat_seconds Latency.\n"
              "# TYPE lat_seconds histogram\n"
              "lat_seconds_bucket{route=\"/r\",le=\"0.1\"} 2\n"
              "lat_seconds_bucket{route=\"/r\",le=\"1\"} 5\n"
              "lat_seconds_bucket{route=\"/r\",le=\"+Inf\"} 6\n"
              "lat_seconds_sum{route=\"/r\"} 4.5\n"
              "lat_seconds_count{route=\"/r\"} 6\n");
}

}  // namespace
}  // namespace tinkerd::api
