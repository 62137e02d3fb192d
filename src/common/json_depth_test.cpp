// Unit tests for the JSON nesting-depth guard: depths, strings and escapes skipped, early stop, the error.
#include "common/json_depth.h"

#include <string>

#include <gtest/gtest.h>

namespace tinkerd {
namespace {

TEST(JsonDepth, CountsArraysAndObjects) {
    EXPECT_EQ(json_nesting_depth("1"), 0u);
    EXPECT_EQ(json_nesting_depth("{}"), 1u);
    EXPECT_EQ(json_nesting_depth(R"({"a": [1, {"b": []}], "c": {}})"), 4u);
    EXPECT_EQ(json_nesting_depth("[[]][[[]]]"), 3u);
}

TEST(JsonDepth, SkipsStringsAndEscapedQuotes) {
    EXPECT_EQ(json_nesting_depth(R"({"a": "[[[[{{{{"})"), 1u);
    EXPECT_EQ(json_nesting_depth(R"({"a": "\"[[[", "b": [[]]})"), 3u);
    EXPECT_EQ(json_nesting_depth(R"(["\\", [[]]])"), 3u);  // an escaped backslash then the closing quote
}

TEST(JsonDepth, StopsEarlyOnHugeNesting) {
    const std::string deep = std::string(200000, '[') + std::string(200000, ']');
    EXPECT_EQ(json_nesting_depth(deep, 64), 65u);
    EXPECT_EQ(json_nesting_depth(deep, 1000000), 200000u);
}

TEST(JsonDepth, ErrorNamesTheLimit) {
    EXPECT_TRUE(check_json_depth(std::string(64, '[') + std::string(64, ']'), "body").ok());
    const auto refused = check_json_depth(std::string(65, '{'), "request body");
    ASSERT_FALSE(refused.ok());
    EXPECT_EQ(refused.error().kind, ErrorKind::INVALID_ARGUMENT);
    EXPECT_EQ(refused.error().message, "request body: JSON nested deeper than 64 levels (the limit)");
}

}  // namespace
}  // namespace tinkerd
