// Test doubles for the scheduler tests: FakeEngine (a torch-free engine::Engine that records its
// forward_backward calls and can hold the first one) and Recorder (a thread-safe event list).
#pragma once

#include <chrono>
#include <condition_variable>
#include <map>
#include <mutex>
#include <stdexcept>
#include <string>
#include <vector>

#include "engine/engine.h"

namespace tinkerd::scheduler::fakes {

using namespace std::chrono_literals;
using engine::AdapterId;
using engine::ForwardBackwardInput;
using engine::ForwardBackwardOutput;

// A thread-safe list of events with a blocking wait for a count.
class Recorder {
  public:
    void add(std::string event) {
        std::lock_guard lock(mu_);
        events_.push_back(std::move(event));
        cv_.notify_all();
    }
    std::vector<std::string> events() const {
        std::lock_guard lock(mu_);
        return events_;
    }
    bool wait_for(size_t count, std::chrono::milliseconds timeout = 5s) {
        std::unique_lock lock(mu_);
        return cv_.wait_for(lock, timeout, [&] { return events_.size() >= count; });
    }

  private:
    mutable std::mutex mu_;
    std::condition_variable cv_;
    std::vector<std::string> events_;
};

// One forward_backward call as the fake engine saw it.
struct FbCall {
    std::vector<std::string> tags;  // each input's loss_fn_config["tag"]
    std::vector<AdapterId> adapters;
    bool backward = false;
    int64_t tokens = 0;
};

// Engine stand-in: records forward_backward calls, can hold its first call until released, throws for
// adapter kThrowingAdapter, and answers each input with metrics naming its adapter and tag.
class FakeEngine : public engine::Engine {
  public:
    static constexpr AdapterId kThrowingAdapter = 666;

    explicit FakeEngine(int64_t vocab_size = 512) {
        config_.vocab_size = vocab_size;
        config_.max_position_embeddings = 4096;
    }

    const model::ModelConfig & config() const override { return config_; }
    std::string compute_dtype_name() const override { return "fp32"; }
    Result<AdapterId> create_adapter(const engine::LoraSpec &) override { return next_adapter_++; }
    Result<void> remove_adapter(AdapterId) override { return {}; }
    Result<engine::LoraSpec> adapter_spec(AdapterId) const override { return engine::LoraSpec{}; }
    Result<engine::OptimStepOutput> optim_step(AdapterId, const engine::AdamParams &) override {
        return engine::OptimStepOutput{};
    }
    Result<std::map<std::string, engine::HostTensor>> export_adapter(AdapterId, bool) const override {
        return std::map<std::string, engine::HostTensor>{};
    }
    Result<void> import_adapter(AdapterId, const std::map<std::string, engine::HostTensor> &, bool) override {
        return {};
    }
    Result<std::map<std::string, engine::HostTensor>> export_gradients(AdapterId) const override {
        return std::map<std::string, engine::HostTensor>{};
    }
    Result<engine::SampleHandle> sample_submit(engine::SampleRequest) override {
        return unsupported("fake engine: no sampling");
    }
    std::vector<engine::FinishedSample> sample_step() override { return {}; }
    bool sample_cancel(engine::SampleHandle) override { return false; }
    engine::SampleStats sample_stats() const override { return {}; }
    Result<std::vector<float>> last_logits(AdapterId, const std::vector<int64_t> &) override {
        return std::vector<float>{};
    }

    std::vector<Result<ForwardBackwardOutput>> forward_backward(const std::vector<ForwardBackwardInput> & inputs,
                                                                bool backward) override {
        FbCall call = describe(inputs, backward);
        {
            std::unique_lock lock(mu_);
            calls_.push_back(call);
            entered_++;
            cv_.notify_all();
            if (hold_first_ && calls_.size() == 1) {
                cv_.wait(lock, [&] { return released_; });
            }
        }
        std::vector<Result<ForwardBackwardOutput>> results;
        for (size_t i = 0; i < inputs.size(); i++) {
            if (inputs[i].adapter == kThrowingAdapter) {
                throw std::runtime_error("engine exploded");
            }
            ForwardBackwardOutput out;
            out.metrics["adapter:sum"] = static_cast<double>(inputs[i].adapter);
            out.metrics["tag:sum"] = inputs[i].loss_fn_config.count("tag") ? inputs[i].loss_fn_config.at("tag") : -1;
            results.push_back(std::move(out));
        }
        return results;
    }

    void hold_first_call() { hold_first_ = true; }
    void wait_entered(int n) {
        std::unique_lock lock(mu_);
        cv_.wait_for(lock, 5s, [&] { return entered_ >= n; });
    }
    void release() {
        std::lock_guard lock(mu_);
        released_ = true;
        cv_.notify_all();
    }
    std::vector<FbCall> calls() const {
        std::lock_guard lock(mu_);
        return calls_;
    }

  private:
    static FbCall describe(const std::vector<ForwardBackwardInput> & inputs, bool backward) {
        FbCall call;
        call.backward = backward;
        for (const auto & input : inputs) {
            call.adapters.push_back(input.adapter);
            auto tag = input.loss_fn_config.find("tag");
            call.tags.push_back(tag == input.loss_fn_config.end() ? "?" : std::to_string(int(tag->second)));
            for (const auto & datum : input.datums) {
                call.tokens += static_cast<int64_t>(datum.tokens.size());
            }
        }
        return call;
    }

    model::ModelConfig config_;
    AdapterId next_adapter_ = 1;
    mutable std::mutex mu_;
    std::condition_variable cv_;
    std::vector<FbCall> calls_;
    int entered_ = 0;
    bool hold_first_ = false;
    bool released_ = false;
};

}  // namespace tinkerd::scheduler::fakes
