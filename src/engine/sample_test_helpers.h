// Test-only helpers shared by the sampling tests (sampler_test, continuous_batching_test, qwen3_5_sample_test):
// request builders, seeded random prompts, an adapter trained one step so it changes the outputs, and the
// reference logprobs of a whole sequence by one full forward (no cache). Torch-free: only engine/engine.h.
#pragma once

#include <cstdint>
#include <optional>
#include <vector>

#include "engine/engine.h"

namespace tinkerd::testing {

// A request for the adapter at this temperature and seed (EOS stops it, as by default).
engine::SampleRequest sample_request(engine::AdapterId id, std::vector<int64_t> prompt, int64_t max_tokens,
                                     double temperature, std::optional<uint64_t> seed, int64_t num_samples = 1);

// Temperature 1, seeded, and stop_at_eos off: every sequence runs to max_tokens.
engine::SampleRequest seeded_request(engine::AdapterId id, std::vector<int64_t> prompt, int64_t max_tokens,
                                     uint64_t seed, int64_t num_samples = 1);

// e.sample of one request, expected to succeed (an empty output, with the failure recorded, otherwise).
engine::SampleOutput sample_one(engine::Engine & e, const engine::SampleRequest & r);

// n tokens drawn uniformly from [3, vocab) (no BOS / EOS) by std::mt19937 seeded with seed.
std::vector<int64_t> random_tokens(int64_t n, uint64_t seed, int64_t vocab);

// A rank-4 (alpha 8) adapter on every target after one cross-entropy step on n_tokens random tokens and one
// AdamW step at learning_rate, so its B factors are non-zero and it changes the model's outputs.
engine::AdapterId trained_adapter(engine::Engine & e, uint64_t seed, int64_t n_tokens, double learning_rate);

// SampleLoop's KV accounting for an fp32 model: K and V bytes of every attention layer per cached token, and a
// sequence's recurrent state (conv + delta rule of every linear-attention layer) as that many tokens, rounded up.
int64_t kv_bytes_per_token(const engine::Engine & e);
int64_t kv_state_tokens(const engine::Engine & e);

// log p(tokens[i] | tokens[:i]) for i = 1..n-1 (at index i - 1), by one forward of the whole sequence.
std::vector<double> full_forward_logprobs(engine::Engine & e, engine::AdapterId id,
                                          const std::vector<int64_t> & tokens);

}  // namespace tinkerd::testing
