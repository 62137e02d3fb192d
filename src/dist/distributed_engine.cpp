// DistributedEngine (rank 0) and run_follower (every other rank): the commands of distributed_engine.h.
#include "dist/distributed_engine.h"

#include <algorithm>
#include <map>

#include "common/log.h"
#include "dist/codec.h"
#include "dist/step.h"

namespace tinkerd::dist {

using engine::AdapterId;
using engine::ForwardBackwardInput;
using engine::ForwardBackwardOutput;

DistributedEngine::DistributedEngine(std::unique_ptr<engine::Engine> local, std::shared_ptr<GroupStore> store,
                                     const GroupOptions & options, std::unique_ptr<DataParallelGroup> first)
    : local_(std::move(local)), keeper_(std::make_unique<GroupKeeper>(std::move(store), options, std::move(first))) {}

DistributedEngine::~DistributedEngine() = default;  // the keeper tells the other ranks to stop

DataParallelGroup * DistributedEngine::group_of(const GroupKeeper::Lease & lease) {
    if (lease.generation() != replicated_generation_) {
        replicated_.clear();
        replicated_generation_ = lease.generation();
    }
    return lease.group();
}

engine::DataParallelStatus DistributedEngine::data_parallel_status() const {
    return {keeper_->ranks(), keeper_->world_size(), keeper_->generation_now()};
}

Result<AdapterId> DistributedEngine::create_adapter(const engine::LoraSpec & spec) {
    return local_->create_adapter(spec);  // the other ranks get it on its first forward_backward
}

Result<void> DistributedEngine::remove_adapter(AdapterId id) {
    drop_replica(id);
    return local_->remove_adapter(id);
}

// The adapter's spec, weights, Adam state and (when not all zero: gradients accumulated before this
// generation formed) its gradients.
Result<void> DistributedEngine::replicate(DataParallelGroup & group, AdapterId id) {
    if (id == engine::BASE_MODEL || replicated_.count(id)) {
        return {};
    }
    auto spec = local_->adapter_spec(id);
    auto tensors = local_->export_adapter(id, /*with_optimizer=*/true);
    if (!spec.ok() || !tensors.ok()) {
        return {};  // unknown adapter: forward_backward's own check names it
    }
    ByteWriter w;
    w.i64(id);
    write_spec(w, *spec);
    w.tensors(*tensors);
    std::vector<float> gradients;  // [N] flat fp32, empty when all zero
    (void)local_->visit_gradients(id, [&](float * data, int64_t n) {
        if (std::any_of(data, data + n, [](float g) { return g != 0.0f; })) {
            gradients.assign(data, data + n);
        }
    });
    w.floats(gradients);
    TRY_STATUS(group.send_command(static_cast<int64_t>(Command::REPLICATE), w.take()));
    replicated_.insert(id);
    return {};
}

void DistributedEngine::drop_replica(AdapterId id) {
    auto lease = keeper_->lease();
    DataParallelGroup * group = group_of(lease);
    if (replicated_.erase(id) && group) {
        ByteWriter w;
        w.i64(id);
        (void)group->send_command(static_cast<int64_t>(Command::DROP), w.take());
    }
}

std::vector<Result<ForwardBackwardOutput>> DistributedEngine::forward_backward(
    const std::vector<ForwardBackwardInput> & inputs, bool backward) {
    auto lease = keeper_->lease();
    DataParallelGroup * group = group_of(lease);
    if (!group) {
        return local_->forward_backward(inputs, backward);
    }
    std::vector<Result<ForwardBackwardOutput>> results(inputs.size(), internal_error("not run"));
    std::vector<ForwardBackwardInput> valid;  // refused inputs never reach the other ranks
    std::vector<size_t> where;
    for (size_t i = 0; i < inputs.size(); ++i) {
        auto status = check_forward_backward_input(inputs[i], backward);
        if (!status.ok()) {
            results[i] = status.error();
            continue;
        }
        auto replicated = replicate(*group, inputs[i].adapter);
        if (!replicated.ok()) {
            results[i] = replicated.error();
            continue;
        }
        valid.push_back(inputs[i]);
        where.push_back(i);
    }
    if (valid.empty()) {
        return results;
    }
    ByteWriter w;
    w.i64(backward ? 1 : 0);
    write_inputs(w, valid);
    auto sent = group->send_command(static_cast<int64_t>(Command::FORWARD_BACKWARD), w.take());
    if (!sent.ok()) {
        for (size_t i : where) {
            results[i] = sent.error();
        }
        return results;
    }
    auto outputs = run_forward_backward_step(*local_, *group, valid, backward);
    for (size_t k = 0; k < where.size() && k < outputs.size(); ++k) {
        results[where[k]] = std::move(outputs[k]);
    }
    return results;
}

Result<engine::OptimStepOutput> DistributedEngine::optim_step(AdapterId id, const engine::AdamParams & params) {
    auto lease = keeper_->lease();
    DataParallelGroup * group = group_of(lease);
    if (group && replicated_.count(id)) {
        ByteWriter w;
        w.i64(id);
        write_adam(w, params);
        TRY_STATUS(group->send_command(static_cast<int64_t>(Command::OPTIM_STEP), w.take()));
    }
    return local_->optim_step(id, params);  // the same gradients everywhere: the same step everywhere
}

Result<std::map<std::string, engine::HostTensor>> DistributedEngine::export_adapter(AdapterId id,
                                                                                    bool with_optimizer) const {
    return local_->export_adapter(id, with_optimizer);
}

Result<void> DistributedEngine::import_adapter(AdapterId id, const std::map<std::string, engine::HostTensor> & tensors,
                                               bool with_optimizer) {
    drop_replica(id);  // re-sent with the new weights on its next forward_backward
    return local_->import_adapter(id, tensors, with_optimizer);
}

Result<std::map<std::string, engine::HostTensor>> DistributedEngine::export_gradients(AdapterId id) const {
    return local_->export_gradients(id);  // already summed over the ranks
}

Result<void> DistributedEngine::check_forward_backward_input(const ForwardBackwardInput & input, bool backward) {
    for (size_t i = 0; i < input.datums.size(); ++i) {
        if (!input.datums[i].images.empty()) {  // the rank codec (codec.cpp) does not carry images yet
            return unsupported("data[" + std::to_string(i) +
                               "]: image chunks are not supported with data parallelism "
                               "(--dp / --dist-init) yet; train vision models on one process");
        }
    }
    return local_->check_forward_backward_input(input, backward);
}

Result<void> DistributedEngine::visit_gradients(AdapterId id,
                                                const std::function<void(float * data, int64_t count)> & visit) {
    return local_->visit_gradients(id, visit);
}

Result<engine::SampleHandle> DistributedEngine::sample_submit(engine::SampleRequest request) {
    return local_->sample_submit(std::move(request));
}

Result<std::vector<float>> DistributedEngine::last_logits(AdapterId id, const std::vector<int64_t> & tokens) {
    return local_->last_logits(id, tokens);
}

namespace {

// A follower's adapters, keyed by rank 0's ids.
class FollowerState {
  public:
    explicit FollowerState(engine::Engine & local) : local_(local) {}
    ~FollowerState() {  // the next generation's rank 0 re-sends what it needs
        for (const auto & [id, local_id] : ids_) {
            (void)local_.remove_adapter(local_id);
        }
    }

