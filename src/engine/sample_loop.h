// SampleLoop: the continuous-batching state machine behind Engine::sample_submit / sample_step. It owns
// every submitted request's sequences and caches (K/V, plus the linear-attention layers' recurrent state, counted
// in the budget as tokens' worth of bytes), admits queued requests while the KV budget allows (one batched
// prefill per step), runs one batched decode step over all live sequences, and preempts the newest request
// (frees its caches; it re-prefills later and continues with the same tokens).
#pragma once

#include <deque>
#include <map>
#include <optional>
#include <random>
#include <vector>

#include "engine/engine.h"
#include "engine/sampler.h"
#include "engine/transformer.h"

namespace tinkerd::engine {

class SampleLoop {
  public:
    SampleLoop(Transformer & transformer, int64_t kv_budget_bytes);

    // Bytes of K and V per cached token (every attention layer; at least 1).
    int64_t bytes_per_token() const { return bytes_per_token_; }
    // Tokens' worth of budget one sequence's recurrent state takes (0 without linear-attention layers).
    int64_t state_tokens() const { return state_tokens_; }
    // Queues a validated request for the adapter (nullptr = base). Fails if it can never fit the budget.
    Result<SampleHandle> submit(SampleRequest request, const Adapter * adapter);
    std::vector<FinishedSample> step();
    bool cancel(SampleHandle handle);
    // Fails (at the next step) every request sampling from this adapter; call before the adapter goes.
    void drop_adapter(const Adapter * adapter);
    SampleStats stats() const;
    // Sampling's products with quantised weights use int8 activations (kernels/quant_int8.h) when on.
    void set_int8_activations(bool on) { int8_activations_ = on; }

  private:
    struct Sequence {
        SequenceCache cache;  // empty while the request is queued or preempted
        std::mt19937_64 rng;
        SampledSequence out;
        bool done = false;
    };
    struct LiveRequest {
        SampleRequest request;
        const Adapter * adapter = nullptr;
        SampleOutput output;         // prompt logprobs are filled at the first admission
        std::vector<Sequence> seqs;  // num_samples; created at the first admission
        bool admitted = false;       // holds KV caches now
        int64_t admit_order = 0;     // larger = admitted later (the preemption victim)
        std::optional<Error> failure;
    };
    // One sequence of tokens to prefill into a cache.
    struct PrefillJob {
        LiveRequest * request = nullptr;
        std::vector<int64_t> tokens;
        SequenceCache fresh_cache;         // a first admission's prompt cache, forked into its sequences
        SequenceCache * target = nullptr;  // a resumed sequence's own cache (then fresh_cache is unused)
    };
    // One row of a decode step.
    struct Row {
        LiveRequest * request = nullptr;
        int64_t index = 0;  // sequence index in the request
        Sequence & seq() const { return request->seqs[index]; }
    };

    // Tokens a sequence of this request may ever hold: its prompt and every token it may generate.
    static int64_t token_limit(const SampleRequest & r);
    // The capacity to reserve when `needed` tokens must fit: a quarter more (at least 16), within limit.
    static int64_t chunked_capacity(int64_t needed, int64_t limit);
    // Budget tokens a sequence's cache takes now: its K/V capacity and its state (0 when it holds none).
    int64_t held_tokens(const SequenceCache & cache) const;
    int64_t reserved_tokens() const;
    int64_t admission_tokens(const LiveRequest & r) const;
    std::vector<PrefillJob> admit();
    void prefill(std::vector<PrefillJob> & jobs);
    void start_sequences(LiveRequest & r, SequenceCache & prompt_cache, const torch::Tensor & last_logits);
    void decode();
    std::vector<Row> decode_rows();
    void make_room();
    void preempt(SampleHandle handle, LiveRequest & r);
    // Chooses a token from logits [vocab] with the sequence's RNG, then append_choice.
    void append_token(LiveRequest & r, int64_t index, const double * logits, int64_t vocab);
    void append_choice(LiveRequest & r, int64_t index, TokenChoice choice);
    std::vector<FinishedSample> collect_finished();
    void fail_all(const std::string & message);

    Transformer & t_;
    int64_t budget_tokens_ = 0;
    int64_t bytes_per_token_ = 0;
    int64_t state_tokens_ = 0;
    std::map<SampleHandle, LiveRequest> requests_;  // by handle = submission order
    std::deque<SampleHandle> waiting_;              // queued and preempted, admission order
    SampleHandle next_handle_ = 1;
    int64_t next_admit_order_ = 0;
    int64_t preemptions_ = 0;
    bool int8_activations_ = false;  // --sample-activations int8
};

}  // namespace tinkerd::engine
