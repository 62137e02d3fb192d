// Engine::sample on tiny random llama / qwen3 / qwen3_moe / qwen3_5 models and the real stories260K: KV-cache decoding
// equals full forwards (sampled-token and prompt logprobs), temperature scaling of logprobs, top-k/top-p, seeds
// independent of the batch, stop tokens / stop_check / max_tokens, mixed-adapter batches, the validation of every
// field, and stories260K greedy decoding against expected.json (plus decode speed).
#include "engine/sampler.h"

#include <algorithm>
#include <chrono>
#include <cmath>
#include <cstdlib>
#include <filesystem>
#include <fstream>
#include <functional>
#include <iostream>
#include <limits>
#include <numeric>
#include <optional>
#include <random>
#include <set>

#include <gtest/gtest.h>
#include <nlohmann/json.hpp>

#include "engine/engine.h"
#include "sample_test_helpers.h"
#include "test_models.h"

namespace tinkerd::testing {
namespace {

using engine::AdapterId;
using engine::Engine;
using engine::SampleOutput;
using engine::SampleRequest;

class SamplerTest : public ::testing::TestWithParam<TinyFamily> {
  protected:
    void SetUp() override {
        write_tiny_model(dir_.path(), GetParam(), model::DType::F32, 11);
        auto loaded = Engine::load(dir_.path(), {engine::ComputeDType::AUTO, 1});
        ASSERT_TRUE(loaded.ok()) << loaded.error().message;
        engine_ = std::move(loaded).value();
        vocab_ = engine_->config().vocab_size;
    }
    // An adapter after one AdamW step (lr 1e-2), so B != 0 and it changes the model's outputs.
    AdapterId trained_adapter(uint64_t seed) { return testing::trained_adapter(*engine_, seed, 12, 1e-2); }
    std::vector<int64_t> random_tokens(int64_t n, uint64_t seed) const {
        return testing::random_tokens(n, seed, vocab_);
    }
    // How far a decoded logprob may move when its rows run inside another batch. The same products run in
    // another summation order (BLAS picks its kernel by row count; MoE experts group the batch's routed rows),
    // so values agree to fp32 rounding, not bit for bit: a few eps32 of the value per reordered product, carried
    // from step to step by the KV cache and the recurrent states. Bound: 16 eps32 x |value| per layer and step.
    // (A fitted 1e-5 failed on an Intel Xeon with MKL capped at AVX2: 1.07e-5 on qwen3.5-moe at step 4.)
    double batch_order_bound(double value, size_t step) const {
        const double eps32 = std::numeric_limits<float>::epsilon();
        const auto layers = static_cast<double>(engine_->config().n_layers);
        return 16 * eps32 * std::max(1.0, std::abs(value)) * layers * static_cast<double>(step + 1);
    }
    // The full next-token distribution (temperature 1) after prompt, as logprobs [V].
    std::vector<double> distribution(AdapterId id, std::vector<int64_t> prompt) {
        prompt.push_back(0);
        auto r = sample_request(id, prompt, 0, 1.0, 1);
        r.topk_prompt_logprobs = vocab_;
        const SampleOutput out = sample_one(*engine_, r);
        std::vector<double> lp(vocab_, NAN);
        for (auto [token, value] : out.topk_prompt_logprobs.back())
            lp[token] = value;
        return lp;
    }

