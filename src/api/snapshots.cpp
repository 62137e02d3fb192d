// Unnamed sampler snapshots (save_weights_for_sampler without a name, save_weights_and_get_sampling_client):
// every one is written to DATA_DIR/snapshots/<sampler_id>/ (a PEFT adapter directory, temp dir + fsync +
// rename) by the snapshot writer thread and recorded in the samplers table with its size; the newest are
// also cached in memory. They stay usable while their session lives and --snapshot-ttl-seconds after it
// ends, then the sweeper deletes files and row. --snapshot-disk-mib bounds their total size.
#include <algorithm>
#include <filesystem>
#include <set>

#include "api/tinker_routes.h"
#include "common/log.h"

namespace tinkerd::api {

namespace {

namespace fs = std::filesystem;

constexpr size_t MAX_CACHED_SNAPSHOTS_PER_RUN = 8;
constexpr int64_t MAX_CACHED_SNAPSHOT_BYTES = 1LL << 30;  // all runs together; the newest one always stays
constexpr int64_t SNAPSHOT_FILE_OVERHEAD = 16 << 10;      // adapter_config.json, safetensors header, marker

int64_t tensor_bytes(const std::map<std::string, engine::HostTensor> & tensors) {
    int64_t total = 0;
    for (const auto & [name, tensor] : tensors) {
        total += static_cast<int64_t>(tensor.bytes.size());
    }
    return total;
}

std::string mib(int64_t bytes) {
    char text[32];
    std::snprintf(text, sizeof text, "%.1f MiB", static_cast<double>(bytes) / (1 << 20));
    return text;
}

}  // namespace

std::string TinkerRoutes::snapshot_dir(const std::string & sampler_id) const {
    return (fs::path(options_.data_dir) / "snapshots" / sampler_id).string();
}

// The budget counts what the database records plus what is queued; refusing is a user-category failure
// of the request's future (the SDK raises it at once; retrying would not help, space comes back only when
// sessions end), and the message names the flag.
Result<void> TinkerRoutes::queue_snapshot(SnapshotWrite write) {
    write.snapshot->bytes = tensor_bytes(write.snapshot->tensors);
    const int64_t needed = write.snapshot->bytes + SNAPSHOT_FILE_OVERHEAD;
    auto existing = db_->get_sampler(write.row.sampler_id);
    if (existing.ok() && existing->has_value()) {
        return invalid_argument("sampler '" + write.row.sampler_id +
                                "' already exists (sampling_session_seq_id used twice in one session)");
    }
    auto stored = db_->snapshot_bytes();
    if (!stored.ok()) {
        return stored.error();
    }
    std::lock_guard<std::mutex> lock(snapshot_mutex_);
    const int64_t used = *stored + snapshot_reserved_bytes_;
    if (used + needed > options_.snapshot_disk_bytes) {
        return invalid_argument(
            "sampler snapshot refused: the snapshot disk budget is full (" + mib(used) + " of " +
            mib(options_.snapshot_disk_bytes) + " used, this snapshot needs " + mib(needed) +
            "; raise --snapshot-disk-mib). Unnamed snapshots are deleted --snapshot-ttl-seconds after their "
            "session ends; save_weights_for_sampler with a name writes a checkpoint outside this budget");
    }
    snapshot_reserved_bytes_ += needed;
    snapshot_queue_.push_back(std::move(write));
    snapshot_wake_.notify_one();
    return {};
}

// The writer thread: drains the queue; at stop() it finishes what is queued before returning.
void TinkerRoutes::snapshot_writer_loop() {
    std::unique_lock<std::mutex> lock(snapshot_mutex_);
    while (true) {
        snapshot_wake_.wait(lock, [this] { return snapshot_writer_stopping_ || !snapshot_queue_.empty(); });
        if (snapshot_queue_.empty()) {
            return;  // stopping, nothing left
        }
        SnapshotWrite write = std::move(snapshot_queue_.front());
        snapshot_queue_.pop_front();
        lock.unlock();
        write_snapshot(write);
        lock.lock();
        snapshot_reserved_bytes_ -= write.snapshot->bytes + SNAPSHOT_FILE_OVERHEAD;  // now in the row (or failed)
    }
}

// Files first, then the row: a crash in between leaves a directory without a row, which the next start
// removes; a row always has its files.
void TinkerRoutes::write_snapshot(SnapshotWrite & write) {
    const auto started = std::chrono::steady_clock::now();
    if (auto room = check_disk_room(); !room.ok()) {
        fail_future(write.request_id, room.error());
        return;
    }
    auto size = store::write_checkpoint(write.row.dir, write.config, write.snapshot->tensors, true);
    if (!size.ok()) {
        LOG_ERR("api", "cannot write snapshot %s: %s", write.row.sampler_id.c_str(), size.error().message.c_str());
        fail_future(write.request_id, size.error());
        return;
    }
    write.row.size_bytes = *size;
    auto inserted = db_->insert_sampler(write.row);
    if (!inserted.ok()) {
        (void)store::remove_checkpoint(write.row.dir);
        fail_future(write.request_id, inserted.error());
        return;
    }
    auto session = db_->get_session(write.row.session_id);
    if (session.ok() && session->has_value() && (*session)->expired) {  // it ended while this was queued
        (void)db_->schedule_snapshot_expiry(now_seconds() + options_.snapshot_ttl_seconds);
    }
    registry_->keep_snapshot(write.row.sampler_id, write.snapshot);
    const double ms = std::chrono::duration<double, std::milli>(std::chrono::steady_clock::now() - started).count();
    LOG_INF("api", "snapshot %s written (%s, %.1f ms)", write.row.sampler_id.c_str(), mib(*size).c_str(), ms);
    futures_->complete(
        write.request_id,
        json{{"sampling_session_id", write.row.sampler_id}, {"type", "save_weights_for_sampler"}}.dump());
}

Result<void> TinkerRoutes::recover_snapshots() {
    auto scheduled = db_->schedule_snapshot_expiry(now_seconds() + options_.snapshot_ttl_seconds);
    if (!scheduled.ok()) {
        return scheduled.error();
    }
    auto rows = db_->snapshot_samplers();
    if (!rows.ok()) {
        return rows.error();
    }
    std::set<std::string> recorded;
    for (const auto & row : *rows) {
        std::error_code ec;
        if (!fs::exists(fs::path(row.dir) / "checkpoint_complete", ec)) {
            LOG_WRN("api", "snapshot %s has no files (removed by hand?); forgetting it", row.sampler_id.c_str());
            (void)db_->delete_sampler(row.sampler_id);
            continue;
        }
        recorded.insert(fs::path(row.dir).lexically_normal().string());
    }
    const fs::path root = fs::path(options_.data_dir) / "snapshots";
    std::error_code ec;
    size_t removed = 0;
    for (fs::directory_iterator it(root, ec), end; !ec && it != end; it.increment(ec)) {
        if (recorded.count(it->path().lexically_normal().string()) == 0) {
            std::error_code ignored;
            fs::remove_all(it->path(), ignored);
            ++removed;
        }
    }
    if (removed > 0) {
        LOG_WRN("api", "removed %zu unrecorded snapshot dir(s) (left by a crash while writing)", removed);
    }
    LOG_INF("api", "%zu sampler snapshot(s) on disk", recorded.size());
    return {};
}

// Row first, then files (as for checkpoints): a crash in between leaves an unrecorded directory, which
// the next start removes. A sampler adapter still loaded in an engine's LRU is dropped by the LRU.
void TinkerRoutes::expire_snapshots(double now) {
    auto expired = db_->expired_snapshots(now);
    if (!expired.ok()) {
        LOG_ERR("sweeper", "%s", expired.error().message.c_str());
        return;
    }
    for (const auto & row : *expired) {
        if (!db_->delete_sampler(row.sampler_id).ok()) {
            continue;
        }
        { registry_->forget_snapshot(row.sampler_id); }
        auto removed = store::remove_checkpoint(row.dir);
        if (!removed.ok()) {
            LOG_ERR("sweeper", "cannot delete snapshot %s: %s", row.dir.c_str(), removed.error().message.c_str());
            continue;
        }
        LOG_INF("sweeper", "deleted sampler snapshot %s (its session ended)", row.sampler_id.c_str());
    }
}

}  // namespace tinkerd::api
