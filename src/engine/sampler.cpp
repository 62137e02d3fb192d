// EngineImpl::sample: validates each request, prefills every prompt once (one batched cached forward,
// logits of every prompt row only when prompt logprobs are asked), forks each prompt's KV cache into
// num_samples sequences, then runs decode steps that batch every live sequence of every request (rows
// grouped by adapter, so each step mixes adapters and the base model). Plus the numerics in sampler.h.
#include "engine/sampler.h"

#include <algorithm>
#include <cmath>
#include <numeric>

#include "common/log.h"
#include "engine/engine_impl.h"

namespace tinkerd::engine {

Result<void> validate_sample_request(const SampleRequest & r, const model::ModelConfig & config) {
    const auto & p = r.params;
    if (r.prompt.empty()) {
        return invalid_argument("prompt must hold at least one token");
    }
    for (size_t i = 0; i < r.prompt.size(); ++i) {
        if (r.prompt[i] < 0 || r.prompt[i] >= config.vocab_size) {
            return invalid_argument("prompt[" + std::to_string(i) + "]: token id " + std::to_string(r.prompt[i]) +
                                    " is outside the vocabulary [0, " + std::to_string(config.vocab_size) + ")");
        }
    }
    if (r.num_samples < 1 || r.num_samples > MAX_NUM_SAMPLES) {
        return invalid_argument("num_samples must be in [1, " + std::to_string(MAX_NUM_SAMPLES) + "], got " +
                                std::to_string(r.num_samples));
    }
    if (p.max_tokens < 0) {
        return invalid_argument("max_tokens must be >= 0, got " + std::to_string(p.max_tokens));
    }
    if (!(p.temperature >= 0) || !std::isfinite(p.temperature)) {
        return invalid_argument("temperature must be a finite number >= 0 (0 = greedy), got " +
                                std::to_string(p.temperature));
    }
    if (!(p.top_p > 0 && p.top_p <= 1)) {
        return invalid_argument("top_p must be in (0, 1], got " + std::to_string(p.top_p));
    }
    if (p.top_k != -1 && p.top_k < 1) {
        return invalid_argument("top_k must be -1 (no limit) or >= 1, got " + std::to_string(p.top_k));
    }
    if (r.topk_prompt_logprobs < 0) {
        return invalid_argument("topk_prompt_logprobs must be >= 0, got " + std::to_string(r.topk_prompt_logprobs));
    }
    const int64_t n = static_cast<int64_t>(r.prompt.size());
    if (config.max_position_embeddings > 0 && n + p.max_tokens > config.max_position_embeddings) {
        return invalid_argument("prompt length (" + std::to_string(n) + ") + max_tokens (" +
                                std::to_string(p.max_tokens) + ") exceeds max_position_embeddings (" +
                                std::to_string(config.max_position_embeddings) + ")");
    }
    return {};
}

uint64_t splitmix64(uint64_t x) {
    uint64_t z = x + 0x9e3779b97f4a7c15ULL;
    z = (z ^ (z >> 30)) * 0xbf58476d1ce4e5b9ULL;
    z = (z ^ (z >> 27)) * 0x94d049bb133111ebULL;
    return z ^ (z >> 31);
}

uint64_t sequence_seed(uint64_t seed, int64_t index) {
    return splitmix64(splitmix64(seed) ^ static_cast<uint64_t>(index));
}

namespace {

double log_sum_exp(const double * x, int64_t n) {
    const double m = *std::max_element(x, x + n);
    double sum = 0;
    for (int64_t i = 0; i < n; ++i) {
        sum += std::exp(x[i] - m);
    }
    return m + std::log(sum);
}

// Indices of the tokens kept by top-k then top-p, most probable first (all, in id order, when neither
// truncates); probs [V] sum to 1.
std::vector<int64_t> kept_tokens(const std::vector<double> & probs, const SamplingParams & params) {
    const int64_t V = static_cast<int64_t>(probs.size());
    std::vector<int64_t> order(V);
    std::iota(order.begin(), order.end(), 0);
    if (params.top_k == -1 && params.top_p >= 1.0) {
        return order;
    }
    auto more_probable = [&](int64_t a, int64_t b) { return probs[a] > probs[b] || (probs[a] == probs[b] && a < b); };
    const int64_t k = params.top_k == -1 ? V : std::min(params.top_k, V);
    std::partial_sort(order.begin(), order.begin() + k, order.end(), more_probable);
    order.resize(k);
    if (params.top_p < 1.0) {
        double mass = 0;
        for (int64_t t : order) {
            mass += probs[t];
        }
        double cum = 0;
        size_t keep = 0;
        while (keep < order.size() && (keep == 0 || cum < params.top_p * mass)) {
            cum += probs[order[keep++]];
        }
        order.resize(keep);
    }
    return order;
}

}  // namespace

TokenChoice choose_token(const double * logits, int64_t vocab, const SamplingParams & params, std::mt19937_64 & rng) {
    if (params.temperature == 0) {
        const int64_t best = std::max_element(logits, logits + vocab) - logits;
        return {best, logits[best] - log_sum_exp(logits, vocab)};
    }
    std::vector<double> logprobs(logits, logits + vocab);  // log_softmax(logits / T)
    for (double & x : logprobs) {
        x /= params.temperature;
    }
    const double lse = log_sum_exp(logprobs.data(), vocab);
    std::vector<double> probs(vocab);
    for (int64_t i = 0; i < vocab; ++i) {
        logprobs[i] -= lse;
        probs[i] = std::exp(logprobs[i]);
    }
    const std::vector<int64_t> kept = kept_tokens(probs, params);
    double mass = 0;
    for (int64_t t : kept) {
        mass += probs[t];
    }
    const double u = static_cast<double>(rng() >> 11) * 0x1.0p-53 * mass;  // uniform in [0, mass)
    double acc = 0;
    int64_t token = kept.back();  // if rounding leaves u beyond the last partial sum
    for (int64_t t : kept) {
        acc += probs[t];
        if (u < acc) {
            token = t;
            break;
        }
    }
    return {token, logprobs[token]};
}

namespace {

constexpr int64_t LOGIT_CHUNK = 64;  // prompt rows per lm_head call when prompt logprobs are asked

// A request that passed validation, and what its prefill produced.
struct PlannedRequest {
    size_t index = 0;  // position in the caller's requests
    const SampleRequest * request = nullptr;
    const Adapter * adapter = nullptr;  // nullptr = base model
    SequenceCache cache;                // the prompt's K/V after prefill
    torch::Tensor last_logits;          // [V] float64 on the CPU, at the last prompt position
    SampleOutput output;
};

// One sequence being sampled.
struct Sequence {
    size_t plan = 0;  // index in the planned requests
    const SampleRequest * request = nullptr;
    const Adapter * adapter = nullptr;
    SequenceCache cache;
    std::mt19937_64 rng;
    SampledSequence out;
    bool done = false;
};

AdapterId id_of(const Adapter * adapter) {
    return adapter ? adapter->id : BASE_MODEL;
}

// Segments of consecutive rows sharing an adapter; row_adapters[i] is row i's adapter.
std::vector<RowSegment> segments_of(const std::vector<const Adapter *> & row_adapters) {
    std::vector<RowSegment> segments;
    for (size_t i = 0; i < row_adapters.size(); ++i) {
        const int64_t row = static_cast<int64_t>(i);
        if (!segments.empty() && segments.back().adapter == row_adapters[i]) {
            segments.back().end = row + 1;
        } else {
            segments.push_back({row, row + 1, row_adapters[i]});
        }
    }
    return segments;
}

// Prompt logprobs and top-K lists (temperature 1) of the positions predicted by rows [start, start + m)
// of the prompt; logprobs [m, V] float64 on the CPU. Row i predicts prompt position i + 1.
void fill_prompt_logprobs(const torch::Tensor & logprobs, int64_t start, const SampleRequest & r, SampleOutput & out) {
    const int64_t m = logprobs.size(0), n = static_cast<int64_t>(r.prompt.size());
    const auto lp = logprobs.accessor<double, 2>();
    torch::Tensor top_values, top_ids;  // [m, K], best first
    if (r.topk_prompt_logprobs > 0) {
        std::tie(top_values, top_ids) = logprobs.topk(std::min(r.topk_prompt_logprobs, logprobs.size(1)), -1);
    }
    for (int64_t i = 0; i < m && start + i + 1 < n; ++i) {
        const int64_t pos = start + i + 1;
        if (r.prompt_logprobs) {
            out.prompt_logprobs[pos] = static_cast<float>(lp[i][r.prompt[pos]]);
        }
        if (top_ids.defined()) {
            const auto ids = top_ids.accessor<int64_t, 2>();
            const auto values = top_values.accessor<double, 2>();
            for (int64_t j = 0; j < top_ids.size(1); ++j) {
                out.topk_prompt_logprobs[pos].emplace_back(ids[i][j], static_cast<float>(values[i][j]));
            }
        }
    }
}

// Logits of a request's prompt rows h [n, C]: prompt logprobs when asked (in chunks of rows), and the
// last row's logits [V] (float64, CPU) for its first sampled token.
void prompt_outputs(Transformer & t, const torch::Tensor & h, PlannedRequest & p) {
    const SampleRequest & r = *p.request;
    const int64_t n = h.size(0);
    const bool want = r.prompt_logprobs || r.topk_prompt_logprobs > 0;
    if (r.prompt_logprobs) {
        p.output.prompt_logprobs.assign(n, std::nanf(""));
    }
    if (r.topk_prompt_logprobs > 0) {
        p.output.topk_prompt_logprobs.assign(n, {});
    }
    for (int64_t start = want ? 0 : n - 1; start < n; start += LOGIT_CHUNK) {
        const int64_t m = std::min(LOGIT_CHUNK, n - start);
        torch::Tensor logits = t.logits(h.narrow(0, start, m), {{0, m, p.adapter}}).to(torch::kCPU, torch::kFloat64);
        if (want) {
            fill_prompt_logprobs(logits - logits.logsumexp(-1, true), start, r, p.output);  // [m, V]
        }
        if (start + m == n) {
            p.last_logits = logits[m - 1].contiguous();  // [V]
        }
    }
}

// One batched cached forward over every prompt (rows grouped by adapter); fills each request's cache,
// prompt logprobs and last logits.
void prefill(Transformer & t, std::vector<PlannedRequest> & planned) {
    std::vector<size_t> order(planned.size());
    std::iota(order.begin(), order.end(), 0);
    std::stable_sort(order.begin(), order.end(),
                     [&](size_t a, size_t b) { return id_of(planned[a].adapter) < id_of(planned[b].adapter); });
    CachedBatch batch;
    std::vector<int64_t> tokens;
    std::vector<const Adapter *> row_adapters;
    for (size_t i : order) {
        PlannedRequest & p = planned[i];
        const auto & prompt = p.request->prompt;
        p.cache = t.make_cache();
        p.cache.reserve(static_cast<int64_t>(prompt.size()) + p.request->params.max_tokens);
        batch.lengths.push_back(static_cast<int64_t>(prompt.size()));
        batch.caches.push_back(&p.cache);
        tokens.insert(tokens.end(), prompt.begin(), prompt.end());
        row_adapters.insert(row_adapters.end(), prompt.size(), p.adapter);
    }
    batch.tokens = torch::tensor(tokens, torch::kInt64).to(t.device());
    batch.segments = segments_of(row_adapters);
    torch::Tensor h = t.hidden_states_cached(batch);  // [T, C]
    int64_t offset = 0;
    for (size_t s = 0; s < order.size(); ++s) {
        prompt_outputs(t, h.narrow(0, offset, batch.lengths[s]), planned[order[s]]);
        offset += batch.lengths[s];
    }
}

// Appends a chosen token and applies the stop rules: a stop token or EOS (kept, once, as the last
// token) or stop_check -> stopped; max_tokens -> done without stopped.
void append_token(Sequence & s, const TokenChoice & choice, int64_t eos) {
    const SampleRequest & r = *s.request;
    s.out.tokens.push_back(choice.token);
    s.out.logprobs.push_back(static_cast<float>(choice.logprob));
    const auto & stops = r.params.stop_token_ids;
    const bool stop_token = choice.token == eos || std::find(stops.begin(), stops.end(), choice.token) != stops.end();
    if (stop_token || (r.stop_check && r.stop_check(s.out.tokens))) {
        s.out.stopped = true;
        s.done = true;
    } else if (static_cast<int64_t>(s.out.tokens.size()) >= r.params.max_tokens) {
        s.done = true;
    }
}

uint64_t random_seed() {
    std::random_device device;
    return (static_cast<uint64_t>(device()) << 32) ^ device();
}

// Forks each prompt's cache into its num_samples sequences (the last one takes the original), seeds
// each, and draws every sequence's first token from the prompt's last logits.
std::vector<Sequence> start_sequences(std::vector<PlannedRequest> & planned, int64_t eos) {
    std::vector<Sequence> seqs;
    for (size_t k = 0; k < planned.size(); ++k) {
        PlannedRequest & p = planned[k];
        const SampleRequest & r = *p.request;
        const uint64_t seed = r.params.seed ? *r.params.seed : random_seed();
        const int64_t V = p.last_logits.size(0);
        for (int64_t i = 0; i < r.num_samples; ++i) {
            Sequence s;
            s.plan = k;
            s.request = &r;
            s.adapter = p.adapter;
            s.cache = i + 1 == r.num_samples ? std::move(p.cache) : p.cache.fork();
            s.rng.seed(sequence_seed(seed, i));
            s.done = r.params.max_tokens == 0;
            if (!s.done) {
                append_token(s, choose_token(p.last_logits.data_ptr<double>(), V, r.params, s.rng), eos);
            }
            seqs.push_back(std::move(s));
        }
    }
    return seqs;
}

// Decode steps until every sequence is done: each step feeds every live sequence's last token (rows
// grouped by adapter) through one cached forward and draws the next token per sequence.
void decode(Transformer & t, std::vector<Sequence> & seqs, int64_t eos) {
    std::vector<Sequence *> order;
    for (Sequence & s : seqs) {
        order.push_back(&s);
    }
    std::stable_sort(order.begin(), order.end(),
                     [](const Sequence * a, const Sequence * b) { return id_of(a->adapter) < id_of(b->adapter); });
    while (true) {
        std::erase_if(order, [](const Sequence * s) { return s->done; });
        if (order.empty()) {
            return;
        }
        CachedBatch batch;
        std::vector<int64_t> tokens;
        std::vector<const Adapter *> row_adapters;
        for (Sequence * s : order) {
            tokens.push_back(s->out.tokens.back());
            batch.lengths.push_back(1);
            batch.caches.push_back(&s->cache);
            row_adapters.push_back(s->adapter);
        }
        batch.tokens = torch::tensor(tokens, torch::kInt64).to(t.device());
        batch.segments = segments_of(row_adapters);
        torch::Tensor h = t.hidden_states_cached(batch);                                                   // [B, C]
        torch::Tensor logits = t.logits(h, batch.segments).to(torch::kCPU, torch::kFloat64).contiguous();  // [B, V]
        const int64_t V = logits.size(1);
        for (size_t b = 0; b < order.size(); ++b) {
            Sequence & s = *order[b];
            append_token(s, choose_token(logits.data_ptr<double>() + b * V, V, s.request->params, s.rng), eos);
        }
    }
}

}  // namespace

std::vector<Result<SampleOutput>> EngineImpl::sample(const std::vector<SampleRequest> & requests) {
    std::vector<Result<SampleOutput>> results(requests.size(), Result<SampleOutput>(internal_error("not run")));
    std::vector<PlannedRequest> planned;
    for (size_t i = 0; i < requests.size(); ++i) {
        const SampleRequest & r = requests[i];
        if (r.adapter != BASE_MODEL && !adapters_.count(r.adapter)) {
            results[i] = not_found("unknown adapter " + std::to_string(r.adapter));
            continue;
        }
        auto status = validate_sample_request(r, config());
        if (!status.ok()) {
            results[i] = status.error();
            continue;
        }
        PlannedRequest p;
        p.index = i;
        p.request = &r;
        p.adapter = r.adapter == BASE_MODEL ? nullptr : adapters_.at(r.adapter).get();
        planned.push_back(std::move(p));
    }
    if (planned.empty()) {
        return results;
    }
    try {
        torch::NoGradGuard no_grad;
        prefill(*transformer_, planned);
        std::vector<Sequence> seqs = start_sequences(planned, config().eos_token_id);
        decode(*transformer_, seqs, config().eos_token_id);
        for (Sequence & s : seqs) {
            planned[s.plan].output.sequences.push_back(std::move(s.out));
        }
        for (PlannedRequest & p : planned) {
            results[p.index] = std::move(p.output);
        }
    } catch (const c10::Error & e) {
        LOG_ERR("engine", "sample failed: %s", e.what_without_backtrace());
        for (const PlannedRequest & p : planned) {
            results[p.index] = internal_error(std::string("engine error: ") + e.what_without_backtrace());
        }
    }
    return results;
}

}  // namespace tinkerd::engine