    ScopedTempDir dir_{"sampler_test"};
    std::unique_ptr<Engine> engine_;
    int64_t vocab_ = 0;
};

TEST_P(SamplerTest, KvCacheDecodingEqualsFullForwardLogprobs) {
    const AdapterId id = trained_adapter(5);
    std::vector<SampleRequest> reqs = {sample_request(id, random_tokens(5, 1), 20, 1.0, 42, 3),
                                       sample_request(engine::BASE_MODEL, random_tokens(9, 2), 15, 1.0, 43, 2),
                                       sample_request(id, random_tokens(1, 3), 25, 1.0, 44, 1)};
    auto out = engine_->sample(reqs);
    size_t checked = 0;
    for (size_t i = 0; i < reqs.size(); ++i) {
        ASSERT_TRUE(out[i].ok()) << out[i].error().message;
        ASSERT_EQ(out[i]->sequences.size(), static_cast<size_t>(reqs[i].num_samples));
        for (const auto & s : out[i]->sequences) {
            ASSERT_EQ(s.tokens.size(), s.logprobs.size());
            std::vector<int64_t> all = reqs[i].prompt;
            all.insert(all.end(), s.tokens.begin(), s.tokens.end());
            const auto want = full_forward_logprobs(*engine_, reqs[i].adapter, all);
            const size_t first = reqs[i].prompt.size() - 1;
            for (size_t t = 0; t < s.tokens.size(); ++t, ++checked)
                EXPECT_NEAR(s.logprobs[t], want[first + t], 1e-4) << "request " << i << " token " << t;
        }
    }
    EXPECT_GT(checked, 40u);
}

TEST_P(SamplerTest, PromptLogprobsEqualFullForward) {
    const AdapterId id = trained_adapter(6);
    auto r = sample_request(id, random_tokens(14, 7), 1, 1.0, 1);
    r.prompt_logprobs = true;
    r.topk_prompt_logprobs = 5;
    const SampleOutput out = sample_one(*engine_, r);
    const auto want = full_forward_logprobs(*engine_, id, r.prompt);
    ASSERT_EQ(out.prompt_logprobs.size(), r.prompt.size());
    ASSERT_EQ(out.topk_prompt_logprobs.size(), r.prompt.size());
    EXPECT_TRUE(std::isnan(out.prompt_logprobs[0]));
    EXPECT_TRUE(out.topk_prompt_logprobs[0].empty());
    for (size_t i = 1; i < r.prompt.size(); ++i) {
        EXPECT_NEAR(out.prompt_logprobs[i], want[i - 1], 1e-4) << i;
        const auto & top = out.topk_prompt_logprobs[i];
        ASSERT_EQ(top.size(), 5u);
        EXPECT_GE(top[0].second + 1e-6, out.prompt_logprobs[i]) << "the best logprob is the largest";
        for (size_t j = 0; j + 1 < top.size(); ++j)
            EXPECT_GE(top[j].second, top[j + 1].second) << i;
        for (auto [token, lp] : top) {
            if (token == r.prompt[i]) {
                EXPECT_NEAR(lp, out.prompt_logprobs[i], 1e-5);
            }
        }
    }
    // With K = vocab every true next token is in the list, at its prompt logprob.
    r.topk_prompt_logprobs = vocab_;
    const SampleOutput full = sample_one(*engine_, r);
    for (size_t i = 1; i < r.prompt.size(); ++i) {
        const auto & top = full.topk_prompt_logprobs[i];
        auto it = std::find_if(top.begin(), top.end(), [&](auto p) { return p.first == r.prompt[i]; });
        ASSERT_NE(it, top.end()) << i;
        EXPECT_NEAR(it->second, want[i - 1], 1e-4);
    }
}

// SDK 0.38 prompt extras: target ids scored at each prompt position equal the prompt / top-k logprobs; greedy
// alternative draws are the argmax; seeded temperature-1 draws repeat and carry their log-softmax.
TEST_P(SamplerTest, TargetPromptLogprobsAndAlternativeDraws) {
    const AdapterId id = trained_adapter(6);
    auto r = sample_request(id, random_tokens(9, 3), 1, 0.0, 1);
    r.topk_prompt_logprobs = 2;
    r.prompt_logprobs = true;
    const int64_t rows = static_cast<int64_t>(r.prompt.size()) - 1;
    r.target_prompt_k = 3;
    r.target_prompt_ids.assign(static_cast<size_t>(rows * 3), -1);
    for (int64_t i = 0; i < rows; ++i) {
        r.target_prompt_ids[static_cast<size_t>(i * 3)] = r.prompt[static_cast<size_t>(i + 1)];
        r.target_prompt_ids[static_cast<size_t>(i * 3 + 2)] = (i * 7) % vocab_;
    }
    r.prompt_alt_tokens_k = 4;
    const SampleOutput out = sample_one(*engine_, r);
    ASSERT_EQ(out.target_prompt_logprobs.size(), static_cast<size_t>(rows * 3));
    ASSERT_EQ(out.prompt_alt_tokens.size(), static_cast<size_t>(rows * 4));
    for (int64_t i = 0; i < rows; ++i) {
        EXPECT_NEAR(out.target_prompt_logprobs[i * 3], out.prompt_logprobs[i + 1], 1e-6) << i;
        EXPECT_EQ(out.target_prompt_logprobs[i * 3 + 1], 0.0F) << "an unasked cell";
        EXPECT_LT(out.target_prompt_logprobs[i * 3 + 2], 0.0F);
        const auto & best = out.topk_prompt_logprobs[i + 1][0];
        for (int64_t j = 0; j < 4; ++j) {
            EXPECT_EQ(out.prompt_alt_tokens[i * 4 + j], best.first) << "greedy draws are the argmax";
            EXPECT_NEAR(out.prompt_alt_logprobs[i * 4 + j], best.second, 1e-6);
        }
    }
    r.params.temperature = 1.0;
    r.params.seed = 77;
    r.target_prompt_k = 0;
    r.target_prompt_ids.clear();
    r.prompt_alt_tokens_k = 16;
    const SampleOutput a = sample_one(*engine_, r), b = sample_one(*engine_, r);
    EXPECT_EQ(a.prompt_alt_tokens, b.prompt_alt_tokens) << "a seed fixes the draws";
    std::set<int64_t> distinct(a.prompt_alt_tokens.begin(), a.prompt_alt_tokens.end());
    EXPECT_GT(distinct.size(), 4u) << "draws, not a top-k";
    const SampleOutput full = [&] {
        auto q = r;
        q.topk_prompt_logprobs = vocab_;
        return sample_one(*engine_, q);
    }();
    for (int64_t i = 0; i < rows; ++i) {
        for (int64_t j = 0; j < 16; ++j) {
            const int64_t token = a.prompt_alt_tokens[i * 16 + j];
            const auto & top = full.topk_prompt_logprobs[i + 1];
            auto it = std::find_if(top.begin(), top.end(), [&](auto p) { return p.first == token; });
            ASSERT_NE(it, top.end());
            EXPECT_NEAR(a.prompt_alt_logprobs[i * 16 + j], it->second, 1e-6);
        }
    }
    r.target_prompt_k = 2;  // ids for the wrong number of rows
    r.target_prompt_ids.assign(4, 0);
    EXPECT_FALSE(engine_->sample({r})[0].ok());
}

INSTANTIATE_TEST_SUITE_P(Families, SamplerTest,
                         ::testing::Values(TinyFamily::LLAMA, TinyFamily::QWEN3, TinyFamily::QWEN3_MOE,
                                           TinyFamily::QWEN3_5, TinyFamily::QWEN3_5_MOE));

using SamplerLlamaTest = SamplerTest;

double log_sum_exp(const std::vector<double> & x) {
    const double m = *std::max_element(x.begin(), x.end());
    double s = 0;
    for (double v : x)
        s += std::exp(v - m);
    return m + std::log(s);
}

TEST_P(SamplerLlamaTest, LogprobsAreUnderTheTemperatureScaledDistributionBeforeTruncation) {
    const AdapterId id = trained_adapter(8);
    const auto prompt = random_tokens(6, 9);
    const auto lp1 = distribution(id, prompt);  // temperature 1
    for (double tau : {0.5, 2.0}) {
        std::vector<double> scaled = lp1;
        for (double & x : scaled)
            x /= tau;
        const double lse = log_sum_exp(scaled);
        const SampleOutput out = sample_one(*engine_, sample_request(id, prompt, 1, tau, 3, 64));
        std::set<int64_t> seen;
        for (const auto & s : out.sequences) {
            seen.insert(s.tokens[0]);
            EXPECT_NEAR(s.logprobs[0], scaled[s.tokens[0]] - lse, 1e-4) << "tau " << tau;
        }
        ASSERT_GE(seen.size(), 2u) << "need two different tokens to compare differences";
        // Differences of logprobs at tau are (1/tau) times those at temperature 1.
        const auto & a = out.sequences[0];
        auto b = std::find_if(out.sequences.begin(), out.sequences.end(),
                              [&](const auto & s) { return s.tokens[0] != a.tokens[0]; });
        EXPECT_NEAR(a.logprobs[0] - b->logprobs[0], (lp1[a.tokens[0]] - lp1[b->tokens[0]]) / tau, 1e-4);
    }
    // top_k = 3: only the 3 most probable tokens are drawn, each reported at its untruncated logprob.
    std::vector<int64_t> by_prob(vocab_);
    std::iota(by_prob.begin(), by_prob.end(), 0);
    std::sort(by_prob.begin(), by_prob.end(), [&](int64_t x, int64_t y) { return lp1[x] > lp1[y]; });
    auto r = sample_request(id, prompt, 1, 1.0, 4, 64);
    r.params.top_k = 3;
    for (const auto & s : sample_one(*engine_, r).sequences) {
        EXPECT_TRUE(std::find(by_prob.begin(), by_prob.begin() + 3, s.tokens[0]) != by_prob.begin() + 3);
        EXPECT_NEAR(s.logprobs[0], lp1[s.tokens[0]], 1e-4);
    }
    // top_p just above the best token's mass keeps exactly the two best.
    r.params.top_k = -1;
    r.params.top_p = std::exp(lp1[by_prob[0]]) + 1e-3;
    std::set<int64_t> drawn;
    for (const auto & s : sample_one(*engine_, r).sequences)
        drawn.insert(s.tokens[0]);
    EXPECT_TRUE(drawn.size() <= 2 && drawn.count(by_prob[0]) + drawn.count(by_prob[1]) == drawn.size());
}

TEST_P(SamplerLlamaTest, SeedGivesTheSameTokensAloneAndInsideABatch) {
    const AdapterId a = trained_adapter(10), b = trained_adapter(11);
    const auto mine = sample_request(a, random_tokens(4, 12), 16, 1.0, 77, 2);
    const SampleOutput alone = sample_one(*engine_, mine);
    auto batch = engine_->sample({sample_request(b, random_tokens(7, 13), 20, 0.8, 5, 3), mine,
                                  sample_request(engine::BASE_MODEL, random_tokens(4, 12), 9, 1.0, std::nullopt, 2)});
    ASSERT_TRUE(batch[1].ok());
    ASSERT_EQ(batch[1]->sequences.size(), 2u);
    for (size_t i = 0; i < 2; ++i) {
        EXPECT_EQ(batch[1]->sequences[i].tokens, alone.sequences[i].tokens) << i;
        for (size_t t = 0; t < alone.sequences[i].logprobs.size(); ++t) {
            const double value = alone.sequences[i].logprobs[t];
            EXPECT_NEAR(batch[1]->sequences[i].logprobs[t], value, batch_order_bound(value, t)) << i << " step " << t;
        }
    }
    EXPECT_NE(alone.sequences[0].tokens, alone.sequences[1].tokens);
    // Eight samples of one seeded request differ from each other.
    std::set<std::vector<int64_t>> distinct;
    for (const auto & s : sample_one(*engine_, sample_request(a, random_tokens(4, 12), 16, 1.0, 78, 8)).sequences)
        distinct.insert(s.tokens);
    EXPECT_GE(distinct.size(), 7u);
}

// The model's EOS ends a sequence unless stop_at_eos is off (Tinker's `stop: []`): then the same seeded
// draw runs on past it, and its first tokens up to the EOS are the stopped sequence.
TEST_P(SamplerLlamaTest, EosStopsUnlessTurnedOff) {
    const int64_t eos = engine_->config().eos_token_id;
    ASSERT_GE(eos, 0);
    const auto prompt = random_tokens(3, 15);
    SampleOutput through;
    uint64_t seed = 300;
    size_t at = 0;
    for (;; ++seed) {  // a seeded draw of 24 tokens with an EOS before the last one
        auto r = sample_request(engine::BASE_MODEL, prompt, 24, 2.0, seed);
        r.params.stop_at_eos = false;
        through = sample_one(*engine_, r);
        const auto & t = through.sequences[0].tokens;
        at = std::find(t.begin(), t.end(), eos) - t.begin();
        if (at + 1 < t.size())
            break;
        ASSERT_LT(seed, 2300u) << "no EOS drawn";
    }
    EXPECT_EQ(through.sequences[0].tokens.size(), 24u);
    const auto stopped = sample_one(*engine_, sample_request(engine::BASE_MODEL, prompt, 24, 2.0, seed)).sequences[0];
    EXPECT_TRUE(stopped.stopped);
    const auto & t = through.sequences[0].tokens;
    EXPECT_EQ(stopped.tokens, std::vector<int64_t>(t.begin(), t.begin() + at + 1));
}

TEST_P(SamplerLlamaTest, StopTokensStopCheckAndMaxTokens) {
    const int64_t eos = engine_->config().eos_token_id;
    const auto prompt = random_tokens(3, 14);
    // Find a seeded draw of 12 tokens without EOS, then stop on its 5th token.
    SampleOutput free;
    uint64_t seed = 100;
    for (;; ++seed) {
        free = sample_one(*engine_, sample_request(engine::BASE_MODEL, prompt, 12, 1.0, seed));
        const auto & t = free.sequences[0].tokens;
        if (t.size() == 12 && std::find(t.begin(), t.end(), eos) == t.end())
            break;
        ASSERT_LT(seed, 200u);
    }
    const auto & full = free.sequences[0];
    EXPECT_FALSE(full.stopped) << "max_tokens ends as length";
    const int64_t stop = full.tokens[4];
    const size_t first = std::find(full.tokens.begin(), full.tokens.end(), stop) - full.tokens.begin();
    auto r = sample_request(engine::BASE_MODEL, prompt, 12, 1.0, seed);
    r.params.stop_token_ids = {stop, vocab_ + 5};
    const auto stopped = sample_one(*engine_, r).sequences[0];
    EXPECT_TRUE(stopped.stopped);
    EXPECT_EQ(stopped.tokens, std::vector<int64_t>(full.tokens.begin(), full.tokens.begin() + first + 1));
    EXPECT_EQ(std::count(stopped.tokens.begin(), stopped.tokens.end(), stop), 1);
    // stop_check sees the tokens so far and stops after the third.
    r.params.stop_token_ids = {};
    std::vector<size_t> seen_sizes;
    r.stop_check = [&](const std::vector<int64_t> & generated) {
        seen_sizes.push_back(generated.size());
        return generated.size() == 3;
    };
    const auto checked = sample_one(*engine_, r).sequences[0];
    EXPECT_TRUE(checked.stopped);
    EXPECT_EQ(checked.tokens, std::vector<int64_t>(full.tokens.begin(), full.tokens.begin() + 3));
    EXPECT_EQ(seen_sizes, (std::vector<size_t>{1, 2, 3}));
    // max_tokens = 0 generates nothing.
    const auto none = sample_one(*engine_, sample_request(engine::BASE_MODEL, prompt, 0, 1.0, 1)).sequences[0];
    EXPECT_TRUE(none.tokens.empty());
    EXPECT_FALSE(none.stopped);
}

TEST_P(SamplerLlamaTest, TopK1AndTinyTopPEqualGreedyForAnySeed) {
    const AdapterId id = trained_adapter(15);
    const auto prompt = random_tokens(5, 16);
    const auto greedy = sample_one(*engine_, sample_request(id, prompt, 14, 0.0, std::nullopt, 2)).sequences;
    EXPECT_EQ(greedy[0].tokens, greedy[1].tokens);
    // Greedy logprobs are reported at temperature 1.
    std::vector<int64_t> all = prompt;
    all.insert(all.end(), greedy[0].tokens.begin(), greedy[0].tokens.end());
    const auto want = full_forward_logprobs(*engine_, id, all);
    for (size_t t = 0; t < greedy[0].tokens.size(); ++t)
        EXPECT_NEAR(greedy[0].logprobs[t], want[prompt.size() - 1 + t], 1e-4);
    for (uint64_t seed : {1, 2, 3}) {
        auto r = sample_request(id, prompt, 14, 1.5, seed, 2);
        r.params.top_k = 1;
        for (const auto & s : sample_one(*engine_, r).sequences)
            EXPECT_EQ(s.tokens, greedy[0].tokens) << "top_k 1, seed " << seed;
        r.params.top_k = -1;
        r.params.top_p = 1e-9;
        for (const auto & s : sample_one(*engine_, r).sequences)
            EXPECT_EQ(s.tokens, greedy[0].tokens) << "top_p 1e-9, seed " << seed;
    }
}

TEST_P(SamplerLlamaTest, MixedAdapterBatchEqualsEachAlone) {
    const AdapterId a = trained_adapter(20), b = trained_adapter(21);
    const std::vector<SampleRequest> reqs = {sample_request(a, random_tokens(6, 22), 18, 1.0, 1, 2),
                                             sample_request(engine::BASE_MODEL, random_tokens(6, 22), 18, 1.0, 1, 2),
                                             sample_request(b, random_tokens(6, 22), 18, 1.0, 1, 2),
                                             sample_request(a, random_tokens(3, 23), 10, 0.0, std::nullopt, 1)};
    auto together = engine_->sample(reqs);
    std::set<std::vector<int64_t>> firsts;
    for (size_t i = 0; i < reqs.size(); ++i) {
        ASSERT_TRUE(together[i].ok()) << together[i].error().message;
        const SampleOutput alone = sample_one(*engine_, reqs[i]);
        for (size_t s = 0; s < alone.sequences.size(); ++s) {
            EXPECT_EQ(together[i]->sequences[s].tokens, alone.sequences[s].tokens) << i << "/" << s;
            EXPECT_EQ(together[i]->sequences[s].stopped, alone.sequences[s].stopped);
            for (size_t t = 0; t < alone.sequences[s].logprobs.size(); ++t) {
                const double value = alone.sequences[s].logprobs[t];
                EXPECT_NEAR(together[i]->sequences[s].logprobs[t], value, batch_order_bound(value, t)) << t;
            }
        }
        firsts.insert(together[i]->sequences[0].tokens);
    }
    EXPECT_EQ(firsts.size(), 4u) << "the same prompt and seed differ by adapter";
}

TEST_P(SamplerLlamaTest, InvalidRequestsNameTheFieldAndOthersStillRun) {
    const auto ok = sample_request(engine::BASE_MODEL, random_tokens(4, 30), 5, 1.0, 1);
    std::vector<std::pair<SampleRequest, std::string>> cases;
    auto add = [&](std::function<void(SampleRequest &)> change, std::string field) {
        SampleRequest r = ok;
        change(r);
        cases.emplace_back(r, field);
    };
    add([](auto & r) { r.prompt.clear(); }, "prompt");
    add([&](auto & r) { r.prompt[2] = vocab_; }, "prompt[2]");
    add([](auto & r) { r.prompt[1] = -1; }, "prompt[1]");
    add([](auto & r) { r.params.max_tokens = -1; }, "max_tokens");
    add([](auto & r) { r.params.temperature = -0.5; }, "temperature");
    add([](auto & r) { r.params.temperature = NAN; }, "temperature");
    add([](auto & r) { r.params.top_p = 0; }, "top_p");
    add([](auto & r) { r.params.top_p = 1.5; }, "top_p");
    add([](auto & r) { r.params.top_k = 0; }, "top_k");
    add([](auto & r) { r.params.top_k = -2; }, "top_k");
    add([](auto & r) { r.num_samples = 0; }, "num_samples");
    add([](auto & r) { r.num_samples = 129; }, "num_samples");
    add([](auto & r) { r.topk_prompt_logprobs = -1; }, "topk_prompt_logprobs");
    add([](auto & r) { r.params.max_tokens = 61; }, "max_position_embeddings");  // 4 + 61 > 64
    std::vector<SampleRequest> reqs = {ok};
    for (const auto & c : cases)
        reqs.push_back(c.first);
    auto unknown = ok;
    unknown.adapter = 999;
    reqs.push_back(unknown);
    auto out = engine_->sample(reqs);
    ASSERT_TRUE(out[0].ok()) << out[0].error().message;
    EXPECT_EQ(out[0]->sequences.size(), 1u);
    for (size_t i = 0; i < cases.size(); ++i) {
        ASSERT_FALSE(out[i + 1].ok()) << cases[i].second;
        EXPECT_EQ(out[i + 1].error().kind, ErrorKind::INVALID_ARGUMENT) << cases[i].second;
        EXPECT_NE(out[i + 1].error().message.find(cases[i].second), std::string::npos) << out[i + 1].error().message;
    }
    ASSERT_FALSE(out.back().ok());
    EXPECT_EQ(out.back().error().kind, ErrorKind::NOT_FOUND);
    EXPECT_NE(out.back().error().message.find("adapter"), std::string::npos);
    // The boundary itself is valid: 4 + 60 = 64 positions.
    auto edge = ok;
    edge.params.max_tokens = 60;
    EXPECT_TRUE(engine_->sample({edge})[0].ok());
}

INSTANTIATE_TEST_SUITE_P(Llama, SamplerLlamaTest, ::testing::Values(TinyFamily::LLAMA));
// The same seeds, stops and mixed-adapter batches on a model with routed experts (and expert LoRA).
INSTANTIATE_TEST_SUITE_P(Moe, SamplerLlamaTest, ::testing::Values(TinyFamily::QWEN3_MOE));
// And on the Gated DeltaNet hybrid: its per-sequence recurrent state must not depend on the batch either.
INSTANTIATE_TEST_SUITE_P(Qwen35, SamplerLlamaTest, ::testing::Values(TinyFamily::QWEN3_5));
// And on the hybrid whose every MLP is routed experts + a gated shared expert (Qwen3.5-MoE).
INSTANTIATE_TEST_SUITE_P(Qwen35Moe, SamplerLlamaTest, ::testing::Values(TinyFamily::QWEN3_5_MOE));

// stories260K ($TINKERD_SOURCE_DIR/../shared/models), skipped when absent.
std::string stories_dir() {
    const char * source_dir = std::getenv("TINKERD_SOURCE_DIR");
    return (std::filesystem::path(source_dir ? source_dir : ".") / ".." / "shared" / "models" / "stories260K").string();
}

// A temperature so small that logits / T overflows: the argmax with logprob 0, never NaN (the fuzzer's
// temperature 1e-308 gave NaN logprobs and always the last token id).
TEST(ChooseTokenTest, TinyTemperatureIsGreedyWithFiniteLogprob) {
    const std::vector<double> logits = {0.5, 3.0, -2.0, 1.0};
    engine::SamplingParams params;
    params.temperature = 1e-308;
    std::mt19937_64 rng(7);
    const auto choice = engine::choose_token(logits.data(), 4, params, rng, 2);
    EXPECT_EQ(choice.token, 1);
    EXPECT_EQ(choice.logprob, 0.0);
    ASSERT_EQ(choice.top.size(), 2u);
    EXPECT_EQ(choice.top[0].first, 1);
    EXPECT_FALSE(std::isnan(choice.top[1].second));
    params.temperature = 0.5;  // ordinary temperatures keep their values: log_softmax(logits / T)
    const auto scaled = engine::choose_token(logits.data(), 4, params, rng);
    double lse = 0;
    for (double x : logits) {
        lse += std::exp(x / 0.5);
    }
    EXPECT_NEAR(scaled.logprob, logits[scaled.token] / 0.5 - std::log(lse), 1e-12);
}

TEST(SamplerStoriesTest, GreedySamplingMatchesExpectedAndReportsDecodeSpeed) {
    const std::string dir = stories_dir();
    if (!std::filesystem::exists(dir + "/expected.json") || !std::filesystem::exists(dir + "/hf-f32/config.json"))
        GTEST_SKIP() << "stories260K not found at " << dir << " (set TINKERD_SOURCE_DIR)";
    std::ifstream in(dir + "/expected.json");
    const auto expected = nlohmann::json::parse(in);
    auto loaded = Engine::load(dir + "/hf-f32", {engine::ComputeDType::AUTO, 1});
    ASSERT_TRUE(loaded.ok()) << loaded.error().message;
    Engine & e = **loaded;
    // Every prompt in one call (different prompt lengths share the decode steps).
    std::vector<SampleRequest> reqs;
    std::vector<std::vector<int64_t>> wants;
    for (const auto & [prompt, g] : expected["generation"].items()) {
        wants.push_back(g["greedy_48_ids"].get<std::vector<int64_t>>());
        reqs.push_back(sample_request(engine::BASE_MODEL, g["prompt_ids"].get<std::vector<int64_t>>(),
                                      static_cast<int64_t>(wants.back().size()), 0.0, std::nullopt));
        reqs.back().params.stop_token_ids = {1};
    }
    auto out = e.sample(reqs);
    for (size_t i = 0; i < reqs.size(); ++i) {
        ASSERT_TRUE(out[i].ok()) << out[i].error().message;
        EXPECT_EQ(out[i]->sequences[0].tokens, wants[i]) << "prompt " << i;
        EXPECT_FALSE(out[i]->sequences[0].stopped) << "48 tokens without a stop: length";
    }
    // 255 greedy tokens from BOS, through the cache.
    const auto bos = expected["greedy_from_bos_255_ids_f32"].get<std::vector<int64_t>>();
    auto r = sample_request(engine::BASE_MODEL, {1}, 255, 0.0, std::nullopt);
    r.params.stop_token_ids = {1};
    const auto long_run = e.sample({r});
    ASSERT_TRUE(long_run[0].ok());
    EXPECT_EQ(long_run[0]->sequences[0].tokens, std::vector<int64_t>(bos.begin() + 1, bos.end()));
    // Decode speed (informational): 200 tokens at batch 1 and 8, one thread.
    for (int64_t batch : {1, 8}) {
        auto speed = sample_request(engine::BASE_MODEL, {1}, 200, 1.0, 9, batch);
        const auto start = std::chrono::steady_clock::now();
        auto res = e.sample({speed});
        const double secs = std::chrono::duration<double>(std::chrono::steady_clock::now() - start).count();
        ASSERT_TRUE(res[0].ok());
        size_t n = 0;
        for (const auto & s : res[0]->sequences)
            n += s.tokens.size();
        std::cout << "[ stories260K ] batch " << batch << ": " << n << " tokens in " << secs << " s = " << n / secs
                  << " tokens/s\n";
    }
}

}  // namespace
}  // namespace tinkerd::testing
