// EngineImpl: the libtorch implementation behind engine.h. Split over engine.cpp (loading,
// adapters, optimizer, import/export) and forward_backward.cpp (packing, losses, gradients).
#pragma once

#include <array>
#include <map>
#include <memory>

#include <torch/torch.h>

#include "engine/engine.h"
#include "engine/losses.h"
#include "engine/sample_loop.h"
#include "engine/transformer.h"

namespace tinkerd::engine {

class EngineImpl final : public Engine {
  public:
    EngineImpl(std::unique_ptr<Transformer> transformer, int64_t kv_cache_bytes)
        : transformer_(std::move(transformer)), sampling_(*transformer_, kv_cache_bytes) {}

    const model::ModelConfig & config() const override { return transformer_->config(); }
    // --sample-activations int8 (EngineOptions::sample_int8_activations); logs what it does for this base.
    void set_sample_int8_activations(bool on);
    std::string compute_dtype_name() const override;
    Result<AdapterId> create_adapter(const LoraSpec & spec) override;
    Result<void> remove_adapter(AdapterId id) override;
    Result<LoraSpec> adapter_spec(AdapterId id) const override;
    std::vector<Result<ForwardBackwardOutput>> forward_backward(const std::vector<ForwardBackwardInput> & inputs,
                                                                bool backward) override;
    Result<OptimStepOutput> optim_step(AdapterId id, const AdamParams & params) override;
    Result<std::map<std::string, HostTensor>> export_adapter(AdapterId id, bool with_optimizer) const override;
    Result<void> import_adapter(AdapterId id, const std::map<std::string, HostTensor> & tensors,
                                bool with_optimizer) override;
    Result<std::map<std::string, HostTensor>> export_gradients(AdapterId id) const override;
    Result<void> check_forward_backward_input(const ForwardBackwardInput & input, bool backward) override;
    Result<void> visit_gradients(AdapterId id, const std::function<void(float * data, int64_t count)> & visit) override;
    Result<std::vector<float>> last_logits(AdapterId id, const std::vector<int64_t> & tokens) override;
    Result<SampleHandle> sample_submit(SampleRequest request) override;
    std::vector<FinishedSample> sample_step() override { return sampling_.step(); }
    bool sample_cancel(SampleHandle handle) override { return sampling_.cancel(handle); }
    SampleStats sample_stats() const override { return sampling_.stats(); }

  private:
    // An input that passed validation, with its parsed loss.
    struct PlannedInput {
        size_t index;  // position in the caller's inputs
        const ForwardBackwardInput * input;
        LossConfig loss;
        Adapter * adapter;  // nullptr for the base model
        int64_t first_row;  // first packed row of its first datum
    };

    // LoRA parameters, gradients and moments share the activations' dtype: fp32 (fp64 in gradient checks).
    torch::ScalarType lora_dtype() const { return transformer_->act_dtype(); }
    Result<Adapter *> find_adapter(AdapterId id);
    Result<LossConfig> validate_input(const ForwardBackwardInput & input, bool backward);
    PackedBatch pack(std::vector<PlannedInput> & planned) const;
    void add_image_rows(const Datum & datum, int64_t first, BatchImages & images, std::vector<int64_t> & image_rows,
                        std::array<std::vector<int64_t>, 3> & mrope) const;
    // Runs the planned inputs; fills results for each of them.
    void run_planned(std::vector<PlannedInput> & planned, bool backward,
                     std::vector<Result<ForwardBackwardOutput>> & results);
    void collect_outputs(const std::vector<PlannedInput> & planned, const torch::Tensor & picked,
                         const std::vector<torch::Tensor> & losses,
                         std::vector<Result<ForwardBackwardOutput>> & results);
    void apply_gradients(std::vector<PlannedInput> & planned, const std::vector<torch::Tensor> & losses,
                         std::vector<Result<ForwardBackwardOutput>> & results);

    std::unique_ptr<Transformer> transformer_;
    std::map<AdapterId, std::unique_ptr<Adapter>> adapters_;
    torch::Tensor optim_scratch_;  // [3N]: what a refused Dimuon (or non-CPU AdamW) step restores
    SampleLoop sampling_;          // after transformer_: it holds a reference to it
    AdapterId next_id_ = 1;
    uint64_t next_seed_ = 0x5eed;
};

}  // namespace tinkerd::engine
