// SamplingReplicaEngine (rank 0's side) and run_sampling_replica (the replica's loop): each command is
// one broadcast from rank 0 and one gather of the replica's answer, which starts with a status (ok, or an
// encoded Error) so that an engine error on the replica reaches the caller as that error.
#include "dist/replica_engine.h"

#include <chrono>
#include <exception>
#include <stdexcept>

#include "common/log.h"
#include "dist/codec.h"
#include "dist/replica_codec.h"

namespace tinkerd::dist {

using engine::AdapterId;
using engine::SampleHandle;

namespace {

Error not_on_replica(const char * what) {
    return invalid_argument(std::string(what) + " does not run on a sampling replica (it only samples)");
}

int64_t tensor_bytes(const std::map<std::string, engine::HostTensor> & tensors) {
    int64_t bytes = 0;
    for (const auto & [name, t] : tensors) {
        bytes += static_cast<int64_t>(t.bytes.size());
    }
    return bytes;
}

}  // namespace

SamplingReplicaEngine::SamplingReplicaEngine(const engine::Engine & base, std::unique_ptr<DataParallelGroup> pair,
                                             int index)
    : base_(base), pair_(std::move(pair)), index_(index) {}

SamplingReplicaEngine::~SamplingReplicaEngine() {
    const ReplicaSyncStats s = sync_stats();
    LOG_INF("dist", "sampling replica %d: %lld adapter(s) sent, %.1f MiB, %.3f s in all", index_,
            static_cast<long long>(s.adapters), static_cast<double>(s.bytes) / (1 << 20), s.seconds);
    if (healthy_) {
        (void)pair_->send_command(static_cast<int64_t>(ReplicaCommand::STOP), {});
    }
}

void SamplingReplicaEngine::offer_group(std::unique_ptr<DataParallelGroup> pair) {
    std::lock_guard lock(offer_mu_);
    offered_ = std::move(pair);
    has_offer_ = true;
}

// Engine thread. Only once no request of the old process is live: until the scheduler has failed and
// cancelled them (calls answer "gone" meanwhile), their handles could collide with the new process's.
void SamplingReplicaEngine::switch_to_offered_group() {
    if (!has_offer_ || !live_.empty()) {
        return;
    }
    std::lock_guard lock(offer_mu_);
    if (healthy_) {  // the old process exited while idle: tell it nothing, it is gone
        LOG_INF("dist", "sampling replica %d: switching to its restarted process", index_);
    }
    pair_ = std::move(offered_);
    has_offer_ = false;
    specs_.clear();
    on_token_.clear();
    live_.clear();
    ++epoch_;
    healthy_ = true;
    LOG_INF("dist", "sampling replica %d is back (adapters are sent again as needed)", index_);
}

int64_t SamplingReplicaEngine::adapters_epoch() {
    switch_to_offered_group();
    return epoch_;
}

Result<std::vector<uint8_t>> SamplingReplicaEngine::call(ReplicaCommand command, std::vector<uint8_t> payload) {
    switch_to_offered_group();
    if (!healthy_) {
        return internal_error("sampling replica " + std::to_string(index_) + " is gone (see the server log)");
    }
    auto sent = pair_->send_command(static_cast<int64_t>(command), payload);
    auto answers = sent.ok() ? pair_->gather_to_root({}) : Result<std::vector<std::vector<uint8_t>>>(sent.error());
    if (!answers.ok() || answers->size() != 2) {
        healthy_ = false;
        ++failures_;
        LOG_ERR("dist", "sampling replica %d failed; its requests fail, new ones sample on rank 0", index_);
        return internal_error("sampling replica " + std::to_string(index_) +
                              " failed: " + (answers.ok() ? "no answer" : answers.error().message));
    }
    std::vector<uint8_t> answer = std::move((*answers)[1]);
    ByteReader r(answer);
    const int64_t ok = r.i64();
    if (ok == 0) {
        Error error = r.error();
        if (r.ok() && static_cast<int64_t>(error.kind) >= 0 &&
            static_cast<int64_t>(error.kind) <= static_cast<int64_t>(ErrorKind::INTERNAL)) {
            return error;
        }
    }
    if (!r.ok() || (ok != 0 && ok != 1)) {
        return internal_error("sampling replica " + std::to_string(index_) + ": malformed answer");
    }
    if (ok == 0) {
        return internal_error("sampling replica " + std::to_string(index_) + ": malformed error");
    }
    answer.erase(answer.begin(), answer.begin() + sizeof(int64_t));
    return answer;
}

Result<void> SamplingReplicaEngine::call_status(ReplicaCommand command, std::vector<uint8_t> payload) {
    auto answer = call(command, std::move(payload));
    return answer.ok() ? Result<void>() : Result<void>(answer.error());
}

Result<AdapterId> SamplingReplicaEngine::create_adapter(const engine::LoraSpec & spec) {
    ByteWriter w;
    write_spec(w, spec);
    auto answer = call(ReplicaCommand::CREATE_ADAPTER, w.take());
    if (!answer.ok()) {
        return answer.error();
    }
    ByteReader r(*answer);
    const AdapterId id = r.i64();
    specs_[id] = spec;
    return id;
}

Result<void> SamplingReplicaEngine::remove_adapter(AdapterId id) {
    specs_.erase(id);
    ByteWriter w;
    w.i64(id);
    return call_status(ReplicaCommand::REMOVE_ADAPTER, w.take());
}

Result<engine::LoraSpec> SamplingReplicaEngine::adapter_spec(AdapterId id) const {
    auto it = specs_.find(id);
    if (it == specs_.end()) {
        return not_found("adapter " + std::to_string(id) + " not found on sampling replica " + std::to_string(index_));
    }
    return it->second;
}

// The adapter sync: a sampler's weights go to the replica when its LRU first needs them there.
Result<void> SamplingReplicaEngine::import_adapter(AdapterId id,
                                                   const std::map<std::string, engine::HostTensor> & tensors,
                                                   bool with_optimizer) {
    if (with_optimizer) {
        return not_on_replica("importing optimizer state");
    }
    const auto t0 = std::chrono::steady_clock::now();
    const int64_t bytes = tensor_bytes(tensors);
    ByteWriter w;
    w.reserve(static_cast<size_t>(bytes) + 4096 * (tensors.size() + 1));  // the weights and their names and shapes
    w.i64(id);
    w.tensors(tensors);
    TRY_STATUS(call_status(ReplicaCommand::IMPORT_ADAPTER, w.take()));
    const double seconds = std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count();
    {
        std::lock_guard lock(stats_mu_);
        sync_.adapters += 1;
        sync_.bytes += bytes;
        sync_.seconds += seconds;
        sync_.last_seconds = seconds;
    }
    LOG_INF("dist", "sampling replica %d: adapter sent, %.2f MiB in %.1f ms", index_,
            static_cast<double>(bytes) / (1 << 20), seconds * 1000);
    return {};
}

Result<SampleHandle> SamplingReplicaEngine::sample_submit(engine::SampleRequest request) {
    ByteWriter w;
    write_sample_request(w, request, static_cast<bool>(request.on_token));
    auto answer = call(ReplicaCommand::SUBMIT, w.take());
    if (!answer.ok()) {
        return answer.error();
    }
    ByteReader r(*answer);
    const SampleHandle handle = r.i64();
    live_.insert(handle);
    if (request.on_token) {
        on_token_[handle] = std::move(request.on_token);
    }
    return handle;
}

std::vector<engine::FinishedSample> SamplingReplicaEngine::sample_step() {
    auto answer = call(ReplicaCommand::STEP, {});
    if (!answer.ok()) {  // the scheduler fails every running request with it
        on_token_.clear();
        live_.clear();
        throw std::runtime_error(answer.error().message);
    }
    ByteReader r(*answer);
    auto step = read_replica_step(r);
    if (!step.ok()) {
        throw std::runtime_error(step.error().message);
    }
    for (const StreamedToken & t : step->tokens) {
        if (auto it = on_token_.find(t.handle); it != on_token_.end()) {
            it->second(t.index, t.token, t.logprob, t.top);
        }
    }
    for (const auto & f : step->finished) {
        on_token_.erase(f.handle);
        live_.erase(f.handle);
    }
    std::lock_guard lock(stats_mu_);
    stats_ = step->stats;
    return std::move(step->finished);
}

bool SamplingReplicaEngine::sample_cancel(SampleHandle handle) {
    on_token_.erase(handle);
    live_.erase(handle);
    ByteWriter w;
    w.i64(handle);
    auto answer = call(ReplicaCommand::CANCEL, w.take());
    if (!answer.ok()) {
        return false;
    }
    ByteReader r(*answer);
    return r.i64() != 0;
}

engine::SampleStats SamplingReplicaEngine::sample_stats() const {
    std::lock_guard lock(stats_mu_);
    return stats_;
}

ReplicaSyncStats SamplingReplicaEngine::sync_stats() const {
    std::lock_guard lock(stats_mu_);
    return sync_;
}

std::vector<Result<engine::ForwardBackwardOutput>> SamplingReplicaEngine::forward_backward(
    const std::vector<engine::ForwardBackwardInput> & inputs, bool) {
    return std::vector<Result<engine::ForwardBackwardOutput>>(inputs.size(), not_on_replica("forward_backward"));
}

Result<engine::OptimStepOutput> SamplingReplicaEngine::optim_step(AdapterId, const engine::AdamParams &) {
    return not_on_replica("optim_step");
}

Result<std::map<std::string, engine::HostTensor>> SamplingReplicaEngine::export_adapter(AdapterId, bool) const {
    return not_on_replica("exporting an adapter");
}

Result<std::map<std::string, engine::HostTensor>> SamplingReplicaEngine::export_gradients(AdapterId) const {
    return not_on_replica("exporting gradients");
}

Result<std::vector<float>> SamplingReplicaEngine::last_logits(AdapterId, const std::vector<int64_t> &) {
    return not_on_replica("last_logits");
}

}  // namespace tinkerd::dist
