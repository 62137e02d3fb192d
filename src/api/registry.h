// Registry: what the api knows about in memory, behind one mutex: the served base models' records, the
// training runs loaded in this process, the memory cache of sampler snapshots, sessions' last activity
// and one-time archive tokens; plus the tenant-checked database lookups every route shares (another
// tenant's run, checkpoint or session is the same NOT_FOUND as a missing one).
#pragma once

#include <atomic>
#include <functional>
#include <map>
#include <memory>
#include <mutex>
#include <optional>
#include <string>
#include <vector>

#include "api/json_util.h"
#include "chat_template/model_template.h"
#include "engine/engine.h"
#include "scheduler/worker.h"
#include "store/database.h"
#include "tokenizer/tokenizer.h"
#include "vision/preprocess.h"

namespace tinkerd::api {

// A base model served under a name, with the worker that owns its engine (one loop, scheduler/worker.h).
struct ServedModel {
    std::string name;
    engine::Engine * engine = nullptr;
    const tokenizer::Tokenizer * tokenizer = nullptr;
    chat_template::ModelChatTemplate chat;
    std::shared_ptr<const vision::ProcessorConfig> vision;  // null: a text-only model (image chunks refused)
    std::unique_ptr<scheduler::EngineWorker> worker;
    // Sampling replicas (--sampling-replicas): sample jobs that do not need a live training adapter go to
    // the healthy one with the fewest requests in flight; rank 0's worker keeps training.
    struct SamplingReplica {
        std::unique_ptr<scheduler::EngineWorker> worker;
        std::function<bool()> healthy;
        std::function<int64_t()> failures;
        std::atomic<int64_t> in_flight{0};
    };
    std::vector<std::unique_ptr<SamplingReplica>> replicas;
};

// A training run (a LoRA adapter) known to this process.
struct RunState {
    store::TrainingRunRow row;
    ServedModel * model = nullptr;
    engine::LoraSpec spec;
    std::atomic<engine::AdapterId> adapter{-1};  // set on the engine thread once created
    std::atomic<bool> ready{false};              // adapter created (or loaded) and accepting ops
    std::atomic<bool> loaded{true};              // false once unloaded
    std::string create_request_id;
    // Optimizer steps taken (the metric points' `step`); a checkpoint loaded with its optimizer state
    // sets it to the checkpoint's step (mutable: set through the const run an import sees).
    mutable std::atomic<int64_t> optim_steps{0};
};
using RunPtr = std::shared_ptr<RunState>;

// A frozen copy of an adapter's weights for sampling (save_weights_for_sampler without a name), cached in
// memory; its files in DATA_DIR/snapshots/<sampler_id> are what lasts (snapshots.cpp).
struct SamplerSnapshot {
    std::string run_id;
    double created_at = 0;
    int64_t bytes = 0;  // of the tensors
    std::string base_model;
    engine::LoraSpec spec;
    std::map<std::string, engine::HostTensor> tensors;
};

class Registry {
  public:
    static constexpr size_t MAX_CACHED_SNAPSHOTS_PER_RUN = 8;
    static constexpr int64_t MAX_CACHED_SNAPSHOT_BYTES = 1LL << 30;  // all runs together; the newest stays

    explicit Registry(store::Database & db) : db_(db) {}

    // Served base models: added at start-up, fixed afterwards (read without the lock).
    ServedModel & add_model(std::unique_ptr<ServedModel> model);
    ServedModel * find_model(const std::string & name) const;
    const std::vector<std::unique_ptr<ServedModel>> & models() const { return models_; }

    // Database rows owned by `tenant` (or published, with allow_public); NOT_FOUND otherwise.
    Result<store::TrainingRunRow> find_run_row(const std::string & tenant, const std::string & run_id,
                                               bool allow_public);
    Result<store::CheckpointRow> find_checkpoint(const std::string & tenant, const TinkerPath & path,
                                                 bool allow_public);
    Result<store::SessionRow> find_session(const std::string & tenant, const std::string & session_id);

    // Runs loaded in this process.
    RunPtr register_run(store::TrainingRunRow row, ServedModel * model, const engine::LoraSpec & spec,
                        std::string create_request_id);
    RunPtr find_run(const std::string & run_id) const;  // any tenant's; nullptr if not in memory
    RunPtr find_tenant_run(const std::string & tenant, const std::string & run_id) const;
    std::vector<RunPtr> runs_where(const std::function<bool(const RunState &)> & keep) const;
    // Closes the run's queue (queued ops cancelled with `reason`), removes its adapter on the engine
    // thread, drops its snapshots' memory copies and marks it unloaded in the database. Idempotent.
    void unload_run(const RunPtr & run, const std::string & reason);

    // Sampler snapshots' memory cache: a run's MAX_CACHED_SNAPSHOTS_PER_RUN newest, within a byte cap.
    void keep_snapshot(const std::string & sampler_id, std::shared_ptr<SamplerSnapshot> snapshot);
    std::shared_ptr<SamplerSnapshot> find_snapshot(const std::string & sampler_id) const;
    void forget_snapshot(const std::string & sampler_id);
    size_t cached_snapshots() const;
    size_t cached_snapshots(const std::string & base_model) const;

    // Sessions' last activity (a request on one of their models counts as a heartbeat).
    void note_session_activity(const std::string & session_id);
    std::optional<double> session_last_seen(const std::string & session_id) const;
    void forget_session(const std::string & session_id);

    // One-time archive download tokens.
    void add_archive_token(const std::string & token, const std::string & dir, double expires_at);
    std::optional<std::string> take_archive_token(const std::string & token, double now);  // its dir
    void expire_archive_tokens(double now);

  private:
    struct ArchiveToken {
        std::string dir;
        double expires_at = 0;
    };
    store::Database & db_;
    std::vector<std::unique_ptr<ServedModel>> models_;
    mutable std::mutex mutex_;  // guards the maps below
    std::map<std::string, RunPtr> runs_;
    std::map<std::string, std::shared_ptr<SamplerSnapshot>> snapshots_;
    std::map<std::string, double> session_last_seen_;
    std::map<std::string, ArchiveToken> archive_tokens_;
};

}  // namespace tinkerd::api
