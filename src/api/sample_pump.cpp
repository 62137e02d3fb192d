// The engine-thread side of sampling: each ServedModel has one "pump" task on its EngineWorker that
// moves queued requests into the engine's continuous batch (resolving their sampler adapters), runs ONE
// engine sample_step, finishes what finished, and posts itself again while work remains. The worker
// alternates posted tasks with training operations, so sampling and training interleave step by step.
// The engine thread only computes: each step's tokens and each outcome go to the OutputStage as native
// events (moved vectors); decoding, stop-string cuts, SSE, encodings and futures happen on its thread.
#include <utility>

#include "api/app.h"
#include "common/log.h"
#include "wire/sample_codec.h"

namespace tinkerd::api {

Result<void> App::check_sample_capacity() const {
    if (in_flight_samples_.load() >= options_.max_queued_samples) {
        return unavailable("too many sample requests queued (" + std::to_string(options_.max_queued_samples) +
                           "); retry shortly");
    }
    return {};
}

void App::enqueue_sample(ServedModel & model, PendingSample pending) {
    if (!pending.sink) {  // an asample: its future gets the encoded result (on the output thread)
        pending.sink = std::make_shared<FunctionSink>(
            [this, id = pending.request_id, encoding = pending.encoding](Result<engine::SampleOutput> output) {
                if (!output.ok()) {
                    fail_future(id, output.error());
                    return;
                }
                futures_->complete(id, wire::encode_sample_response_json(*output, encoding).dump(),
                                   wire::encode_sample_response_proto(*output, encoding));
            });
    }
    ++in_flight_samples_;
    bool post = false;
    {
        std::lock_guard<std::mutex> lock(model.sample_mutex);
        model.sample_queue.push_back(std::move(pending));
        post = !std::exchange(model.pump_posted, true);
    }
    if (post) {
        model.worker->post([this, m = &model](engine::Engine & engine) { pump_samples(engine, *m); });
    }
}

void App::pump_samples(engine::Engine & engine, ServedModel & model) {
    admit_queued_samples(engine, model);
    for (auto it = model.running_samples.begin(); it != model.running_samples.end();) {
        if (it->second.cancelled && it->second.cancelled->load()) {
            engine.sample_cancel(it->first);
            finish_sample(it->second, invalid_argument("cancelled: the client went away"));
            it = model.running_samples.erase(it);
        } else {
            ++it;
        }
    }
    if (!model.running_samples.empty()) {
        auto finished = guarded_engine_call<std::vector<engine::FinishedSample>>([&] { return engine.sample_step(); });
        if (!finished.ok()) {  // a thrown step: every running request fails, the engine drops them
            for (auto & [handle, pending] : model.running_samples) {
                engine.sample_cancel(handle);
                finish_sample(pending, finished.error());
            }
            model.running_samples.clear();
        } else {
            for (engine::FinishedSample & f : *finished) {  // their last tokens first, then the outcome
                auto it = model.running_samples.find(f.handle);
                if (it != model.running_samples.end()) {
                    emit_tokens(it->second);
                    finish_sample(it->second, std::move(f.output));
                    model.running_samples.erase(it);
                }
            }
            for (auto & [handle, pending] : model.running_samples) {
                emit_tokens(pending);
            }
        }
    }
    trim_sampler_adapters(engine, model);
    std::lock_guard<std::mutex> lock(model.sample_mutex);
    model.pump_posted = !model.running_samples.empty() || !model.sample_queue.empty();
    if (model.pump_posted) {
        model.worker->post([this, m = &model](engine::Engine & e) { pump_samples(e, *m); });
    }
}

// Submits every queued request to the engine (it admits them as its KV budget allows).
void App::admit_queued_samples(engine::Engine & engine, ServedModel & model) {
    std::deque<PendingSample> incoming;
    {
        std::lock_guard<std::mutex> lock(model.sample_mutex);
        incoming.swap(model.sample_queue);
    }
    for (PendingSample & pending : incoming) {
        if (pending.cancelled && pending.cancelled->load()) {
            finish_sample(pending, invalid_argument("cancelled: the client went away"));
            continue;
        }
        auto adapter = pending.live_adapter ? Result<engine::AdapterId>(*pending.live_adapter)
                                            : sampler_adapter(engine, model, pending.sampler);
        if (!adapter.ok()) {
            finish_sample(pending, adapter.error());
            continue;
        }
        pending.request.adapter = *adapter;
        auto handle = engine.sample_submit(pending.request);
        if (!handle.ok()) {
            finish_sample(pending, handle.error());
            continue;
        }
        pending.request = {};  // the engine holds its own copy; keep only what finishing needs
        pending.request.adapter = *adapter;
        model.running_samples.emplace(*handle, std::move(pending));
    }
}

// A finished request's outcome goes to the output stage, which answers its sink (a future or a generation).
void App::finish_sample(PendingSample & pending, Result<engine::SampleOutput> output) {
    --in_flight_samples_;
    output_stage_->push_done(std::move(pending.sink), std::move(output));
}

void App::emit_tokens(PendingSample & pending) {
    if (pending.tokens && !pending.tokens->empty()) {
        std::vector<GeneratedToken> step;
        step.swap(*pending.tokens);
        output_stage_->push_tokens(pending.sink, std::move(step));
    }
}

std::set<engine::AdapterId> App::adapters_in_use(const ServedModel & model) const {
    std::set<engine::AdapterId> in_use;
    for (const auto & [handle, pending] : model.running_samples) {
        in_use.insert(pending.request.adapter);
    }
    return in_use;
}

// On the engine thread: the engine adapter that holds a sampler's weights. The base model needs none; a
// frozen snapshot or a checkpoint is imported once into a fresh adapter and kept in a small LRU cache.
Result<engine::AdapterId> App::sampler_adapter(engine::Engine & engine, ServedModel & model,
                                               const store::SamplerRow & sampler) {
    if (sampler.model_path.empty() && sampler.run_id.empty()) {
        return engine::BASE_MODEL;
    }
    auto & cache = model.sampler_adapters;
    for (auto it = cache.begin(); it != cache.end(); ++it) {
        if (it->first == sampler.sampler_id) {
            cache.splice(cache.begin(), cache, it);  // most recently used first
            return cache.front().second;
        }
    }
    auto weights = sampler_weights(sampler);
    if (!weights.ok()) {
        return weights.error();
    }
    auto adapter = guarded_engine_call<engine::AdapterId>([&] { return engine.create_adapter(weights->first); });
    if (!adapter.ok()) {
        return adapter.error();
    }
    auto imported = engine.import_adapter(*adapter, weights->second, false);
    if (!imported.ok()) {
        (void)engine.remove_adapter(*adapter);
        return imported.error();
    }
    cache.emplace_front(sampler.sampler_id, *adapter);
    return *adapter;
}

// The LoRA shape and PEFT tensors of a snapshot (cached in memory, else its files) or a checkpoint.
Result<std::pair<engine::LoraSpec, store::Tensors>> App::sampler_weights(const store::SamplerRow & sampler) {
    std::string dir = sampler.dir;
    if (!sampler.run_id.empty()) {
        {
            std::lock_guard<std::mutex> lock(mutex_);
            auto it = snapshots_.find(sampler.sampler_id);
            if (it != snapshots_.end()) {
                return std::make_pair(it->second->spec, it->second->tensors);
            }
        }
        if (dir.empty()) {  // recorded by a tinkerd that kept snapshots in memory only
            return not_found("the weights of sampler '" + sampler.sampler_id +
                             "' were kept in memory only and are gone since the server restarted");
        }
    } else {
        auto path = parse_tinker_path(sampler.model_path);
        if (!path.ok()) {
            return path.error();
        }
        auto row = db_->get_checkpoint(path->run_id, path->checkpoint_id());
        if (!row.ok() || !row->has_value()) {
            return not_found("checkpoint '" + sampler.model_path + "' of sampler '" + sampler.sampler_id +
                             "' not found");
        }
        dir = (*row)->dir;
    }
    auto contents = store::read_checkpoint(dir, false);
    if (!contents.ok()) {
        return contents.error();
    }
    engine::LoraSpec spec;
    spec.rank = contents->config.rank;
    spec.alpha = contents->config.alpha;
    spec.train_attn = contents->config.train_attn;
    spec.train_mlp = contents->config.train_mlp;
    spec.train_unembed = contents->config.train_unembed;
    return std::make_pair(spec, std::move(contents->tensors));
}

// Keeps at most max_cached_sampler_adapters sampler adapters loaded, dropping the least recently used
// ones that no running request samples from.
void App::trim_sampler_adapters(engine::Engine & engine, ServedModel & model) {
    auto & cache = model.sampler_adapters;
    if (cache.size() <= options_.max_cached_sampler_adapters) {
        return;
    }
    const std::set<engine::AdapterId> in_use = adapters_in_use(model);
    auto it = cache.end();
    while (cache.size() > options_.max_cached_sampler_adapters && it != cache.begin()) {
        --it;  // least recently used first
        if (in_use.count(it->second) == 0) {
            (void)engine.remove_adapter(it->second);
            it = cache.erase(it);
        }
    }
}

}  // namespace tinkerd::api
