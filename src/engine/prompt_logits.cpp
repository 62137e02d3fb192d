// Prompt logits for prefill (prompt_logits.h): rows are projected to the vocabulary in chunks, so a
// long prompt with prompt logprobs never holds [n, V] logits at once.
#include "engine/prompt_logits.h"

#include <cmath>

namespace tinkerd::engine {

namespace {

constexpr int64_t LOGIT_CHUNK = 64;  // prompt rows per lm_head call when prompt logprobs are asked

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
        torch::Tensor logits = t.logits(h.narrow(0, start, m), {{0, m, adapter}}).to(torch::kCPU, torch::kFloat64);
        if (want) {
            fill_prompt_logprobs(logits - logits.logsumexp(-1, true), start, r, out);  // [m, V]
        }
        if (start + m == n) {
            last = logits[m - 1].contiguous();  // [V]
        }
    }
    return last;
}

}  // namespace tinkerd::engine
