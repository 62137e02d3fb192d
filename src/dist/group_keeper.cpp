// GroupKeeper (group_keeper.h): the lease, and the background thread that gives up, re-forms and keeps
// alive one model's group.
#include "dist/group_keeper.h"

#include "common/log.h"
#include "dist/codec.h"

namespace tinkerd::dist {

namespace {
constexpr std::chrono::milliseconds TICK{250};
}

GroupKeeper::GroupKeeper(std::shared_ptr<GroupStore> store, GroupOptions options,
                         std::unique_ptr<DataParallelGroup> first)
    : store_(std::move(store)), options_(std::move(options)), group_(std::move(first)) {
    ranks_ = group_->size();
    last_used_ = std::chrono::steady_clock::now();
    thread_ = std::thread([this] { run(); });
}

GroupKeeper::~GroupKeeper() {
    stop_ = true;
    wake();
    thread_.join();
    if (group_ && !group_->broken()) {
        const ReduceStats & stats = group_->reduce_stats();
        LOG_INF("dist", "%s: gradient all-reduces (generation %lld): %lld, %.1f MiB, %.3f s in all",
                options_.prefix.c_str(), static_cast<long long>(generation_.load()),
                static_cast<long long>(stats.calls), static_cast<double>(stats.bytes) / (1 << 20), stats.seconds);
        (void)group_->send_command(static_cast<int64_t>(Command::STOP), {});
    }
    publish_stopped(*store_, options_.prefix);
}

GroupKeeper::Lease::Lease(GroupKeeper & keeper) : keeper_(keeper), lock_(keeper.op_mutex_) {
    keeper_.last_used_ = std::chrono::steady_clock::now();
}

GroupKeeper::Lease::~Lease() {
    const bool broken = keeper_.group_ && keeper_.group_->broken();
    lock_.unlock();
    if (broken) {
        keeper_.give_up_ = true;
        keeper_.wake();  // give it up now: the followers still waiting in it fail at once
    }
}

DataParallelGroup * GroupKeeper::Lease::group() const {
    return keeper_.group_ && !keeper_.group_->broken() ? keeper_.group_.get() : nullptr;
}

void GroupKeeper::wake() {
    std::lock_guard lock(wake_mutex_);
    wake_.notify_all();
}

void GroupKeeper::run() {
    while (!stop_) {
        {
            std::unique_lock lock(wake_mutex_);
            wake_.wait_for(lock, TICK);
        }
        if (stop_) {
            break;
        }
        if (give_up_) {
            give_up();
        }
        if (alone_) {
            re_form();
        } else {
            keep_alive();
        }
    }
}

void GroupKeeper::give_up() {
    std::lock_guard lock(op_mutex_);  // after the op that found it broken
    give_up_ = false;
    if (!group_ || !group_->broken()) {
        return;
    }
    group_.reset();  // closes its connections
    ranks_ = 1;
    alone_ = true;
    LOG_WRN("dist",
            "%s: the data-parallel group (generation %lld) failed; training goes on in rank 0 alone while "
            "the group re-forms",
            options_.prefix.c_str(), static_cast<long long>(generation_.load()));
}

// Tries generation after generation (each waits options_.timeout for the roll) until every rank answers.
void GroupKeeper::re_form() {
    int64_t generation = generation_ + 1;
    while (!stop_) {
        auto group = lead_generation(*store_, options_, generation, stop_);
        if (group.ok()) {
            std::lock_guard lock(op_mutex_);  // between two ops
            group_ = std::move(group).value();
            generation_ = generation;
            ranks_ = group_->size();
            alone_ = false;
            last_used_ = std::chrono::steady_clock::now();
            LOG_INF("dist", "%s: data-parallel group re-formed: %d ranks (generation %lld)", options_.prefix.c_str(),
                    group_->size(), static_cast<long long>(generation));
            return;
        }
        if (stop_) {
            return;
        }
        LOG_WRN("dist", "%s: generation %lld did not form: %s; trying generation %lld", options_.prefix.c_str(),
                static_cast<long long>(generation), group.error().message.c_str(),
                static_cast<long long>(generation + 1));
        if (group.error().kind != ErrorKind::UNAVAILABLE) {  // not a timed-out roll: do not spin
            std::unique_lock lock(wake_mutex_);
            wake_.wait_for(lock, options_.timeout / 10);
        }
        generation += 1;
    }
}

void GroupKeeper::keep_alive() {
    if (options_.keepalive.count() <= 0) {
        return;
    }
    std::unique_lock lock(op_mutex_, std::try_to_lock);
    if (!lock || !group_ || group_->broken() || std::chrono::steady_clock::now() - last_used_ < options_.keepalive) {
        return;
    }
    last_used_ = std::chrono::steady_clock::now();
    auto sent = group_->send_command(static_cast<int64_t>(Command::KEEPALIVE), {});
    if (!sent.ok()) {
        LOG_WRN("dist", "%s: keepalive: %s", options_.prefix.c_str(), sent.error().message.c_str());
        give_up_ = true;
        wake();
    }
}

}  // namespace tinkerd::dist
