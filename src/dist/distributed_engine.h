// DistributedEngine: the Engine of rank 0 of a data-parallel group, a decorator over its local engine.
// Training calls are replayed on every rank (forward_backward sharded by tokens and its gradients
// all-reduced, step.h; optim_step on every rank over the same gradients: a replicated optimizer, since
// LoRA moments are small next to the base model every rank holds anyway). An adapter reaches the other
// ranks on its first forward_backward (its weights and Adam state, exported and imported), so sampler
// adapters never leave rank 0; load_weights and removal drop the replicas. Sampling, export and
// checkpoints stay on rank 0. A failed collective fails its op (category server); rank 0 then trains
// alone while its GroupKeeper forms the next generation of the group, which is swapped in between two ops
// (the followers are fresh: adapters are re-sent on their next forward_backward, with any gradients
// accumulated meanwhile). run_follower is the loop of every other rank within one generation.
#pragma once

#include <memory>
#include <set>

#include "dist/codec.h"
#include "dist/group_keeper.h"
#include "engine/data_parallel_status.h"
#include "engine/engine.h"

namespace tinkerd::dist {

class DistributedEngine final : public engine::Engine, public engine::DataParallelReporter {
  public:
    // `first`: generation 0 of the group under options.prefix ("model<i>"), formed by lead_generation.
    DistributedEngine(std::unique_ptr<engine::Engine> local, std::shared_ptr<GroupStore> store,
                      const GroupOptions & options, std::unique_ptr<DataParallelGroup> first);
    ~DistributedEngine() override;  // tells the other ranks to stop

    const model::ModelConfig & config() const override { return local_->config(); }
    std::string compute_dtype_name() const override { return local_->compute_dtype_name(); }
    Result<engine::AdapterId> create_adapter(const engine::LoraSpec & spec) override;
    Result<void> remove_adapter(engine::AdapterId id) override;
    Result<engine::LoraSpec> adapter_spec(engine::AdapterId id) const override { return local_->adapter_spec(id); }
    std::vector<Result<engine::ForwardBackwardOutput>> forward_backward(
        const std::vector<engine::ForwardBackwardInput> & inputs, bool backward) override;
    Result<engine::OptimStepOutput> optim_step(engine::AdapterId id, const engine::AdamParams & params) override;
    Result<std::map<std::string, engine::HostTensor>> export_adapter(engine::AdapterId id,
                                                                     bool with_optimizer) const override;
    Result<void> import_adapter(engine::AdapterId id, const std::map<std::string, engine::HostTensor> & tensors,
                                bool with_optimizer) override;
    Result<std::map<std::string, engine::HostTensor>> export_gradients(engine::AdapterId id) const override;
    Result<void> check_forward_backward_input(const engine::ForwardBackwardInput & input, bool backward) override;
    Result<void> visit_gradients(engine::AdapterId id,
                                 const std::function<void(float * data, int64_t count)> & visit) override;
    Result<engine::SampleHandle> sample_submit(engine::SampleRequest request) override;
    std::vector<engine::FinishedSample> sample_step() override { return local_->sample_step(); }
    bool sample_cancel(engine::SampleHandle handle) override { return local_->sample_cancel(handle); }
    engine::SampleStats sample_stats() const override { return local_->sample_stats(); }
    Result<std::vector<float>> last_logits(engine::AdapterId id, const std::vector<int64_t> & tokens) override;
    engine::DataParallelStatus data_parallel_status() const override;  // DataParallelReporter

  private:
    // The lease's group, or null while rank 0 trains alone (rank 0 holds every adapter's whole state: a
    // failed step restored its gradients). A new generation's followers hold no adapter yet.
    DataParallelGroup * group_of(const GroupKeeper::Lease & lease);
    Result<void> replicate(DataParallelGroup & group, engine::AdapterId id);
    void drop_replica(engine::AdapterId id);

    std::unique_ptr<engine::Engine> local_;
    std::unique_ptr<GroupKeeper> keeper_;
    std::set<engine::AdapterId> replicated_;  // adapters the other ranks of replicated_generation_ hold
    int64_t replicated_generation_ = 0;
};

// The loop of a rank > 0 within one generation: runs rank 0's commands on `local` until STOP (ok) or the
// group fails (the error: rank 0 went away or gave the group up, or a collective timed out).
Result<void> run_follower(engine::Engine & local, DataParallelGroup & group);

}  // namespace tinkerd::dist
