// Unit tests for the disk reserve (created when there is room, released once), the SQLITE_FULL hook,
// the disk-full error test, and start-up removal of interrupted checkpoint writes.
#include "store/disk_reserve.h"

#include <filesystem>
#include <fstream>

#include <gtest/gtest.h>

namespace tinkerd::store {
namespace {

namespace fs = std::filesystem;

class DiskReserveTest : public ::testing::Test {
  protected:
    void SetUp() override {
        dir_ = fs::temp_directory_path() / ("tinkerd-reserve-" + std::to_string(::getpid()));
        fs::create_directories(dir_);
    }
    void TearDown() override { fs::remove_all(dir_); }
    fs::path dir_;
};

TEST_F(DiskReserveTest, CreatedWhenThereIsRoomReleasedOnce) {
    DiskReserve reserve((dir_ / ".disk-reserve").string(), 1 << 20);
    EXPECT_FALSE(reserve.held());
    ASSERT_TRUE(reserve.restore_if_room());
    EXPECT_EQ(fs::file_size(dir_ / ".disk-reserve"), 1u << 20);
    set_disk_full_handler([&reserve] { return reserve.release(); });
    EXPECT_TRUE(handle_disk_full());   // freed the file
    EXPECT_FALSE(handle_disk_full());  // nothing left to free: the statement is not retried
    EXPECT_FALSE(reserve.held());
    set_disk_full_handler(nullptr);
    EXPECT_FALSE(handle_disk_full());
    DiskReserve disabled((dir_ / "none").string(), 0);
    EXPECT_FALSE(disabled.restore_if_room());
    EXPECT_FALSE(fs::exists(dir_ / "none"));
}

TEST_F(DiskReserveTest, RecognisesSqliteFullErrors) {
    EXPECT_TRUE(is_disk_full(internal_error("sqlite: insert_future: database or disk is full")));
    EXPECT_FALSE(is_disk_full(internal_error("sqlite: insert_future: database is locked")));
    EXPECT_GT(free_disk_bytes(dir_.string()), 0u);
}

TEST_F(DiskReserveTest, RemovesOnlyInterruptedCheckpointWrites) {
    const fs::path weights = dir_ / "runs" / "sess-1:train:0" / "weights";
    for (const char * name : {"keep", "a.tmp-1234", "b.old-99"}) {
        fs::create_directories(weights / name / "inner");
    }
    std::ofstream(weights / "keep" / "adapter_model.safetensors") << "x";
    EXPECT_EQ(remove_interrupted_writes(dir_.string()), 2);
    EXPECT_TRUE(fs::exists(weights / "keep" / "adapter_model.safetensors"));
    EXPECT_FALSE(fs::exists(weights / "a.tmp-1234"));
    EXPECT_FALSE(fs::exists(weights / "b.old-99"));
    EXPECT_EQ(remove_interrupted_writes((dir_ / "missing").string()), 0);
}

}  // namespace
}  // namespace tinkerd::store
