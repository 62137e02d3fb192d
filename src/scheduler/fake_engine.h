// Test doubles for the scheduler and api tests: FakeEngine (a torch-free engine::Engine that records its
// forward_backward calls and can hold the first one, and samples deterministic tokens one per step) and
// Recorder (a thread-safe event list).
#pragma once

#include <atomic>
#include <chrono>
#include <condition_variable>
#include <map>
#include <mutex>
#include <set>
#include <stdexcept>
#include <string>
#include <thread>
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
    Result<AdapterId> create_adapter(const engine::LoraSpec &) override {
        std::lock_guard lock(mu_);
        live_adapters_.insert(next_adapter_);
        return next_adapter_++;
    }
    Result<void> remove_adapter(AdapterId id) override {
        std::lock_guard lock(mu_);
        live_adapters_.erase(id);
        return {};
    }
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
    // Sampling: sample i of a request gets token (prompt.back() + 1 + i + step) % vocab at each step, with
    // logprob -0.5, until max_tokens; a prompt token kThrowingToken makes sample_step throw.
    static constexpr int64_t kThrowingToken = 13;
    // Each sample_step first sleeps this long (a test that must act while a generation runs sets it, so the
    // fake's instant steps cannot finish the generation first).
    void set_sample_step_delay(std::chrono::microseconds delay) { sample_step_delay_ = delay; }
    Result<engine::SampleHandle> sample_submit(engine::SampleRequest request) override {
        if (request.prompt.empty() || request.num_samples < 1) {
            return invalid_argument("fake engine: empty prompt or no samples");
        }
        std::lock_guard lock(mu_);
        sampling_[next_handle_] = Sampling{std::move(request), {}};
        return next_handle_++;
    }
    std::vector<engine::FinishedSample> sample_step() override;
    bool sample_cancel(engine::SampleHandle handle) override {
        std::lock_guard lock(mu_);
        cancelled_.push_back(handle);
        return sampling_.erase(handle) > 0;
    }
    engine::SampleStats sample_stats() const override {
        std::lock_guard lock(mu_);
        engine::SampleStats stats;
        stats.running = static_cast<int64_t>(sampling_.size());
        return stats;
    }
    Result<std::vector<float>> last_logits(AdapterId, const std::vector<int64_t> &) override {
        return std::vector<float>{};
    }

    std::vector<Result<ForwardBackwardOutput>> forward_backward(const std::vector<ForwardBackwardInput> & inputs,
                                                                bool backward) override {
        FbCall call = describe(inputs, backward);
        {
            std::unique_lock lock(mu_);
            calls_.push_back(call);
            log_.push_back("fb");
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
    // "fb" per forward_backward call and "sample" per sample_step, in call order.
    std::vector<std::string> log() const {
        std::lock_guard lock(mu_);
        return log_;
    }
    std::set<AdapterId> live_adapters() const {
        std::lock_guard lock(mu_);
        return live_adapters_;
    }
    std::vector<engine::SampleHandle> cancelled() const {
        std::lock_guard lock(mu_);
        return cancelled_;
    }
    size_t sampling_requests() const {
        std::lock_guard lock(mu_);
        return sampling_.size();
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

    struct Sampling {
        engine::SampleRequest request;
        engine::SampleOutput output;
    };

    model::ModelConfig config_;
    AdapterId next_adapter_ = 1;
    engine::SampleHandle next_handle_ = 1;
    std::map<engine::SampleHandle, Sampling> sampling_;
    std::set<AdapterId> live_adapters_;
    std::atomic<std::chrono::microseconds> sample_step_delay_{std::chrono::microseconds(0)};
    std::vector<engine::SampleHandle> cancelled_;
    std::vector<std::string> log_;
    mutable std::mutex mu_;
    std::condition_variable cv_;
    std::vector<FbCall> calls_;
    int entered_ = 0;
    bool hold_first_ = false;
    bool released_ = false;
};

inline std::vector<engine::FinishedSample> FakeEngine::sample_step() {
    if (const auto delay = sample_step_delay_.load(); delay.count() > 0) {
        std::this_thread::sleep_for(delay);
    }
    std::vector<engine::FinishedSample> finished;
    std::lock_guard lock(mu_);
    log_.push_back("sample");
    for (auto & [handle, s] : sampling_) {
        if (s.request.prompt.front() == kThrowingToken) {
            throw std::runtime_error("sampling exploded");
        }
        s.output.sequences.resize(static_cast<size_t>(s.request.num_samples));
        for (size_t i = 0; i < s.output.sequences.size(); ++i) {
            auto & seq = s.output.sequences[i];
            if (static_cast<int64_t>(seq.tokens.size()) >= s.request.params.max_tokens) {
                continue;
            }
            const int64_t token =
                (s.request.prompt.back() + 1 + static_cast<int64_t>(i + seq.tokens.size())) % config_.vocab_size;
            seq.tokens.push_back(token);
            seq.logprobs.push_back(-0.5f);
            if (s.request.on_token) {
                s.request.on_token(static_cast<int64_t>(i), token, -0.5f, {});
            }
        }
        if (static_cast<int64_t>(s.output.sequences.front().tokens.size()) >= s.request.params.max_tokens) {
            finished.push_back({handle, std::move(s.output)});
        }
    }
    for (const auto & f : finished) {
        sampling_.erase(f.handle);
    }
    return finished;
}

}  // namespace tinkerd::scheduler::fakes
