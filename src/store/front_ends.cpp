// Database: a shared database's front-end heartbeat. One background thread per Database refreshes this
// front end's front_ends row every heartbeat_seconds (reconnecting and retaking lost locks on the way, see
// pg_connection.cpp); the destructor stops it and deletes the row, so that others need not wait out the
// grace period before failing what this front end left pending.
#include <chrono>

#include "common/log.h"
#include "store/database.h"
#include "store/database_impl.h"

namespace tinkerd::store {

Result<void> Database::heartbeat() {
    std::lock_guard<std::mutex> lock(impl_->mutex);
    return impl_->conn->heartbeat();
}

// A failed heartbeat (the server is down) is logged once, and its recovery once.
void Database::start_heartbeat(double seconds) {
    impl_->heartbeat_thread = std::thread([this, seconds] {
        bool failing = false;
        std::unique_lock<std::mutex> lock(impl_->heartbeat_mutex);
        while (!impl_->heartbeat_wait_for(lock, seconds)) {
            lock.unlock();
            Result<void> beat = heartbeat();
            if (!beat.ok() && !failing) {
                LOG_WRN("store", "front-end heartbeat failed (retrying every %.1f s): %s", seconds,
                        beat.error().message.c_str());
            } else if (beat.ok() && failing) {
                LOG_INF("store", "front-end heartbeat restored");
            }
            failing = !beat.ok();
            lock.lock();
        }
    });
}

void Database::stop_heartbeat() {
    if (!impl_->heartbeat_thread.joinable()) {
        return;
    }
    {
        std::lock_guard<std::mutex> lock(impl_->heartbeat_mutex);
        impl_->heartbeat_stopping = true;
    }
    impl_->heartbeat_wake.notify_all();
    impl_->heartbeat_thread.join();
    std::lock_guard<std::mutex> lock(impl_->mutex);
    impl_->conn->leave();
}

}  // namespace tinkerd::store
