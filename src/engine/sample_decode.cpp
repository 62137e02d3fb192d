// SampleLoop's decode side (sample_loop.h): one batched decode step over every live sequence, cache
// growth within the KV budget (preempting the newest request when it would overflow), token choice and
// stop rules, and the collection of finished / failed requests.
#include <algorithm>

#include <ATen/Parallel.h>

#include "common/log.h"
#include "engine/host_access.h"
#include "engine/prompt_logits.h"
#include "engine/sample_loop.h"
#include "engine/sampler.h"

namespace tinkerd::engine {

// Unfinished sequences of admitted requests, grouped by adapter (each group one LoRA segment).
std::vector<SampleLoop::Row> SampleLoop::decode_rows() {
    std::vector<Row> rows;
    for (auto & [handle, r] : requests_) {
        if (!r.admitted || r.failure) {
            continue;
        }
        for (size_t i = 0; i < r.seqs.size(); ++i) {
            if (!r.seqs[i].done) {
                rows.push_back({&r, static_cast<int64_t>(i)});
            }
        }
    }
    std::stable_sort(rows.begin(), rows.end(), [](const Row & a, const Row & b) {
        return id_of(a.request->adapter) < id_of(b.request->adapter);
    });
    return rows;
}

// Grows every full cache by a quarter (at least 16 tokens; never past its request's limit). When the growth would pass
// the budget, the most recently admitted request is preempted first, as long as another one keeps running.
void SampleLoop::make_room() {
    // The capacity a full cache grows to before this step; 0 when it has room.
    auto grown_capacity = [](const Row & row) -> int64_t {
        const SequenceCache & cache = row.seq().cache;
        return cache.length() + 1 > cache.capacity()
                   ? chunked_capacity(cache.length() + 1, token_limit(row.request->request))
                   : 0;
    };
    while (true) {
        int64_t growth = 0, admitted = 0;
        for (const Row & row : decode_rows()) {
            const int64_t grown = grown_capacity(row);
            growth += grown > 0 ? grown - row.seq().cache.capacity() : 0;
        }
        LiveRequest * newest = nullptr;
        SampleHandle newest_handle = 0;
        for (auto & [handle, r] : requests_) {
            if (r.admitted) {
                ++admitted;
                if (!newest || r.admit_order > newest->admit_order) {
                    newest = &r;
                    newest_handle = handle;
                }
            }
        }
        if (growth == 0 || reserved_tokens() + growth <= budget_tokens_ || admitted <= 1) {
            break;
        }
        preempt(newest_handle, *newest);
    }
    for (const Row & row : decode_rows()) {
        if (const int64_t grown = grown_capacity(row); grown > 0) {
            row.seq().cache.reserve(grown);
        }
    }
}

// Frees the request's caches and puts it first in the queue; its tokens and RNG states are kept, so it
// continues exactly where it stopped.
void SampleLoop::preempt(SampleHandle handle, LiveRequest & r) {
    for (Sequence & seq : r.seqs) {
        seq.cache = SequenceCache();
    }
    r.admitted = false;
    waiting_.push_front(handle);
    ++preemptions_;
    LOG_INF("engine", "KV cache full (%lld KiB budget): sample request %lld preempted, resumes when room frees up",
            static_cast<long long>(budget_tokens_ * bytes_per_token_ >> 10), static_cast<long long>(handle));
}

// Feeds every live sequence's last token through one cached forward and draws its next token.
void SampleLoop::decode() {
    make_room();
    const std::vector<Row> rows = decode_rows();
    if (rows.empty()) {
        return;
    }
    CachedBatch batch;
    std::vector<int64_t> tokens;
    std::vector<const Adapter *> row_adapters;
    for (const Row & row : rows) {
        tokens.push_back(row.seq().out.tokens.back());
        batch.lengths.push_back(1);
        batch.caches.push_back(&row.seq().cache);
        row_adapters.push_back(row.request->adapter);
    }
    batch.tokens = torch::tensor(tokens, torch::kInt64).to(t_.device());
    batch.segments = segments_of(row_adapters);
    torch::Tensor h = t_.hidden_states_cached(batch);                                     // [B, C]
    const torch::Tensor logits = to_host(t_.logits(h, batch.segments), torch::kFloat64);  // [B, V], one copy per step
    const int64_t V = logits.size(1);
    const double * host = host_data<const double>(logits, "decode");
    // Each row draws from its own sequence's RNG, so the rows' passes over the vocabulary run in parallel; the
    // tokens are then appended in row order (callbacks, stop rules) on this thread.
    std::vector<TokenChoice> choices(rows.size());
    at::parallel_for(0, static_cast<int64_t>(rows.size()), 1, [&](int64_t begin, int64_t end) {
        for (int64_t b = begin; b < end; ++b) {
            const SampleRequest & req = rows[b].request->request;
            choices[b] = choose_token(host + b * V, V, req.params, rows[b].seq().rng, req.top_logprobs);
        }
    });
    for (size_t b = 0; b < rows.size(); ++b) {
        append_choice(*rows[b].request, rows[b].index, std::move(choices[b]));
    }
}

void SampleLoop::append_token(LiveRequest & r, int64_t index, const double * logits, int64_t vocab) {
    const SampleRequest & req = r.request;
    append_choice(r, index, choose_token(logits, vocab, req.params, r.seqs[index].rng, req.top_logprobs));
}

// Appends a chosen token, then applies the stop rules: a stop token or EOS (kept, once, as the last token) or
// stop_check -> stopped; max_tokens -> done without stopped.
void SampleLoop::append_choice(LiveRequest & r, int64_t index, TokenChoice choice) {
    Sequence & seq = r.seqs[index];
    const SampleRequest & req = r.request;
    seq.out.tokens.push_back(choice.token);
    seq.out.logprobs.push_back(static_cast<float>(choice.logprob));
    if (req.on_token) {
        req.on_token(index, choice.token, static_cast<float>(choice.logprob), choice.top);
    }
    if (req.top_logprobs > 0) {
        seq.out.top_logprobs.push_back(std::move(choice.top));
    }
    const auto & stops = req.params.stop_token_ids;
    const bool stop_token = (req.params.stop_at_eos && choice.token == t_.config().eos_token_id) ||
                            std::find(stops.begin(), stops.end(), choice.token) != stops.end();
    if (stop_token || (req.stop_check && req.stop_check(seq.out.tokens))) {
        seq.out.stopped = true;
        seq.done = true;
    } else if (static_cast<int64_t>(seq.out.tokens.size()) >= req.params.max_tokens) {
        seq.done = true;
    }
    if (seq.done) {
        seq.cache = SequenceCache();  // frees its share of the budget at once
    }
}

// Removes failed requests and those whose sequences are all done, returning their outcomes.
std::vector<FinishedSample> SampleLoop::collect_finished() {
    std::vector<FinishedSample> finished;
    for (auto it = requests_.begin(); it != requests_.end();) {
        LiveRequest & r = it->second;
        const bool all_done =
            !r.seqs.empty() && std::all_of(r.seqs.begin(), r.seqs.end(), [](const Sequence & s) { return s.done; });
        if (!r.failure && !all_done) {
            ++it;
            continue;
        }
        FinishedSample f{it->first};
        if (r.failure) {
            f.output = *r.failure;
        } else {
            for (Sequence & seq : r.seqs) {
                r.output.sequences.push_back(std::move(seq.out));
            }
            f.output = std::move(r.output);
        }
        finished.push_back(std::move(f));
        std::erase(waiting_, it->first);
        it = requests_.erase(it);
    }
    return finished;
}

void SampleLoop::fail_all(const std::string & message) {
    for (auto & [handle, r] : requests_) {
        r.failure = internal_error(message);
        r.seqs.clear();
        r.admitted = false;
    }
}

}  // namespace tinkerd::engine
