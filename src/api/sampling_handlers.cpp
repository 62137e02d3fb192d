// asample (and compute_logprobs, which is asample with max_tokens 1 and prompt_logprobs): parses the
// request, resolves the sampler (base model, a frozen snapshot, or a checkpoint loaded once into a cached
// engine adapter), applies backpressure (429), and runs the sampling on the base model's engine thread.
#include <cmath>
#include <set>
#include <utility>

#include "api/app.h"
#include "common/log.h"
#include "wire/sample_codec.h"

namespace tinkerd::api {

namespace {

constexpr int64_t MAX_NUM_SAMPLES = 128;
constexpr int64_t DEFAULT_MAX_TOKENS_CAP = 2048;  // when max_tokens is omitted: up to the context, at most this

Result<std::vector<int64_t>> prompt_tokens(const json & prompt) {
    if (!prompt.is_object() || !prompt.contains("chunks") || !prompt["chunks"].is_array()) {
        return invalid_argument("prompt: expected {\"chunks\": [...]}");
    }
    std::vector<int64_t> tokens;
    for (size_t i = 0; i < prompt["chunks"].size(); ++i) {
        const json & chunk = prompt["chunks"][i];
        const std::string type = chunk.is_object() ? chunk.value("type", "encoded_text") : "";
        if (type != "encoded_text" || !chunk.contains("tokens") || !chunk["tokens"].is_array()) {
            return unsupported("prompt.chunks[" + std::to_string(i) + "]: only encoded_text chunks are supported");
        }
        for (const json & t : chunk["tokens"]) {
            if (!t.is_number_integer() || t.get<int64_t>() < 0) {
                return invalid_argument("prompt.chunks[" + std::to_string(i) + "].tokens: expected token ids >= 0");
            }
            tokens.push_back(t.get<int64_t>());
        }
    }
    if (tokens.empty()) {
        return invalid_argument("prompt: no tokens");
    }
    return tokens;
}

// "stop" is a string, a list of strings, or a list of token ids.
Result<void> parse_stop(const json & stop, engine::SamplingParams & params, std::vector<std::string> & strings) {
    if (stop.is_null()) {
        return {};
    }
    if (stop.is_string()) {
        strings.push_back(stop.get<std::string>());
        return {};
    }
    if (!stop.is_array()) {
        return invalid_argument("sampling_params.stop: expected a string, a list of strings or a list of token ids");
    }
    for (const json & s : stop) {
        if (s.is_number_integer()) {
            params.stop_token_ids.push_back(s.get<int64_t>());
        } else if (s.is_string()) {
            strings.push_back(s.get<std::string>());
        } else {
            return invalid_argument("sampling_params.stop: entries must all be strings or all token ids");
        }
    }
    return {};
}

Result<engine::SamplingParams> parse_sampling_params(const json & body, std::vector<std::string> & stop_strings) {
    const json sp = body.value("sampling_params", json::object());
    if (!sp.is_object()) {
        return invalid_argument("sampling_params: expected an object");
    }
    engine::SamplingParams params;
    auto max_tokens = get_optional_int(sp, "max_tokens", "sampling_params");
    auto seed = get_optional_int(sp, "seed", "sampling_params");
    auto top_k = get_optional_int(sp, "top_k", "sampling_params");
    auto temperature = get_number(sp, "temperature", 1.0, "sampling_params");
    auto top_p = get_number(sp, "top_p", 1.0, "sampling_params");
    if (const Error * e = first_error(max_tokens, seed, top_k, temperature, top_p)) {
        return *e;
    }
    params.max_tokens = max_tokens->value_or(-1);  // -1: filled in from the context length
    if (seed->has_value()) {
        params.seed = static_cast<uint64_t>(**seed);
    }
    params.top_k = top_k->value_or(-1);
    params.temperature = *temperature;
    params.top_p = *top_p;
    TRY_STATUS(parse_stop(sp.value("stop", json()), params, stop_strings));
    return params;
}

// Stop strings are checked on the decoded text of the generated tokens' tail after each token: a sequence
// stops at the first token whose text completes one of them (that token is the last one returned).
Result<std::function<bool(const std::vector<int64_t> &)>> stop_string_check(const ServedModel & model,
                                                                            std::vector<std::string> stops) {
    if (model.tokenizer == nullptr) {
        return invalid_argument("sampling_params.stop: stop strings need a tokenizer, and model '" + model.name +
                                "' has no tokenizer.json; pass stop token ids instead");
    }
    size_t longest = 0;
    for (const auto & s : stops) {
        if (s.empty()) {
            return invalid_argument("sampling_params.stop: empty stop string");
        }
        longest = std::max(longest, s.size());
    }
    const size_t window = 4 * longest + 8;  // tokens: enough for any token split of the longest stop string
    const tokenizer::Tokenizer * tok = model.tokenizer;
    return std::function<bool(const std::vector<int64_t> &)>(
        [tok, stops = std::move(stops), window](const std::vector<int64_t> & generated) {
            const size_t start = generated.size() > window ? generated.size() - window : 0;
            const std::vector<int32_t> tail(generated.begin() + static_cast<std::ptrdiff_t>(start), generated.end());
            const std::string text = tok->decode(tail, false);
            for (const auto & s : stops) {
                if (text.find(s) != std::string::npos) {
                    return true;
                }
            }
            return false;
        });
}

}  // namespace

Result<json> App::asample(Call & call) {
    auto sampler_id = get_string(call.body, "sampling_session_id");
    if (!sampler_id.ok()) {
        return sampler_id.error();
    }
    auto sampler = db_->get_sampler(*sampler_id);
    if (!sampler.ok() || !sampler->has_value() || (*sampler)->tenant != call.tenant) {
        return not_found("sampling session '" + *sampler_id + "' not found");
    }
    ServedModel * model = find_model((*sampler)->base_model);
    if (model == nullptr) {
        return not_found("base model '" + (*sampler)->base_model + "' of the sampler is not served any more");
    }
    auto request = parse_sample_request(call.body, *model);
    if (!request.ok()) {
        return request.error();
    }
    if (in_flight_samples_.load() >= options_.max_queued_samples) {
        return unavailable("too many sample requests queued (" + std::to_string(options_.max_queued_samples) +
                           "); retry shortly");
    }
    PendingSample pending{**sampler, std::move(request).value(), {}, create_future(call.tenant, "Sample")};
    pending.encoding = {pending.request.prompt_logprobs, pending.request.topk_prompt_logprobs};
    const std::string request_id = pending.request_id;
    ++in_flight_samples_;
    bool post_drain = false;
    {
        std::lock_guard<std::mutex> lock(model->sample_mutex);
        model->sample_queue.push_back(std::move(pending));
        post_drain = !std::exchange(model->drain_posted, true);
    }
    if (post_drain) {
        model->worker->post([this, model](engine::Engine & engine) { run_sample_batch(engine, *model); });
    }
    return json{{"request_id", request_id}};
}

Result<engine::SampleRequest> App::parse_sample_request(const json & body, const ServedModel & model) {
    engine::SampleRequest request;
    auto tokens = prompt_tokens(body.value("prompt", json()));
    auto num_samples = get_optional_int(body, "num_samples");
    auto prompt_logprobs = get_bool(body, "prompt_logprobs", false);
    auto topk = get_optional_int(body, "topk_prompt_logprobs");
    std::vector<std::string> stop_strings;
    auto params = parse_sampling_params(body, stop_strings);
    if (const Error * e = first_error(tokens, num_samples, prompt_logprobs, topk, params)) {
        return *e;
    }
    if (!stop_strings.empty()) {
        auto check = stop_string_check(model, std::move(stop_strings));
        if (!check.ok()) {
            return check.error();
        }
        request.stop_check = std::move(check).value();
    }
    request.prompt = std::move(tokens).value();
    request.num_samples = num_samples->value_or(1);
    if (request.num_samples < 1 || request.num_samples > MAX_NUM_SAMPLES) {
        return invalid_argument("num_samples must be between 1 and " + std::to_string(MAX_NUM_SAMPLES));
    }
    request.prompt_logprobs = *prompt_logprobs;
    request.topk_prompt_logprobs = topk->value_or(0);
    if (request.topk_prompt_logprobs < 0 || request.topk_prompt_logprobs > 1000) {
        return invalid_argument("topk_prompt_logprobs must be between 0 and 1000");
    }
    request.params = *params;
    if (request.params.max_tokens < 0) {
        const int64_t room =
            model.engine->config().max_position_embeddings - static_cast<int64_t>(request.prompt.size());
        request.params.max_tokens = std::max<int64_t>(0, std::min(room, DEFAULT_MAX_TOKENS_CAP));
    }
    return request;
}

// On the engine thread: the engine adapter that holds a sampler's weights. The base model needs none; a
// frozen snapshot or a checkpoint is imported once into a fresh adapter and kept in a small LRU cache.
Result<engine::AdapterId> App::sampler_adapter(engine::Engine & engine, ServedModel & model,
                                               const store::SamplerRow & sampler,
                                               const std::set<engine::AdapterId> & pinned) {
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
    // Make room, least recently used first, but never under a request of the running batch.
    for (auto it = std::prev(cache.end());
         cache.size() > options_.max_cached_sampler_adapters && it != cache.begin();) {
        auto victim = it--;
        if (pinned.count(victim->second) == 0) {
            (void)engine.remove_adapter(victim->second);
            cache.erase(victim);
        }
    }
    return *adapter;
}

// The LoRA shape and PEFT tensors of a snapshot (in memory) or a checkpoint (read from disk).
Result<std::pair<engine::LoraSpec, store::Tensors>> App::sampler_weights(const store::SamplerRow & sampler) {
    if (!sampler.run_id.empty()) {
        std::lock_guard<std::mutex> lock(mutex_);
        auto it = snapshots_.find(sampler.sampler_id);
        if (it == snapshots_.end()) {
            return not_found("the weights of sampler '" + sampler.sampler_id +
                             "' are no longer in memory (its training run was unloaded, or 8 newer snapshots "
                             "replaced it); save named sampler weights to keep them");
        }
        return std::make_pair(it->second->spec, it->second->tensors);
    }
    auto path = parse_tinker_path(sampler.model_path);
    if (!path.ok()) {
        return path.error();
    }
    auto row = db_->get_checkpoint(path->run_id, path->checkpoint_id());
    if (!row.ok() || !row->has_value()) {
        return not_found("checkpoint '" + sampler.model_path + "' of sampler '" + sampler.sampler_id + "' not found");
    }
    auto contents = store::read_checkpoint((*row)->dir, false);
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

// On the engine thread: every sample request queued for this model so far (up to MAX_SAMPLE_BATCH) runs
// in ONE Engine::sample call, so their decode steps are shared whatever adapters they use. Requests that
// arrive meanwhile wait for the next call (posted at once when the queue is not empty).
void App::run_sample_batch(engine::Engine & engine, ServedModel & model) {
    constexpr size_t MAX_SAMPLE_BATCH = 64;
    std::vector<PendingSample> batch;
    {
        std::lock_guard<std::mutex> lock(model.sample_mutex);
        while (!model.sample_queue.empty() && batch.size() < MAX_SAMPLE_BATCH) {
            batch.push_back(std::move(model.sample_queue.front()));
            model.sample_queue.pop_front();
        }
        model.drain_posted = !model.sample_queue.empty();
    }
    if (model.drain_posted) {
        model.worker->post([this, m = &model](engine::Engine & e) { run_sample_batch(e, *m); });
    }
    std::vector<engine::SampleRequest> requests;
    std::vector<PendingSample *> runnable;
    std::set<engine::AdapterId> pinned;  // adapters of this batch: never evicted while it runs
    for (auto & pending : batch) {
        auto adapter = sampler_adapter(engine, model, pending.sampler, pinned);
        if (!adapter.ok()) {
            fail_future(pending.request_id, adapter.error());
            continue;
        }
        pinned.insert(*adapter);
        pending.request.adapter = *adapter;
        requests.push_back(std::move(pending.request));
        runnable.push_back(&pending);
    }
    auto results =
        guarded_engine_call<std::vector<Result<engine::SampleOutput>>>([&] { return engine.sample(requests); });
    for (size_t i = 0; i < runnable.size(); ++i) {
        const std::string & id = runnable[i]->request_id;
        if (!results.ok() || i >= results->size() || !(*results)[i].ok()) {
            fail_future(id, !results.ok()          ? results.error()
                            : i >= results->size() ? internal_error("engine returned too few sample results")
                                                   : (*results)[i].error());
            continue;
        }
        futures_->complete(id, wire::encode_sample_response_json(*(*results)[i], runnable[i]->encoding).dump(),
                           wire::encode_sample_response_proto(*(*results)[i], runnable[i]->encoding));
    }
    trim_sampler_adapters(engine, model);
    in_flight_samples_ -= static_cast<int64_t>(batch.size());
}

// Keeps at most max_cached_sampler_adapters sampler adapters loaded, dropping the least recently used.
void App::trim_sampler_adapters(engine::Engine & engine, ServedModel & model) {
    while (model.sampler_adapters.size() > options_.max_cached_sampler_adapters) {
        (void)engine.remove_adapter(model.sampler_adapters.back().second);
        model.sampler_adapters.pop_back();
    }
}

}  // namespace tinkerd::api