    AdapterId local_id(AdapterId id) const {
        if (id == engine::BASE_MODEL) {
            return id;
        }
        auto it = ids_.find(id);
        // Unknown here: a negative id of its own (the engine answers "unknown adapter"), distinct per rank-0
        // id so the batch keeps one entry per adapter, in the same order as on rank 0 (step.cpp).
        return it == ids_.end() ? -1 - id : it->second;
    }

    void replicate(ByteReader & r) {
        const AdapterId id = r.i64();
        const engine::LoraSpec spec = read_spec(r);
        const auto tensors = r.tensors();
        const std::vector<float> gradients = r.floats();  // [N] or empty (all zero)
        drop(id);
        auto created = local_.create_adapter(spec);
        if (!r.ok() || !created.ok()) {
            LOG_ERR("dist", "cannot replicate adapter %lld", static_cast<long long>(id));
            return;
        }
        auto imported = local_.import_adapter(*created, tensors, /*with_optimizer=*/true);
        if (!imported.ok()) {  // left unmapped: its inputs fail here, so rank 0 fails them and sums nothing
            LOG_ERR("dist", "cannot import adapter %lld: %s", static_cast<long long>(id),
                    imported.error().message.c_str());
            (void)local_.remove_adapter(*created);
            return;
        }
        if (!gradients.empty()) {
            (void)local_.visit_gradients(*created, [&](float * data, int64_t n) {
                if (n == static_cast<int64_t>(gradients.size())) {
                    std::copy(gradients.begin(), gradients.end(), data);
                }
            });
        }
        ids_[id] = *created;
    }

    void drop(AdapterId id) {
        auto it = ids_.find(id);
        if (it != ids_.end()) {
            (void)local_.remove_adapter(it->second);
            ids_.erase(it);
        }
    }

    Result<void> forward_backward(ByteReader & r, DataParallelGroup & group) {
        const bool backward = r.i64() != 0;
        auto inputs = read_inputs(r);
        if (!inputs.ok()) {
            return inputs.error();  // rank 0 then waits for this rank until the timeout: stop
        }
        for (auto & input : *inputs) {
            input.adapter = local_id(input.adapter);
        }
        (void)run_forward_backward_step(local_, group, *inputs, backward);
        return {};
    }

    void optim_step(ByteReader & r) {
        const AdapterId id = local_id(r.i64());
        const engine::AdamParams params = read_adam(r);
        auto out = local_.optim_step(id, params);
        if (!out.ok()) {
            LOG_INF("dist", "optim_step: %s (rank 0 answers the same)", out.error().message.c_str());
        }
    }

  private:
    engine::Engine & local_;
    std::map<AdapterId, AdapterId> ids_;
};

}  // namespace

Result<void> run_follower(engine::Engine & local, DataParallelGroup & group) {
    FollowerState state(local);
    while (true) {
        auto command = group.receive_command();
        if (!command.ok()) {
            return command.error();
        }
        ByteReader reader(command->second);
        switch (static_cast<Command>(command->first)) {
            case Command::FORWARD_BACKWARD:
                TRY_STATUS(state.forward_backward(reader, group));
                break;
            case Command::OPTIM_STEP:
                state.optim_step(reader);
                break;
            case Command::REPLICATE:
                state.replicate(reader);
                break;
            case Command::DROP:
                state.drop(reader.i64());
                break;
            case Command::STOP:
                return {};
            case Command::KEEPALIVE:
                break;
            default:
                return internal_error("unknown data-parallel command " + std::to_string(command->first));
        }
    }
}

}  // namespace tinkerd::dist
