// Sampling numerics (sampler.h): request validation, per-sequence seeds, token choice with top-k/top-p
// and top logprobs; and Engine::sample, the submit-all-then-step convenience over the continuous loop.
#include "engine/sampler.h"

#include <algorithm>
#include <cmath>
#include <map>
#include <numeric>

#include "engine/host_access.h"
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

// Indices of the tokens kept by top-k then top-p, most probable first; probs [V] sum to 1. Empty when neither
// truncates (every token, in id order).
std::vector<int64_t> kept_tokens(const double * probs, int64_t V, const SamplingParams & params) {
    if (params.top_k == -1 && params.top_p >= 1.0) {
        return {};
    }
    std::vector<int64_t> order(V);
    std::iota(order.begin(), order.end(), 0);
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

// Draws one of the kept tokens (every token in id order when `kept` is empty) in proportion to probs.
int64_t draw(const double * probs, int64_t V, const std::vector<int64_t> & kept, std::mt19937_64 & rng) {
    const bool all = kept.empty();
    const int64_t n = all ? V : static_cast<int64_t>(kept.size());
    auto token_at = [&](int64_t i) { return all ? i : kept[i]; };
    double mass = 0;
    for (int64_t i = 0; i < n; ++i) {
        mass += probs[token_at(i)];
    }
    const double u = static_cast<double>(rng() >> 11) * 0x1.0p-53 * mass;  // uniform in [0, mass)
    double acc = 0;
    for (int64_t i = 0; i < n; ++i) {
        acc += probs[token_at(i)];
        if (u < acc) {
            return token_at(i);
        }
    }
    return token_at(n - 1);  // if rounding leaves u beyond the last partial sum
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

// The passes over the vocabulary (max, exp, log-sum-exp) run as torch's vectorised float64 ops: with scalar
// std::exp they took ~0.5 ms a row at a 49k vocabulary, more than a small model's whole decode step.
TokenChoice choose_token(const double * logits, int64_t vocab, const SamplingParams & params, std::mt19937_64 & rng,
                         int64_t top_n) {
    torch::NoGradGuard no_grad;  // choices may run on OpenMP workers, which start with grad mode on
    const torch::Tensor x = host_wrap(const_cast<double *>(logits), {vocab}, torch::kFloat64);  // [V], only read
    if (params.temperature == 0) {
        const auto best =
            host_value<int64_t>(x.argmax(), "choose_token");  // the first of equal maxima, as std::max_element
        const auto lse = host_value<double>(x.logsumexp(0), "choose_token");
        return {best, logits[best] - lse, top_entries(logits, vocab, top_n, lse)};
    }
    // log_softmax(logits / T), computed as log_softmax((logits - max) / T): the same values, but a tiny T
    // (1e-308) gives 0 and -inf instead of inf - inf = NaN (found probing asample with the values its schema allows).
    torch::Tensor logprobs = (x - x.max()).div_(params.temperature);  // [V]
    logprobs.sub_(logprobs.logsumexp(0));
    const torch::Tensor probs = logprobs.exp();  // [V]
    const double * p = host_data<const double>(probs, "choose_token");
    const int64_t token = draw(p, vocab, kept_tokens(p, vocab, params), rng);
    const double * lp = host_data<const double>(logprobs, "choose_token");
    return {token, lp[token], top_entries(lp, vocab, top_n, 0.0)};
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
