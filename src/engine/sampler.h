// Sampling numerics, torch-free: request validation, per-sequence seeds (splitmix64 mixing) and the
// choice of one token from a row of logits (greedy, or temperature + top-k + top-p with a uniform of our
// own over double probabilities). SampleLoop (sample_loop.cpp) drives prefill and batched decode.
#pragma once

#include <cstdint>
#include <random>

#include "engine/engine.h"

namespace tinkerd::engine {

inline constexpr int64_t MAX_NUM_SAMPLES = 128;

// Checks every field of a request except the adapter (the engine knows those); names the bad field.
Result<void> validate_sample_request(const SampleRequest & request, const model::ModelConfig & config);

// splitmix64's output function of x (Steele et al.; the finaliser of java.util.SplittableRandom).
uint64_t splitmix64(uint64_t x);
// The seed of sample `index` of a request seeded with `seed`: splitmix64(splitmix64(seed) ^ index).
// Depends on nothing else, so a sequence's tokens do not depend on what else is in the batch.
uint64_t sequence_seed(uint64_t seed, int64_t index);

inline constexpr int64_t MAX_TOP_LOGPROBS = 1000;

struct TokenChoice {
    int64_t token = 0;
    double logprob = 0;  // under the temperature-scaled distribution, before truncation (T = 0: T = 1)
    TopLogprobs top;     // the top_n most probable tokens of that distribution, best first (ties: lower id)
};

// Picks the next token from logits [vocab] (double). temperature 0: the first argmax, with the
// logprob reported at temperature 1 (the greedy distribution is degenerate). Otherwise scaled =
// logits / T, logprob = log_softmax(scaled)[token]; then top-k keeps the k most probable tokens (ties
// to the lower id), top-p keeps the shortest prefix of those whose renormalised mass reaches top_p, and
// one uniform u in [0, 1) from rng (53 bits) is walked over the renormalised kept probabilities.
TokenChoice choose_token(const double * logits, int64_t vocab, const SamplingParams & params, std::mt19937_64 & rng,
                         int64_t top_n = 0);

}  // namespace tinkerd::engine
