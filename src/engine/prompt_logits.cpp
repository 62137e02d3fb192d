// Prompt logits for prefill (prompt_logits.h): rows are projected to the vocabulary in chunks, so a
// long prompt with prompt logprobs never holds [n, V] logits at once.
#include "engine/prompt_logits.h"

#include <cmath>

#include "engine/host_access.h"

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
    const bool want = r.prompt_logprobs || r.topk_prompt_logprobs > 0;
    if (r.prompt_logprobs) {
        out.prompt_logprobs.assign(n, std::nanf(""));
    }
    if (r.topk_prompt_logprobs > 0) {
        out.topk_prompt_logprobs.assign(n, {});
    }
    torch::Tensor last;
    for (int64_t start = want ? 0 : n - 1; start < n; start += LOGIT_CHUNK) {
        const int64_t m = std::min(LOGIT_CHUNK, n - start);
        const torch::Tensor logits = to_host(t.logits(h.narrow(0, start, m), {{0, m, adapter}}), torch::kFloat64);
        if (want) {
            fill_prompt_logprobs((logits - logits.logsumexp(-1, true)).contiguous(), start, r, out);  // [m, V]
        }
        if (start + m == n) {
            last = logits[m - 1].contiguous();  // [V]
        }
    }
    return last;
}

}  // namespace tinkerd::engine
