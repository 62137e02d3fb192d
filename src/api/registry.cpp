// Registry: tenant-checked lookups of runs, checkpoints and sessions in the database, the in-memory maps
// (loaded runs, the snapshot cache and its eviction order, sessions' last activity, archive tokens) and
// unloading a run.
#include "api/registry.h"

#include <algorithm>

#include "common/log.h"

namespace tinkerd::api {

ServedModel & Registry::add_model(std::unique_ptr<ServedModel> model) {
    models_.push_back(std::move(model));
    return *models_.back();
}

ServedModel * Registry::find_model(const std::string & name) const {
    for (const auto & model : models_) {
        if (model->name == name) {
            return model.get();
        }
    }
    return nullptr;
}

Result<store::SessionRow> Registry::find_session(const std::string & tenant, const std::string & session_id) {
    auto row = db_.get_session(session_id);
    if (!row.ok()) {
        return row.error();
    }
    if (!row->has_value() || (*row)->tenant != tenant) {
        return not_found("session '" + session_id + "' not found");
    }
    return **row;
}

Result<store::TrainingRunRow> Registry::find_run_row(const std::string & tenant, const std::string & run_id,
                                                     bool allow_public) {
    auto row = db_.get_run(run_id);
    if (!row.ok()) {
        return row.error();
    }
    if (!row->has_value()) {
        return not_found("training run '" + run_id + "' not found");
    }
    if ((*row)->tenant == tenant) {
        return **row;
    }
    if (allow_public) {
        auto checkpoints = db_.list_run_checkpoints(run_id);
        if (checkpoints.ok()) {
            for (const auto & c : *checkpoints) {
                if (c.is_public) {
                    return **row;
                }
            }
        }
    }
    return not_found("training run '" + run_id + "' not found");
}

Result<store::CheckpointRow> Registry::find_checkpoint(const std::string & tenant, const TinkerPath & path,
                                                       bool allow_public) {
    auto row = db_.get_checkpoint(path.run_id, path.checkpoint_id());
    if (!row.ok()) {
        return row.error();
    }
    if (!row->has_value() || ((*row)->tenant != tenant && !(allow_public && (*row)->is_public))) {
        return not_found("checkpoint '" + path.str() + "' not found");
    }
    return **row;
}

RunPtr Registry::register_run(store::TrainingRunRow row, ServedModel * model, const engine::LoraSpec & spec,
                              std::string create_request_id) {
    auto run = std::make_shared<RunState>();
    run->row = std::move(row);
    run->model = model;
    run->spec = spec;
    run->create_request_id = std::move(create_request_id);  // set before the run is visible to resends
    std::lock_guard<std::mutex> lock(mutex_);
    runs_[run->row.run_id] = run;
    return run;
}

RunPtr Registry::find_run(const std::string & run_id) const {
    std::lock_guard<std::mutex> lock(mutex_);
    auto it = runs_.find(run_id);
    return it == runs_.end() ? nullptr : it->second;
}

RunPtr Registry::find_tenant_run(const std::string & tenant, const std::string & run_id) const {
    RunPtr run = find_run(run_id);
    return run && run->row.tenant == tenant ? run : nullptr;
}

std::vector<RunPtr> Registry::runs_where(const std::function<bool(const RunState &)> & keep) const {
    std::vector<RunPtr> runs;
    std::lock_guard<std::mutex> lock(mutex_);
    for (const auto & [id, run] : runs_) {
        if (keep(*run)) {
            runs.push_back(run);
        }
    }
    return runs;
}

void Registry::unload_run(const RunPtr & run, const std::string & reason) {
    if (!run->loaded.exchange(false)) {
        return;
    }
    {  // its snapshots' memory copies (their files stay)
        std::lock_guard<std::mutex> lock(mutex_);
        for (auto it = snapshots_.begin(); it != snapshots_.end();) {
            it = it->second->run_id == run->row.run_id ? snapshots_.erase(it) : std::next(it);
        }
    }
    run->ready = false;
    run->model->worker->close_run(run->row.run_id, reason);
    const engine::AdapterId adapter = run->adapter.load();
    if (adapter > 0) {
        run->model->worker->post([adapter](engine::Engine & engine) { (void)engine.remove_adapter(adapter); });
    }
    (void)db_.mark_run_unloaded(run->row.run_id);
    LOG_INF("api", "unloaded model %s (%s)", run->row.run_id.c_str(), reason.c_str());
}

void Registry::keep_snapshot(const std::string & sampler_id, std::shared_ptr<SamplerSnapshot> snapshot) {
    snapshot->created_at = now_seconds();
    std::lock_guard<std::mutex> lock(mutex_);
    snapshots_[sampler_id] = std::move(snapshot);
    // (created_at, id), newest first: a run keeps its newest few, everything together stays under the cap.
    std::vector<std::pair<double, std::string>> order;
    for (const auto & [id, s] : snapshots_) {
        order.emplace_back(s->created_at, id);
    }
    std::sort(order.rbegin(), order.rend());
    std::map<std::string, size_t> per_run;
    int64_t total = 0;
    for (const auto & [created_at, id] : order) {
        const SamplerSnapshot & s = *snapshots_[id];
        total += s.bytes;
        const bool keep = ++per_run[s.run_id] <= MAX_CACHED_SNAPSHOTS_PER_RUN &&
                          (id == sampler_id || total <= MAX_CACHED_SNAPSHOT_BYTES);
        if (!keep) {
            total -= s.bytes;
            snapshots_.erase(id);  // still on disk
        }
    }
}

std::shared_ptr<SamplerSnapshot> Registry::find_snapshot(const std::string & sampler_id) const {
    std::lock_guard<std::mutex> lock(mutex_);
    auto it = snapshots_.find(sampler_id);
    return it == snapshots_.end() ? nullptr : it->second;
}

void Registry::forget_snapshot(const std::string & sampler_id) {
    std::lock_guard<std::mutex> lock(mutex_);
    snapshots_.erase(sampler_id);
}

size_t Registry::cached_snapshots() const {
    std::lock_guard<std::mutex> lock(mutex_);
    return snapshots_.size();
}

size_t Registry::cached_snapshots(const std::string & base_model) const {
    std::lock_guard<std::mutex> lock(mutex_);
    return static_cast<size_t>(std::count_if(snapshots_.begin(), snapshots_.end(),
                                             [&](const auto & kv) { return kv.second->base_model == base_model; }));
}

void Registry::note_session_activity(const std::string & session_id) {
    std::lock_guard<std::mutex> lock(mutex_);
    session_last_seen_[session_id] = now_seconds();
}

std::optional<double> Registry::session_last_seen(const std::string & session_id) const {
    std::lock_guard<std::mutex> lock(mutex_);
    auto it = session_last_seen_.find(session_id);
    return it == session_last_seen_.end() ? std::nullopt : std::optional<double>(it->second);
}

void Registry::forget_session(const std::string & session_id) {
    std::lock_guard<std::mutex> lock(mutex_);
    session_last_seen_.erase(session_id);
}

void Registry::add_archive_token(const std::string & token, const std::string & dir, double expires_at) {
    std::lock_guard<std::mutex> lock(mutex_);
    archive_tokens_[token] = {dir, expires_at};
}

std::optional<std::string> Registry::take_archive_token(const std::string & token, double now) {
    std::lock_guard<std::mutex> lock(mutex_);
    auto it = archive_tokens_.find(token);
    if (it == archive_tokens_.end() || it->second.expires_at < now) {
        return std::nullopt;
    }
    std::string dir = std::move(it->second.dir);
    archive_tokens_.erase(it);
    return dir;
}

void Registry::expire_archive_tokens(double now) {
    std::lock_guard<std::mutex> lock(mutex_);
    for (auto it = archive_tokens_.begin(); it != archive_tokens_.end();) {
        it = it->second.expires_at < now ? archive_tokens_.erase(it) : std::next(it);
    }
}

}  // namespace tinkerd::api
