// Unit tests for Result<T>: value and error paths, and error propagation with TRY_STATUS.
#include "common/status.h"

#include <gtest/gtest.h>

namespace tinkerd {
namespace {

Result<int> parse_positive(int x) {
    if (x <= 0) {
        return invalid_argument("x must be positive");
    }
    return x;
}

Result<void> check_both(int a, int b) {
    TRY_STATUS(parse_positive(a));
    TRY_STATUS(parse_positive(b));
    return {};
}

TEST(Result, HoldsValueOrError) {
    auto good = parse_positive(3);
    ASSERT_TRUE(good.ok());
    EXPECT_EQ(*good, 3);
    auto bad = parse_positive(-1);
    ASSERT_FALSE(bad.ok());
    EXPECT_EQ(bad.error().kind, ErrorKind::INVALID_ARGUMENT);
    EXPECT_EQ(bad.error().message, "x must be positive");
}

TEST(Result, TryStatusPropagatesFirstError) {
    EXPECT_TRUE(check_both(1, 2).ok());
    auto r = check_both(1, 0);
    ASSERT_FALSE(r.ok());
    EXPECT_EQ(r.error().message, "x must be positive");
}

}  // namespace
}  // namespace tinkerd
