// StoreWatchdog (store_watchdog.h): the calls in flight and the thread that checks their age.
#include "dist/store_watchdog.h"

#include <unistd.h>

#include "common/log.h"

namespace tinkerd::dist {

StoreWatchdog::StoreWatchdog(std::chrono::milliseconds limit, std::string what)
    : limit_(limit), what_(std::move(what)) {
    if (limit_.count() > 0) {
        thread_ = std::thread([this] { run(); });
    }
}

StoreWatchdog::~StoreWatchdog() {
    {
        std::lock_guard lock(mutex_);
        stop_ = true;
    }
    wake_.notify_all();
    if (thread_.joinable()) {
        thread_.join();
    }
}

StoreWatchdog::Call::Call(StoreWatchdog * dog) : dog_(dog) {
    if (dog_) {
        std::lock_guard lock(dog_->mutex_);
        id_ = dog_->next_id_++;
        dog_->calls_[id_] = std::chrono::steady_clock::now();
    }
}

StoreWatchdog::Call::~Call() {
    if (dog_) {
        std::lock_guard lock(dog_->mutex_);
        dog_->calls_.erase(id_);
    }
}

void StoreWatchdog::run() {
    std::unique_lock lock(mutex_);
    while (!stop_) {
        wake_.wait_for(lock, std::chrono::milliseconds(250));
        const auto now = std::chrono::steady_clock::now();
        for (const auto & [id, started] : calls_) {
            if (now - started > limit_) {
                LOG_ERR("dist", "rank 0 is gone: its store (%s) did not answer for %.0f s; exiting", what_.c_str(),
                        std::chrono::duration<double>(now - started).count());
                _exit(1);
            }
        }
    }
}

}  // namespace tinkerd::dist
