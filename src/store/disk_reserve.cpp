// The disk reserve, free-space queries, the SQLITE_FULL hook and start-up cleanup of interrupted
// checkpoint writes (see disk_reserve.h).
#include "store/disk_reserve.h"

#include <fcntl.h>
#include <filesystem>
#include <sqlite3.h>
#include <sys/statvfs.h>
#include <unistd.h>

#include "common/log.h"

namespace tinkerd::store {

namespace fs = std::filesystem;

namespace {

std::function<bool()> & disk_full_handler() {
    static std::function<bool()> handler;
    return handler;
}

bool is_interrupted_write(const std::string & name) {
    return name.find(".tmp-") != std::string::npos || name.find(".old-") != std::string::npos;
}

}  // namespace

uint64_t free_disk_bytes(const std::string & dir) {
    struct statvfs st {};
    if (statvfs(dir.c_str(), &st) != 0) {
        return 0;
    }
    return static_cast<uint64_t>(st.f_bavail) * st.f_frsize;
}

bool DiskReserve::restore_if_room() {
    std::lock_guard<std::mutex> lock(mutex_);
    std::error_code ec;
    if (bytes_ == 0 || fs::exists(path_, ec)) {
        return bytes_ > 0;
    }
    const fs::path dir = fs::path(path_).parent_path();
    if (free_disk_bytes(dir.string()) < 2 * bytes_) {
        return false;
    }
    const int fd = ::open(path_.c_str(), O_CREAT | O_WRONLY | O_CLOEXEC, 0600);
    if (fd < 0) {
        return false;
    }
    const bool ok = posix_fallocate(fd, 0, static_cast<off_t>(bytes_)) == 0 && ::fsync(fd) == 0;
    ::close(fd);
    if (!ok) {
        fs::remove(path_, ec);
        return false;
    }
    return true;
}

bool DiskReserve::release() {
    std::lock_guard<std::mutex> lock(mutex_);
    std::error_code ec;
    const bool removed = fs::remove(path_, ec);
    if (removed) {
        LOG_WRN("store",
                "disk full: released the %llu MiB reserve so the database stays writable; delete "
                "checkpoints or runs to free space",
                static_cast<unsigned long long>(bytes_ >> 20));
    }
    return removed;
}

bool DiskReserve::held() const {
    std::lock_guard<std::mutex> lock(mutex_);
    std::error_code ec;
    return fs::exists(path_, ec);
}

void set_disk_full_handler(std::function<bool()> handler) {
    disk_full_handler() = std::move(handler);
}

bool handle_disk_full() {
    const auto & handler = disk_full_handler();
    return handler ? handler() : false;
}

bool is_disk_full(const Error & error) {
    return error.message.find(sqlite3_errstr(SQLITE_FULL)) != std::string::npos;
}

int remove_interrupted_writes(const std::string & data_dir) {
    std::error_code ec;
    int removed = 0;
    const fs::path runs = fs::path(data_dir) / "runs";
    for (fs::recursive_directory_iterator it(runs, ec), end; !ec && it != end; it.increment(ec)) {
        if (it.depth() > 2 || !it->is_directory(ec)) {
            continue;
        }
        if (is_interrupted_write(it->path().filename().string())) {
            std::error_code ignored;
            fs::remove_all(it->path(), ignored);
            it.disable_recursion_pending();
            ++removed;
        }
    }
    return removed;
}

}  // namespace tinkerd::store
