// Keeps the server usable on a full disk: a reserve file of a few MiB in the data dir is deleted when
// SQLite reports SQLITE_FULL (the failed statement is retried once), so deleting checkpoints and runs,
// which is how a user frees space, still gets its database writes; the reserve is re-created once the
// disk has room again. Also: free-space queries and removal of interrupted `.tmp-*` checkpoint writes.
#pragma once

#include <cstdint>
#include <functional>
#include <mutex>
#include <string>

#include "common/status.h"

namespace tinkerd::store {

class DiskReserve {
  public:
    // `path`: the reserve file (DATA_DIR/.disk-reserve); `bytes` 0 disables it.
    DiskReserve(std::string path, uint64_t bytes) : path_(std::move(path)), bytes_(bytes) {}

    // Creates the reserve when missing and the disk has room for it and as much again; true when held.
    bool restore_if_room();
    // Deletes the reserve file; true when it freed space (it existed).
    bool release();
    bool held() const;
    uint64_t bytes() const { return bytes_; }

  private:
    std::string path_;
    uint64_t bytes_;
    mutable std::mutex mutex_;
};

// Bytes available to this process on the filesystem of `dir` (0 when it cannot be read).
uint64_t free_disk_bytes(const std::string & dir);

// Called by every statement that fails with SQLITE_FULL; when it returns true (space was freed) the
// statement is retried once. Set once at start-up, before any database use from other threads.
void set_disk_full_handler(std::function<bool()> handler);
bool handle_disk_full();

// True when a database error is SQLite's "database or disk is full" (SQLITE_FULL).
bool is_disk_full(const Error & error);

// Removes interrupted checkpoint writes under DATA_DIR/runs (directories whose name contains ".tmp-" or
// ".old-": the temp side of write_checkpoint's rename protocol). Returns how many were removed.
int remove_interrupted_writes(const std::string & data_dir);

}  // namespace tinkerd::store
