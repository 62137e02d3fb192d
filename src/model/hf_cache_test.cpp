// Tests of the offline Hugging Face cache lookup on a fake cache tree.
#include "model/hf_cache.h"

#include <filesystem>
#include <fstream>
#include <unistd.h>

#include <gtest/gtest.h>

namespace tinkerd::model {
namespace {

namespace fs = std::filesystem;

fs::path make_cache() {
    fs::path root = fs::temp_directory_path() / ("hf-cache-test-" + std::to_string(::getpid()));
    fs::remove_all(root);
    fs::create_directories(root / "models--Org--Tiny/snapshots/abc123");
    fs::create_directories(root / "models--Org--Tiny/snapshots/old999");
    fs::create_directories(root / "models--Org--Tiny/refs");
    std::ofstream(root / "models--Org--Tiny/snapshots/abc123/config.json") << "{}";
    std::ofstream(root / "models--Org--Tiny/snapshots/old999/config.json") << "{}";
    std::ofstream(root / "models--Org--Tiny/refs/main") << "abc123\n";
    fs::create_directories(root / "models--Org--One/snapshots/r1");
    std::ofstream(root / "models--Org--One/snapshots/r1/config.json") << "{}";
    return root;
}

TEST(HfCache, ResolvesRefsMainThenTheOnlySnapshot) {
    const fs::path root = make_cache();
    auto tiny = resolve_hf_snapshot(root.string(), "Org/Tiny");
    ASSERT_TRUE(tiny.ok()) << tiny.error().message;
    EXPECT_EQ(fs::path(*tiny).filename(), "abc123");
    auto one = resolve_hf_snapshot(root.string(), "Org/One");
    ASSERT_TRUE(one.ok()) << one.error().message;
    EXPECT_EQ(fs::path(*one).filename(), "r1");
    fs::remove_all(root);
}

TEST(HfCache, ErrorsSayWhereItLooked) {
    const fs::path root = make_cache();
    auto missing = resolve_hf_snapshot(root.string(), "Org/Missing");
    ASSERT_FALSE(missing.ok());
    EXPECT_NE(missing.error().message.find("models--Org--Missing"), std::string::npos);
    EXPECT_FALSE(resolve_hf_snapshot(root.string(), "no-slash").ok());
    EXPECT_FALSE(resolve_hf_snapshot(root.string(), "a/b/c").ok());
    fs::remove_all(root);
}

TEST(HfCache, EnvironmentOrder) {
    ::setenv("HF_HUB_CACHE", "/x/hub-cache", 1);
    EXPECT_EQ(hf_hub_cache_dir(), "/x/hub-cache");
    ::unsetenv("HF_HUB_CACHE");
    ::setenv("HF_HOME", "/y", 1);
    EXPECT_EQ(hf_hub_cache_dir(), "/y/hub");
    ::unsetenv("HF_HOME");
}

}  // namespace
}  // namespace tinkerd::model
