// SampleLoop (sample_loop.h): admission under the KV budget, batched prefill (a prompt once, forked
// into its num_samples sequences), one batched decode step per call (rows grouped by adapter), growth of
// caches in chunks, preemption of the newest request, and the stop rules of each generated token.
#include "engine/sample_loop.h"

#include <algorithm>
#include <numeric>

#include "common/log.h"
#include "engine/host_access.h"
#include "engine/kernels/quant_int8.h"
#include "engine/prompt_logits.h"
#include "engine/sampler.h"

namespace tinkerd::engine {

namespace {

constexpr int64_t MAX_PREFILL_TOKENS_PER_STEP = 8192;  // more prompts wait for the next step

uint64_t random_seed() {
    std::random_device device;
    return (static_cast<uint64_t>(device()) << 32) ^ device();
}

}  // namespace

int64_t SampleLoop::token_limit(const SampleRequest & r) {
    return static_cast<int64_t>(r.prompt.size()) + std::max<int64_t>(r.params.max_tokens, 1);
}

int64_t SampleLoop::chunked_capacity(int64_t needed, int64_t limit) {
    return std::min(needed + std::max<int64_t>(16, needed / 4), std::max(limit, needed));
}

SampleLoop::SampleLoop(Transformer & transformer, int64_t kv_budget_bytes) : t_(transformer) {
    const CacheShape & shape = t_.cache_shape();
    bytes_per_token_ = std::max<int64_t>(1, shape.kv_bytes_per_token());
    state_tokens_ = (shape.state_bytes() + bytes_per_token_ - 1) / bytes_per_token_;
    budget_tokens_ = std::max<int64_t>(1, kv_budget_bytes / bytes_per_token_);
}

Result<SampleHandle> SampleLoop::submit(SampleRequest request, const Adapter * adapter) {
    const int64_t worst = request.num_samples * (token_limit(request) + state_tokens_);
    if (worst > budget_tokens_) {
        const int64_t mib = 1 << 20;
        return invalid_argument("the request needs up to " + std::to_string(worst * bytes_per_token_ / mib) +
                                " MiB of KV cache (num_samples x (prompt + max_tokens" +
                                (state_tokens_ > 0 ? " + recurrent state" : "") + ") = " + std::to_string(worst) +
                                " tokens) but the server's budget is " +
                                std::to_string(budget_tokens_ * bytes_per_token_ / mib) +
                                " MiB; lower max_tokens or num_samples (or raise --kv-cache-mib)");
    }
    const SampleHandle handle = next_handle_++;
    LiveRequest live;
    live.request = std::move(request);
    live.adapter = adapter;
    requests_.emplace(handle, std::move(live));
    waiting_.push_back(handle);
    return handle;
}

std::vector<FinishedSample> SampleLoop::step() {
    try {
        torch::NoGradGuard no_grad;
        const kernels::Int8ActivationsScope int8(int8_activations_);  // prefill and decode; training never
        std::vector<PrefillJob> jobs = admit();
        if (!jobs.empty()) {
            prefill(jobs);
        }
        decode();
    } catch (const c10::Error & e) {
        LOG_ERR("engine", "sampling step failed: %s", e.what_without_backtrace());
        fail_all(std::string("engine error: ") + e.what_without_backtrace());
    }
    return collect_finished();
}

bool SampleLoop::cancel(SampleHandle handle) {
    std::erase(waiting_, handle);
    return requests_.erase(handle) > 0;
}

void SampleLoop::drop_adapter(const Adapter * adapter) {
    for (auto & [handle, r] : requests_) {
        if (r.adapter == adapter && !r.failure) {
            r.failure = not_found("the adapter of this sample request was removed while it ran");
        }
    }
}

SampleStats SampleLoop::stats() const {
    SampleStats s;
    s.queued = static_cast<int64_t>(waiting_.size());
    for (const auto & [handle, r] : requests_) {
        s.running += r.admitted ? 1 : 0;
        for (const Sequence & seq : r.seqs) {
            s.live_sequences += r.admitted && !seq.done ? 1 : 0;
        }
    }
    s.kv_bytes = reserved_tokens() * bytes_per_token_;
    s.kv_budget_bytes = budget_tokens_ * bytes_per_token_;
    s.preemptions = preemptions_;
    return s;
}

int64_t SampleLoop::held_tokens(const SequenceCache & cache) const {
    return cache.capacity() > 0 ? cache.capacity() + state_tokens_ : 0;
}

int64_t SampleLoop::reserved_tokens() const {
    int64_t total = 0;
    for (const auto & [handle, r] : requests_) {
        for (const Sequence & seq : r.seqs) {
            total += held_tokens(seq.cache);
        }
    }
    return total;
}

// KV tokens a queued request takes when admitted: each prompt copy (first admission) or each unfinished
// sequence's prompt + tokens so far (resumption), plus a growth chunk, plus each sequence's state.
int64_t SampleLoop::admission_tokens(const LiveRequest & r) const {
    const int64_t prompt = static_cast<int64_t>(r.request.prompt.size()), limit = token_limit(r.request);
    if (r.seqs.empty()) {
        return r.request.num_samples * (chunked_capacity(prompt, limit) + state_tokens_);
    }
    int64_t total = 0;
    for (const Sequence & seq : r.seqs) {
        total += seq.done
                     ? 0
                     : chunked_capacity(prompt + static_cast<int64_t>(seq.out.tokens.size()), limit) + state_tokens_;
    }
    return total;
}

// Takes queued requests in order while they fit the budget and the per-step prefill cap (the first one
// always, when nothing runs). A resumed request re-prefills each unfinished sequence's prompt + tokens
// but the last, which the next decode step feeds.
std::vector<SampleLoop::PrefillJob> SampleLoop::admit() {
    std::vector<PrefillJob> jobs;
    int64_t reserved = reserved_tokens(), prefill_tokens = 0;
    while (!waiting_.empty()) {
        const SampleHandle handle = waiting_.front();
        LiveRequest & r = requests_.at(handle);
        if (r.failure) {  // its adapter is gone: collect_finished reports it
            waiting_.pop_front();
            continue;
        }
        const int64_t need = admission_tokens(r);
        const bool busy = reserved > 0 || !jobs.empty();
        if (busy && (reserved + need > budget_tokens_ || prefill_tokens >= MAX_PREFILL_TOKENS_PER_STEP)) {
            break;
        }
        waiting_.pop_front();
        r.admitted = true;
        r.admit_order = next_admit_order_++;
        reserved += need;
        const auto & prompt = r.request.prompt;
        const int64_t limit = token_limit(r.request);
        if (r.seqs.empty()) {
            PrefillJob job{&r, prompt, t_.make_cache(), nullptr};
            job.fresh_cache.reserve(chunked_capacity(static_cast<int64_t>(prompt.size()), limit));
            prefill_tokens += static_cast<int64_t>(prompt.size());
            jobs.push_back(std::move(job));
            continue;
        }
        for (Sequence & seq : r.seqs) {
            if (seq.done) {
                continue;
            }
            std::vector<int64_t> context = prompt;
            context.insert(context.end(), seq.out.tokens.begin(), seq.out.tokens.end() - 1);
            seq.cache = t_.make_cache();
            seq.cache.reserve(chunked_capacity(static_cast<int64_t>(context.size()) + 1, limit));
            prefill_tokens += static_cast<int64_t>(context.size());
            jobs.push_back({&r, std::move(context), SequenceCache(), &seq.cache});
        }
    }
    return jobs;
}

// One batched cached forward over every job's tokens (rows grouped by adapter); a fresh prompt's last
// logits then start its sequences.
void SampleLoop::prefill(std::vector<PrefillJob> & jobs) {
    std::stable_sort(jobs.begin(), jobs.end(), [](const PrefillJob & a, const PrefillJob & b) {
        return id_of(a.request->adapter) < id_of(b.request->adapter);
    });
    CachedBatch batch;
    std::vector<int64_t> tokens;
    std::vector<const Adapter *> row_adapters;
    for (PrefillJob & job : jobs) {
        batch.lengths.push_back(static_cast<int64_t>(job.tokens.size()));
        batch.caches.push_back(job.target ? job.target : &job.fresh_cache);
        batch.images.push_back(&job.request->request.prompt_images);  // a prefill is a whole context from 0
        tokens.insert(tokens.end(), job.tokens.begin(), job.tokens.end());
        row_adapters.insert(row_adapters.end(), job.tokens.size(), job.request->adapter);
    }
    batch.tokens = torch::tensor(tokens, torch::kInt64).to(t_.device());
    batch.segments = segments_of(row_adapters);
    torch::Tensor h = t_.hidden_states_cached(batch);  // [T, C]
    int64_t offset = 0;
    for (size_t j = 0; j < jobs.size(); ++j) {
        PrefillJob & job = jobs[j];
        if (!job.target) {
            LiveRequest & r = *job.request;
            torch::Tensor h_prompt = h.narrow(0, offset, batch.lengths[j]);  // [n, C]
            start_sequences(r, job.fresh_cache, prompt_logits(t_, h_prompt, r.request, r.adapter, r.output));
        }
        offset += batch.lengths[j];
    }
}

// Forks the prompt's cache into the request's num_samples sequences (the last takes the original),
// seeds each, and draws each first token from the prompt's last logits [V].
void SampleLoop::start_sequences(LiveRequest & r, SequenceCache & prompt_cache, const torch::Tensor & last_logits) {
    const int64_t n = r.request.num_samples;
    const uint64_t seed = r.request.params.seed ? *r.request.params.seed : random_seed();
    r.seqs.resize(n);
    for (int64_t i = 0; i < n; ++i) {
        Sequence & seq = r.seqs[i];
        seq.cache = i + 1 == n ? std::move(prompt_cache) : prompt_cache.fork();
        seq.rng.seed(sequence_seed(seed, i));
        seq.done = r.request.params.max_tokens == 0;
        if (!seq.done) {
            append_token(r, i, host_data<const double>(last_logits, "start_sequences"), last_logits.size(0));
        }
    }
}

}  // namespace tinkerd::engine
