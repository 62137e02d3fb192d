// Prompt logits for prefill (prompt_logits.h): rows are projected to the vocabulary in chunks, so a
// long prompt with prompt logprobs never holds [n, V] logits at once.
#include "engine/prompt_logits.h"

#include <algorithm>
#include <cmath>
#include <random>

#include "engine/host_access.h"
#include "engine/sampler.h"

namespace tinkerd::engine {

namespace {

constexpr int64_t LOGIT_CHUNK = 64;  // prompt rows per lm_head call when prompt logprobs are asked

// Prompt logprobs and top-K lists (temperature 1) of the positions predicted by rows [start, start + m)
// of the prompt; logprobs [m, V] float64 on the CPU. Row i predicts prompt position i + 1.
void fill_prompt_logprobs(const torch::Tensor & logprobs, int64_t start, const SampleRequest & r, SampleOutput & out) {
    const int64_t m = logprobs.size(0), V = logprobs.size(1), n = static_cast<int64_t>(r.prompt.size());
    const double * lp = host_data<const double>(logprobs, "prompt logprobs");  // [m, V]
    torch::Tensor top_values, top_ids;                                         // [m, K], best first
    if (r.topk_prompt_logprobs > 0) {
        std::tie(top_values, top_ids) = logprobs.topk(std::min(r.topk_prompt_logprobs, V), -1);
        top_values = top_values.contiguous();
        top_ids = top_ids.contiguous();
    }
    const int64_t K = top_ids.defined() ? top_ids.size(1) : 0;
    const int64_t * ids = K ? host_data<const int64_t>(top_ids, "prompt logprobs") : nullptr;      // [m, K]
    const double * values = K ? host_data<const double>(top_values, "prompt logprobs") : nullptr;  // [m, K]
    for (int64_t i = 0; i < m && start + i + 1 < n; ++i) {
        const int64_t pos = start + i + 1;
        if (r.prompt_logprobs) {
            out.prompt_logprobs[pos] = static_cast<float>(lp[i * V + r.prompt[pos]]);
        }
        for (int64_t j = 0; j < K; ++j) {
            out.topk_prompt_logprobs[pos].emplace_back(ids[i * K + j], static_cast<float>(values[i * K + j]));
        }
    }
}

// target_prompt_logprobs of row i (predicting prompt position pos): the log-softmax at each asked id.
void fill_target_logprobs(const double * lp_row, int64_t pos, const SampleRequest & r, SampleOutput & out) {
    const int64_t K = r.target_prompt_k;
    for (int64_t j = 0; j < K; ++j) {
        const int64_t id = r.target_prompt_ids[(pos - 1) * K + j];
        if (id >= 0) {
            out.target_prompt_logprobs[(pos - 1) * K + j] = static_cast<float>(lp_row[id]);
        }
    }
}

// prompt_alt_tokens of row i: k draws from softmax(lp / temperature) (the argmax k times at temperature 0),
// each with its temperature-1 logprob. V-long row, inverse-CDF walks of uniforms from `rng`.
void draw_alt_tokens(const double * lp_row, int64_t V, int64_t pos, const SampleRequest & r, std::mt19937_64 & rng,
                     SampleOutput & out) {
    const int64_t k = r.prompt_alt_tokens_k;
    const double temperature = r.params.temperature;
    std::vector<double> cdf(static_cast<size_t>(V));
    const double top = *std::max_element(lp_row, lp_row + V);
    double total = 0;
    for (int64_t v = 0; v < V; ++v) {
        total += temperature > 0 ? std::exp((lp_row[v] - top) / temperature) : 0.0;
        cdf[static_cast<size_t>(v)] = total;
    }
    std::uniform_real_distribution<double> uniform(0.0, 1.0);
    for (int64_t j = 0; j < k; ++j) {
        int64_t id = std::max_element(lp_row, lp_row + V) - lp_row;
        if (temperature > 0) {
            const double u = uniform(rng) * total;
            id = std::min<int64_t>(V - 1, std::upper_bound(cdf.begin(), cdf.end(), u) - cdf.begin());
        }
        out.prompt_alt_tokens[(pos - 1) * k + j] = id;
        out.prompt_alt_logprobs[(pos - 1) * k + j] = static_cast<float>(lp_row[id]);
    }
}

// The SDK 0.38 prompt extras of rows [start, start + m); logprobs [m, V] float64 on the CPU.
void fill_prompt_extras(const torch::Tensor & logprobs, int64_t start, const SampleRequest & r, std::mt19937_64 & rng,
                        SampleOutput & out) {
    const int64_t m = logprobs.size(0), V = logprobs.size(1), n = static_cast<int64_t>(r.prompt.size());
    const double * lp = host_data<const double>(logprobs, "prompt extras");  // [m, V]
    for (int64_t i = 0; i < m && start + i + 1 < n; ++i) {
        if (r.target_prompt_k > 0) {
            fill_target_logprobs(lp + i * V, start + i + 1, r, out);
        }
        if (r.prompt_alt_tokens_k > 0) {
            draw_alt_tokens(lp + i * V, V, start + i + 1, r, rng, out);
        }
    }
}

bool wants_extras(const SampleRequest & r) {
    return r.target_prompt_k > 0 || r.prompt_alt_tokens_k > 0;
}

// The draws' generator: from the request seed when given (a stream of its own), else random.
std::mt19937_64 alt_token_rng(const SampleRequest & r) {
    return std::mt19937_64(r.params.seed ? splitmix64(*r.params.seed ^ 0x616c745f746f6bULL) : std::random_device{}());
}

}  // namespace

AdapterId id_of(const Adapter * adapter) {
    return adapter ? adapter->id : BASE_MODEL;
}

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

torch::Tensor prompt_logits(const Transformer & t, const torch::Tensor & h, const SampleRequest & r,
                            const Adapter * adapter, SampleOutput & out) {
    const int64_t n = h.size(0);
    const bool want = r.prompt_logprobs || r.topk_prompt_logprobs > 0 || wants_extras(r);
    if (r.prompt_logprobs) {
        out.prompt_logprobs.assign(n, std::nanf(""));
    }
    if (r.topk_prompt_logprobs > 0) {
        out.topk_prompt_logprobs.assign(n, {});
    }
    out.target_prompt_logprobs.assign(static_cast<size_t>((n - 1) * r.target_prompt_k), 0.0F);
    out.prompt_alt_tokens.assign(static_cast<size_t>((n - 1) * r.prompt_alt_tokens_k), 0);
    out.prompt_alt_logprobs.assign(static_cast<size_t>((n - 1) * r.prompt_alt_tokens_k), 0.0F);
    std::mt19937_64 rng = alt_token_rng(r);
    torch::Tensor last;
    for (int64_t start = want ? 0 : n - 1; start < n; start += LOGIT_CHUNK) {
        const int64_t m = std::min(LOGIT_CHUNK, n - start);
        const torch::Tensor logits = to_host(t.logits(h.narrow(0, start, m), {{0, m, adapter}}), torch::kFloat64);
        if (want) {
            const torch::Tensor logprobs = (logits - logits.logsumexp(-1, true)).contiguous();  // [m, V]
            fill_prompt_logprobs(logprobs, start, r, out);
            fill_prompt_extras(logprobs, start, r, rng, out);
        }
        if (start + m == n) {
            last = logits[m - 1].contiguous();  // [V]
        }
    }
    return last;
}

}  // namespace tinkerd::engine
