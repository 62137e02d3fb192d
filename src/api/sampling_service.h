// SamplingService: the api side of sampling. Turns a request (an asample, or one prompt of an OpenAI
// generation) into a scheduler::SampleJob for its base model's EngineWorker: the sampler's weights are
// read on an adapter-LRU miss from the Registry's snapshot cache or the store's files, the job's events go
// to the OutputStage (and so to the request's SampleSink), and new requests get 429 while
// max_queued_samples are in flight. The scheduling itself (admission, steps, the LRU) is the worker's.
#pragma once

#include <atomic>
#include <functional>
#include <memory>
#include <optional>

#include "api/output_stage.h"
#include "api/registry.h"
#include "api/telemetry.h"
#include "scheduler/sampling.h"
#include "store/database.h"

namespace tinkerd::api {

// Stop strings as a SampleRequest::stop_check over the tokenizer's decode of the generated tail.
Result<std::function<bool(const std::vector<int64_t> &)>> stop_string_check(const ServedModel & model,
                                                                            std::vector<std::string> stops);

// One sample request as the routes hand it over.
struct SampleSubmission {
    store::SamplerRow sampler;                      // the weights: base model, snapshot or checkpoint
    std::optional<engine::AdapterId> live_adapter;  // instead: a training run's live adapter
    engine::SampleRequest request;
    std::shared_ptr<SampleSink> sink;              // gets the outcome (and the tokens when stream_tokens)
    bool stream_tokens = false;                    // each step's tokens go to the sink too
    std::shared_ptr<std::atomic<bool>> cancelled;  // set when nobody waits any more
    // Whose usage it is (server_status's samplers): the caller's tenant and the sampler id, or the model
    // name an OpenAI call sent. An empty tenant is not counted per sampler.
    std::string tenant;
    std::string usage_name;
};

class SamplingService {
  public:
    SamplingService(Registry & registry, store::Database & db, OutputStage & output, int64_t max_in_flight,
                    Telemetry * telemetry = nullptr)
        : registry_(registry), db_(db), output_(output), max_in_flight_(max_in_flight), telemetry_(telemetry) {}

    // 429 (UNAVAILABLE) while max_queued_samples requests are queued or running.
    Result<void> check_capacity() const;
    // Hands the request to the model's worker; its sink always gets exactly one outcome.
    void submit(ServedModel & model, SampleSubmission submission);
    // The LoRA shape and PEFT tensors of a snapshot (cached in memory, else its files) or a checkpoint.
    Result<scheduler::AdapterWeights> sampler_weights(const store::SamplerRow & sampler) const;
    int64_t in_flight() const { return in_flight_.load(); }

  private:
    static ServedModel::SamplingReplica * pick_replica(ServedModel & model);
    std::function<void(Result<engine::SampleOutput>)> deliver_to(std::shared_ptr<SampleSink> sink);
    void submit_to_replica(ServedModel & model, ServedModel::SamplingReplica & replica, scheduler::SampleJob job,
                           std::shared_ptr<SampleSink> sink);

    Registry & registry_;
    store::Database & db_;
    OutputStage & output_;
    const int64_t max_in_flight_;
    Telemetry * telemetry_;  // counts each finished request (none in some tests)
    std::atomic<int64_t> in_flight_{0};
};

}  // namespace tinkerd::api
