// The sweeper: a background thread that expires sessions without a heartbeat (their models leave memory,
// their checkpoints stay, their sampler snapshots stay --snapshot-ttl-seconds more), deletes checkpoints
// whose TTL has passed and snapshots whose session has been over that long, prunes old finished futures and,
// on a shared database, fails the pending futures of front ends that have stopped.
#include <algorithm>

#include "api/event_streams.h"
#include "api/tinker_routes.h"
#include "common/log.h"

namespace tinkerd::api {

namespace {
constexpr double FUTURE_RETENTION_SECONDS = 24 * 3600.0;  // results stay pollable for a day
}

void TinkerRoutes::sweeper_loop() {
    std::unique_lock<std::mutex> lock(sweeper_mutex_);
    while (!stopping_) {
        sweeper_wake_.wait_for(lock, std::chrono::duration<double>(options_.sweep_interval_seconds));
        if (stopping_) {
            break;
        }
        lock.unlock();
        const double now = now_seconds();
        expire_sessions(now);
        expire_checkpoints(now);
        expire_snapshots(now);
        (void)db_->prune_futures(now - FUTURE_RETENTION_SECONDS);
        fail_orphaned_futures(now);
        if (recovery_pending_ && !recover_from_last_process().ok()) {
            LOG_ERR("api", "start-up recovery failed after the disk had room again");
        }
        disk_reserve_->restore_if_room();  // after a full disk was freed
        registry_->expire_archive_tokens(now);
        sequence_records_.expire(now);
        completion_queues_.forget_idle(std::chrono::hours(1));
        lock.lock();
    }
}

// On a shared database, requests pending in a front end that has stopped (killed, crashed) can never finish:
// they fail here, category server, as a single process's do at its restart; any front end answers them.
void TinkerRoutes::fail_orphaned_futures(double now) {
    if (!db_->shared()) {
        return;
    }
    auto failed = db_->fail_orphaned_futures("the front end running this request stopped before it finished", now);
    if (!failed.ok()) {
        LOG_ERR("sweeper", "%s", failed.error().message.c_str());
    } else if (*failed > 0) {
        LOG_WRN("sweeper", "%lld request(s) of a front end that stopped are now failed",
                static_cast<long long>(*failed));
    }
}

// A session is live while it heartbeats or its models receive requests. Activity seen only in memory
// reaches the database once the row is half a timeout old, so that another front end on a shared
// database (which does not see this one's memory) never ends a live session.
void TinkerRoutes::expire_sessions(double now) {
    const double timeout = options_.session_timeout_seconds;
    auto stale = db_->stale_sessions(now - timeout / 2);
    if (!stale.ok()) {
        LOG_ERR("sweeper", "%s", stale.error().message.c_str());
        return;
    }
    for (const auto & session : *stale) {
        const double last_seen = registry_->session_last_seen(session.session_id).value_or(0);
        if (last_seen > session.last_heartbeat) {
            (void)db_->touch_session(session.session_id, last_seen);
        }
        if (std::max(last_seen, session.last_heartbeat) <= now - timeout) {
            end_session(session.session_id, "expired (no heartbeat)");
        }
    }
}

// Marks the session expired, unloads its models (checkpoints stay) and schedules the deletion of its
// sampler snapshots.
void TinkerRoutes::end_session(const std::string & session_id, const std::string & why) {
    (void)db_->mark_session_expired(session_id);
    (void)db_->schedule_snapshot_expiry(now_seconds() + options_.snapshot_ttl_seconds);
    registry_->forget_session(session_id);
    sequence_records_.drop_session(session_id);
    const std::vector<RunPtr> runs =
        registry_->runs_where([&](const RunState & run) { return run.row.session_id == session_id; });
    for (const auto & run : runs) {
        registry_->unload_run(run, "session " + session_id + " " + why);
    }
    events_->wake({session_id});  // the sessions view and the runs list show it ended
    LOG_INF("api", "session %s %s; %zu model(s) unloaded, checkpoints kept", session_id.c_str(), why.c_str(),
            runs.size());
}

void TinkerRoutes::expire_checkpoints(double now) {
    auto expired = db_->expired_checkpoints(now);
    if (!expired.ok()) {
        LOG_ERR("sweeper", "%s", expired.error().message.c_str());
        return;
    }
    for (const auto & c : *expired) {
        // The row goes first: a crash in between leaves files without a row (overwritten by the next
        // save of that name), never a listed checkpoint without files.
        if (!db_->delete_checkpoint(c.run_id, c.checkpoint_id).ok()) {
            continue;
        }
        auto removed = store::remove_checkpoint(c.dir);
        if (!removed.ok()) {
            LOG_ERR("sweeper", "cannot delete files of expired checkpoint %s: %s", c.dir.c_str(),
                    removed.error().message.c_str());
            continue;
        }
        LOG_INF("sweeper", "deleted expired checkpoint tinker://%s/%s", c.run_id.c_str(), c.checkpoint_id.c_str());
    }
}

}  // namespace tinkerd::api
