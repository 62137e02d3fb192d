// Sampling numerics (sampler.h): request validation, per-sequence seeds, token choice with top-k/top-p
// and top logprobs; and Engine::sample, the submit-all-then-step convenience over the continuous loop.
#include "engine/sampler.h"

#include <algorithm>
#include <cmath>
#include <map>
#include <numeric>

#include "engine/image_layout.h"

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
    TRY_STATUS(check_images(r.prompt, r.prompt_images, config, "prompt: "));
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
    if (r.top_logprobs < 0 || r.top_logprobs > MAX_TOP_LOGPROBS) {
        return invalid_argument("top_logprobs must be in [0, " + std::to_string(MAX_TOP_LOGPROBS) + "], got " +
                                std::to_string(r.top_logprobs));
    }
    if (r.topk_prompt_logprobs < 0) {
        return invalid_argument("topk_prompt_logprobs must be >= 0, got " + std::to_string(r.topk_prompt_logprobs));
    }
    const int64_t n = static_cast<int64_t>(r.prompt.size());
    if (r.target_prompt_k < 0 || static_cast<int64_t>(r.target_prompt_ids.size()) != (n - 1) * r.target_prompt_k) {
        return invalid_argument("target_prompt_logprobs must have len(prompt) - 1 = " + std::to_string(n - 1) +
                                " rows");
    }
    for (int64_t id : r.target_prompt_ids) {
        if (id < -1 || id >= config.vocab_size) {
            return invalid_argument("target_prompt_logprobs holds token id " + std::to_string(id) + " outside [-1, " +
                                    std::to_string(config.vocab_size) + ")");
        }
    }
    if (r.prompt_alt_tokens_k < 0) {
        return invalid_argument("prompt_alt_tokens_k must be >= 0, got " + std::to_string(r.prompt_alt_tokens_k));
    }
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

// The n largest scores as (token, score - shift), best first, ties to the lower id.
TopLogprobs top_entries(const double * scores, int64_t vocab, int64_t n, double shift) {
    n = std::min(n, vocab);
    if (n <= 0) {
        return {};
    }
    std::vector<int64_t> order(vocab);
    std::iota(order.begin(), order.end(), 0);
    std::partial_sort(order.begin(), order.begin() + n, order.end(),
                      [&](int64_t a, int64_t b) { return scores[a] > scores[b] || (scores[a] == scores[b] && a < b); });
    TopLogprobs top;
    for (int64_t i = 0; i < n; ++i) {
        top.emplace_back(order[i], static_cast<float>(scores[order[i]] - shift));
    }
    return top;
}

}  // namespace

TokenChoice choose_token(const double * logits, int64_t vocab, const SamplingParams & params, std::mt19937_64 & rng,
                         int64_t top_n) {
    if (params.temperature == 0) {
        const int64_t best = std::max_element(logits, logits + vocab) - logits;
        const double lse = log_sum_exp(logits, vocab);
        return {best, logits[best] - lse, top_entries(logits, vocab, top_n, lse)};
    }
    // log_softmax(logits / T), computed as log_softmax((logits - max) / T): the same values, but a tiny T
    // (1e-308) gives 0 and -inf instead of inf - inf = NaN (found probing asample with the values its schema allows).
    const double top_logit = *std::max_element(logits, logits + vocab);
    std::vector<double> logprobs(logits, logits + vocab);
    for (double & x : logprobs) {
        x = (x - top_logit) / params.temperature;
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
    return {token, logprobs[token], top_entries(logprobs.data(), vocab, top_n, 0.0)};
}

// Submits every request, then steps the loop until each of them has finished.
std::vector<Result<SampleOutput>> Engine::sample(const std::vector<SampleRequest> & requests) {
    std::vector<Result<SampleOutput>> results(requests.size(), Result<SampleOutput>(internal_error("not run")));
    std::map<SampleHandle, size_t> index_of;
    for (size_t i = 0; i < requests.size(); ++i) {
        auto handle = sample_submit(requests[i]);
        if (handle.ok()) {
            index_of[*handle] = i;
        } else {
            results[i] = handle.error();
        }
    }
    while (!index_of.empty()) {
        for (FinishedSample & finished : sample_step()) {
            auto it = index_of.find(finished.handle);
            if (it != index_of.end()) {
                results[it->second] = std::move(finished.output);
                index_of.erase(it);
            }
        }
        const SampleStats stats = sample_stats();
        if (!index_of.empty() && stats.queued == 0 && stats.running == 0) {
            for (const auto & [handle, i] : index_of) {
                results[i] = internal_error("sample request " + std::to_string(handle) + " was lost");
            }
            break;
        }
    }
    return results;
}

}  // namespace tinkerd::engine
