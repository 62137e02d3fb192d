// Sampling replicas (issue 15 §2): processes that hold a base model for sampling only, so that sampling
// runs beside training instead of taking turns with it on rank 0's engine thread. On rank 0 each replica
// is a SamplingReplicaEngine, an engine::Engine whose sampling and adapter calls are request/answer pairs
// over a two-rank process group (rank 0, the replica); an EngineWorker drives it like any engine, its
// adapter LRU sending a sampler's weights to the replica when first needed. run_sampling_replica is the
// replica's loop. Training calls are refused: replicas never train.
#pragma once

#include <atomic>
#include <functional>
#include <map>
#include <memory>
#include <mutex>
#include <set>
#include <string>
#include <vector>

#include "dist/process_group.h"
#include "engine/engine.h"

namespace tinkerd::dist {

// Commands rank 0 sends a replica; every one but STOP is answered (gather_to_root).
enum class ReplicaCommand : int64_t {
    CREATE_ADAPTER = 1,
    IMPORT_ADAPTER = 2,
    REMOVE_ADAPTER = 3,
    SUBMIT = 4,
    STEP = 5,
    CANCEL = 6,
    STOP = 7,
};

// Adapter weights sent to a replica since start (the adapter sync cost).
struct ReplicaSyncStats {
    int64_t adapters = 0;
    int64_t bytes = 0;
    double seconds = 0;
    double last_seconds = 0;
};

class SamplingReplicaEngine final : public engine::Engine {
  public:
    // `base` is rank 0's engine of the same model (its config); `index` names the replica in logs (1-based).
    SamplingReplicaEngine(const engine::Engine & base, std::unique_ptr<DataParallelGroup> pair, int index);
    ~SamplingReplicaEngine() override;  // tells the replica to stop

    const model::ModelConfig & config() const override { return base_.config(); }
    std::string compute_dtype_name() const override { return base_.compute_dtype_name(); }
    Result<engine::AdapterId> create_adapter(const engine::LoraSpec & spec) override;
    Result<void> remove_adapter(engine::AdapterId id) override;
    Result<engine::LoraSpec> adapter_spec(engine::AdapterId id) const override;
    std::vector<Result<engine::ForwardBackwardOutput>> forward_backward(
        const std::vector<engine::ForwardBackwardInput> & inputs, bool backward) override;
    Result<engine::OptimStepOutput> optim_step(engine::AdapterId id, const engine::AdamParams & params) override;
    Result<std::map<std::string, engine::HostTensor>> export_adapter(engine::AdapterId id,
                                                                     bool with_optimizer) const override;
    Result<void> import_adapter(engine::AdapterId id, const std::map<std::string, engine::HostTensor> & tensors,
                                bool with_optimizer) override;
    Result<std::map<std::string, engine::HostTensor>> export_gradients(engine::AdapterId id) const override;
    Result<engine::SampleHandle> sample_submit(engine::SampleRequest request) override;
    std::vector<engine::FinishedSample> sample_step() override;
    bool sample_cancel(engine::SampleHandle handle) override;
    engine::SampleStats sample_stats() const override;
    Result<std::vector<float>> last_logits(engine::AdapterId id, const std::vector<int64_t> & tokens) override;
    int64_t adapters_epoch() override;

    // False once a call to the replica failed (it died or timed out) until a restarted replica's group was
    // offered: route new requests elsewhere meanwhile.
    bool healthy() const { return healthy_.load() || has_offer_.load(); }
    // Any thread: the group of a restarted replica process. The engine thread switches to it at its next
    // call once nothing runs on the old one; the old adapters are gone (adapters_epoch changes).
    void offer_group(std::unique_ptr<DataParallelGroup> pair);
    int index() const { return index_; }
    // Calls that failed to reach the replica since start (a request failed by one of them re-runs elsewhere).
    int64_t failures() const { return failures_.load(); }
    ReplicaSyncStats sync_stats() const;

  private:
    // Sends one command and returns the replica's answer; a failure marks the replica unhealthy.
    Result<std::vector<uint8_t>> call(ReplicaCommand command, std::vector<uint8_t> payload);
    Result<void> call_status(ReplicaCommand command, std::vector<uint8_t> payload);
    void switch_to_offered_group();

    const engine::Engine & base_;
    std::unique_ptr<DataParallelGroup> pair_;
    const int index_;
    std::atomic<bool> healthy_{true};
    std::atomic<int64_t> failures_{0};
    int64_t epoch_ = 0;                                    // adapters_epoch: one more per switch of group
    std::map<engine::AdapterId, engine::LoraSpec> specs_;  // adapters the replica holds (its ids)
    std::set<engine::SampleHandle> live_;                  // submitted, not finished or cancelled yet
    std::mutex offer_mu_;
    std::unique_ptr<DataParallelGroup> offered_;  // a restarted replica's group, not switched to yet
    std::atomic<bool> has_offer_{false};
    // The streaming callbacks of running requests, by the replica's handle.
    std::map<engine::SampleHandle, std::function<void(int64_t, int64_t, float, const engine::TopLogprobs &)>> on_token_;
    mutable std::mutex stats_mu_;  // sample_stats / sync_stats are read from other threads
    engine::SampleStats stats_;
    ReplicaSyncStats sync_;
};

// Rebuilds a request's stop_check from its stop strings with the replica's tokenizer (nullptr: none).
using StopCheckFactory =
    std::function<Result<std::function<bool(const std::vector<int64_t> &)>>(const std::vector<std::string> & stops)>;

// The loop of a replica process: answers rank 0's commands with `local` until STOP (ok) or the pair
// group fails (rank 0 went away).
Result<void> run_sampling_replica(engine::Engine & local, DataParallelGroup & pair, const StopCheckFactory & stops);

}  // namespace tinkerd::dist
