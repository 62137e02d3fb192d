// Shared helpers of the sampling tests (sample_test_helpers.h).
#include "sample_test_helpers.h"

#include <algorithm>
#include <cmath>
#include <random>

#include <gtest/gtest.h>

namespace tinkerd::testing {

engine::SampleRequest sample_request(engine::AdapterId id, std::vector<int64_t> prompt, int64_t max_tokens,
                                     double temperature, std::optional<uint64_t> seed, int64_t num_samples) {
    engine::SampleRequest r;
    r.adapter = id;
    r.prompt = std::move(prompt);
    r.num_samples = num_samples;
    r.params.max_tokens = max_tokens;
    r.params.temperature = temperature;
    r.params.seed = seed;
    return r;
}

engine::SampleRequest seeded_request(engine::AdapterId id, std::vector<int64_t> prompt, int64_t max_tokens,
                                     uint64_t seed, int64_t num_samples) {
    engine::SampleRequest r = sample_request(id, std::move(prompt), max_tokens, 1.0, seed, num_samples);
    r.params.stop_at_eos = false;
    return r;
}

engine::SampleOutput sample_one(engine::Engine & e, const engine::SampleRequest & r) {
    auto out = e.sample({r});
    EXPECT_TRUE(out[0].ok()) << out[0].error().message;
    return out[0].ok() ? *out[0] : engine::SampleOutput{};
}

std::vector<int64_t> random_tokens(int64_t n, uint64_t seed, int64_t vocab) {
    std::mt19937 rng(static_cast<uint32_t>(seed));
    std::uniform_int_distribution<int64_t> tok(3, vocab - 1);
    std::vector<int64_t> out(static_cast<size_t>(n));
    for (auto & t : out) {
        t = tok(rng);
    }
    return out;
}

engine::AdapterId trained_adapter(engine::Engine & e, uint64_t seed, int64_t n_tokens, double learning_rate) {
    engine::LoraSpec spec;
    spec.rank = 4;
    spec.alpha = 8.0;
    spec.seed = seed;
    const engine::AdapterId id = e.create_adapter(spec).value();
    const int64_t vocab = e.config().vocab_size;
    const std::vector<int64_t> tokens = random_tokens(n_tokens, seed, vocab);
    const std::vector<int64_t> targets = random_tokens(n_tokens, seed + 100, vocab);
    engine::Datum d{tokens, {{"target_tokens", engine::make_host_tensor_i64({n_tokens}, targets)}}, {}};
    EXPECT_TRUE(e.forward_backward({{id, {d}, "cross_entropy", {}}}, true)[0].ok());
    engine::AdamParams adam;
    adam.learning_rate = learning_rate;
    EXPECT_TRUE(e.optim_step(id, adam).ok());
    return id;
}

static int64_t attention_layers(const engine::Engine & e) {
    const auto & linear = e.config().linear_attention_layers;
    return e.config().n_layers - std::count(linear.begin(), linear.end(), true);
}

int64_t kv_bytes_per_token(const engine::Engine & e) {
    const auto & c = e.config();
    return attention_layers(e) * 2 * c.n_kv_heads * c.head_dim * 4;
}

int64_t kv_state_tokens(const engine::Engine & e) {
    const auto & c = e.config();
    const int64_t conv_dim = 2 * c.linear_k_heads * c.linear_k_head_dim + c.linear_v_heads * c.linear_v_head_dim;
    const int64_t per_layer =
        conv_dim * (c.linear_conv_kernel - 1) + c.linear_v_heads * c.linear_k_head_dim * c.linear_v_head_dim;
    const int64_t bytes = (c.n_layers - attention_layers(e)) * per_layer * 4;
    return (bytes + kv_bytes_per_token(e) - 1) / kv_bytes_per_token(e);
}

std::vector<double> full_forward_logprobs(engine::Engine & e, engine::AdapterId id,
                                          const std::vector<int64_t> & tokens) {
    const int64_t n = static_cast<int64_t>(tokens.size()) - 1;
    engine::Datum d{std::vector<int64_t>(tokens.begin(), tokens.end() - 1),
                    {{"target_tokens", engine::make_host_tensor_i64({n}, {tokens.begin() + 1, tokens.end()})}},
                    {}};
    auto r = e.forward_backward({{id, {d}, "cross_entropy", {}}}, false);
    EXPECT_TRUE(r[0].ok()) << r[0].error().message;
    return r[0].ok() ? engine::host_tensor_values(r[0]->logprobs[0]) : std::vector<double>(n, NAN);
}

}  // namespace tinkerd::testing
