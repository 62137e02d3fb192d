// Unit tests for RateWindow: sums inside the window only, old buckets reused, short uptimes.
#include "common/rate_window.h"

#include <gtest/gtest.h>

namespace tinkerd {
namespace {

TEST(RateWindowTest, SumsTheLastWindowOnly) {
    RateWindow window(10);
    window.add(1000.2, 5);
    window.add(1000.9, 5);
    window.add(1005.0, 10);
    EXPECT_DOUBLE_EQ(window.sum(1005.5), 20);
    EXPECT_DOUBLE_EQ(window.sum(1009.99), 20);
    EXPECT_DOUBLE_EQ(window.sum(1010.0), 10);  // second 1000 has left the 10 s window
    EXPECT_DOUBLE_EQ(window.rate(1010.0, 100), 1.0);
    window.add(1020.0, 3);  // reuses second 1000's and 1010's slot
    EXPECT_DOUBLE_EQ(window.sum(1020.0), 3);
}

TEST(RateWindowTest, ShortUptimeShortensTheWindow) {
    RateWindow window(60);
    window.add(50.0, 30);
    EXPECT_DOUBLE_EQ(window.rate(50.5, 3.0), 10.0);  // 30 over the 3 s since start
    EXPECT_DOUBLE_EQ(window.rate(50.5, 0.1), 30.0);  // never divides by less than one second
}

}  // namespace
}  // namespace tinkerd
