// Sampling a Qwen3.5 (Gated DeltaNet hybrid) model with long prompts: the tiny qwen3_5 model (F32 and BF16) with
// room for 512 positions, so prompts and re-prefills cross the delta rule's 64-row chunks. Cached decode (K/V of the
// attention layer, conv + delta-rule state of the linear one) equals full forwards of the whole sequences,
// greedy sampling equals greedy decoding by full forwards, preemption keeps tokens exact, and SequenceCache
// keeps no K/V for linear-attention layers and forks their state deeply.
#include <algorithm>
#include <cmath>
#include <cstdio>
#include <map>

#include <gtest/gtest.h>
#include <nlohmann/json.hpp>

#include "engine/engine.h"
#include "engine/kv_cache.h"
#include "sample_test_helpers.h"
#include "test_models.h"

namespace tinkerd::testing {
namespace {

using engine::AdapterId;
using engine::Engine;
using engine::SampleOutput;
using engine::SampleRequest;

// The tiny hybrid stored in F32 or BF16 (then run in bf16: the conv / recurrent states stay fp32).
class Qwen35SampleTest : public ::testing::TestWithParam<model::DType> {
  protected:
    void SetUp() override {
        nlohmann::json config = nlohmann::json::parse(tiny_config_json(TinyFamily::QWEN3_5));
        config["max_position_embeddings"] = 512;
        write_model_dir(dir_.path(), config.dump(), tiny_model_tensors(TinyFamily::QWEN3_5, GetParam(), 21));
        engine_ = load(int64_t{1} << 30);
        vocab_ = engine_->config().vocab_size;
    }
    std::unique_ptr<Engine> load(int64_t kv_bytes) const {
        auto loaded = Engine::load(dir_.path(), {engine::ComputeDType::AUTO, 1, kv_bytes});
        EXPECT_TRUE(loaded.ok()) << loaded.error().message;
        return loaded.ok() ? std::move(loaded).value() : nullptr;
    }
    // An adapter on every target (the linear-attention projections included) after one AdamW step on 80 tokens.
    AdapterId trained_adapter(uint64_t seed) { return testing::trained_adapter(*engine_, seed, 80, 2e-2); }
    std::vector<int64_t> random_tokens(int64_t n, uint64_t seed) const {
        return testing::random_tokens(n, seed, vocab_);
    }
    std::vector<double> forward_logprobs(AdapterId id, const std::vector<int64_t> & tokens) {
        return full_forward_logprobs(*engine_, id, tokens);  // the chunked delta rule over the whole sequence
    }

    ScopedTempDir dir_{"qwen35_sample_test"};
    std::unique_ptr<Engine> engine_;
    int64_t vocab_ = 0;
};

// One prefill of prompts of 130, 70, 64 and 5 tokens (base and adapter rows mixed, num_samples forks the
// state), then 30 decode steps: every sampled token's logprob equals the full forward's.
TEST_P(Qwen35SampleTest, CachedDecodeEqualsFullForwardAcrossChunks) {
    const AdapterId id = trained_adapter(3);
    const std::vector<SampleRequest> reqs = {seeded_request(id, random_tokens(130, 4), 30, 1, 2),
                                             seeded_request(engine::BASE_MODEL, random_tokens(70, 5), 30, 2, 2),
                                             seeded_request(id, random_tokens(64, 6), 30, 3, 1),
                                             seeded_request(engine::BASE_MODEL, random_tokens(5, 7), 30, 4, 3)};
    auto out = engine_->sample(reqs);
    const double tolerance = GetParam() == model::DType::F32 ? 1e-5 : 5e-5;  // measured: 2.4e-6, 9.1e-6
    double worst = 0;
    size_t checked = 0;
    for (size_t i = 0; i < reqs.size(); ++i) {
        ASSERT_TRUE(out[i].ok()) << out[i].error().message;
        ASSERT_EQ(out[i]->sequences.size(), static_cast<size_t>(reqs[i].num_samples));
        for (const auto & s : out[i]->sequences) {
            ASSERT_EQ(s.tokens.size(), 30u);
            std::vector<int64_t> all = reqs[i].prompt;
            all.insert(all.end(), s.tokens.begin(), s.tokens.end());
            const auto want = forward_logprobs(reqs[i].adapter, all);
            const size_t first = reqs[i].prompt.size() - 1;
            for (size_t t = 0; t < s.tokens.size(); ++t, ++checked) {
                worst = std::max(worst, std::abs(s.logprobs[t] - want[first + t]));
                EXPECT_NEAR(s.logprobs[t], want[first + t], tolerance) << "request " << i << " token " << t;
            }
        }
    }
    std::printf("cached decode vs full forward (%s): %zu tokens, worst |diff| %.3g\n",
                GetParam() == model::DType::F32 ? "f32" : "bf16", checked, worst);
    EXPECT_EQ(checked, 8u * 30u);
    EXPECT_NE(out[0]->sequences[0].tokens, out[0]->sequences[1].tokens) << "forked sequences draw their own tokens";
}

TEST_P(Qwen35SampleTest, PromptLogprobsOfALongPromptEqualFullForward) {
    const AdapterId id = trained_adapter(8);
    SampleRequest r = seeded_request(id, random_tokens(150, 9), 1, 1, 1);
    r.prompt_logprobs = true;
    const SampleOutput out = sample_one(*engine_, r);
    const auto want = forward_logprobs(id, r.prompt);
    ASSERT_EQ(out.prompt_logprobs.size(), r.prompt.size());
    for (size_t i = 1; i < r.prompt.size(); ++i)
        EXPECT_NEAR(out.prompt_logprobs[i], want[i - 1], 1e-5) << i;
}

// Temperature 0 through the caches picks the tokens greedy decoding by repeated full forwards picks.
TEST_P(Qwen35SampleTest, GreedySamplingEqualsGreedyFullForwards) {
    const AdapterId id = trained_adapter(10);
    for (AdapterId adapter : {engine::BASE_MODEL, id}) {
        const std::vector<int64_t> prompt = random_tokens(66, 11);
        SampleRequest r = seeded_request(adapter, prompt, 12, 1, 1);
        r.params.temperature = 0.0;
        const SampleOutput out = sample_one(*engine_, r);
        auto full = engine::greedy_generate(*engine_, adapter, prompt, 12, {});
        ASSERT_TRUE(full.ok()) << full.error().message;
        EXPECT_EQ(out.sequences[0].tokens, *full) << adapter;
    }
}

// Long sequences under a budget for about one and a half of them: preempted requests re-prefill prompt +
// tokens so far (over 64 rows: the chunked pass) and continue with exactly the tokens they get unhindered.
TEST_P(Qwen35SampleTest, PreemptionAcrossChunksKeepsTokensExact) {
    std::vector<SampleRequest> reqs;
    for (uint32_t i = 0; i < 3; ++i)
        reqs.push_back(seeded_request(engine::BASE_MODEL, random_tokens(60 + 7 * i, 30 + i), 40, 50 + i, 2));
    std::vector<std::vector<std::vector<int64_t>>> expected;
    for (auto & out : engine_->sample(reqs)) {
        expected.emplace_back();
        for (const auto & s : out.value().sequences)
            expected.back().push_back(s.tokens);
    }
    const auto & c = engine_->config();
    const int64_t per_token = 2 * c.n_kv_heads * c.head_dim * 4;  // one attention layer, fp32
    auto tight = load(per_token * 2 * (74 + 40 + 8) * 3 / 2);
    std::vector<engine::SampleHandle> handles;
    for (const auto & r : reqs)
        handles.push_back(tight->sample_submit(r).value());
    std::map<engine::SampleHandle, SampleOutput> done;
    for (int guard = 0; done.size() < handles.size() && guard < 1000; ++guard) {
        for (auto & f : tight->sample_step()) {
            ASSERT_TRUE(f.output.ok()) << f.output.error().message;
            done[f.handle] = *f.output;
        }
        ASSERT_LE(tight->sample_stats().kv_bytes, tight->sample_stats().kv_budget_bytes);
    }
    ASSERT_EQ(done.size(), handles.size());
    EXPECT_GT(tight->sample_stats().preemptions, 0) << "the budget should have forced a preemption";
    for (size_t i = 0; i < handles.size(); ++i) {
        for (size_t s = 0; s < expected[i].size(); ++s)
            EXPECT_EQ(done[handles[i]].sequences[s].tokens, expected[i][s]) << "request " << i << " sample " << s;
    }
}

INSTANTIATE_TEST_SUITE_P(Dtypes, Qwen35SampleTest, ::testing::Values(model::DType::F32, model::DType::BF16),
                         [](const auto & info) { return info.param == model::DType::F32 ? "F32" : "BF16"; });

TEST(Qwen35SequenceCache, LinearLayersKeepStateNotKvAndForkCopiesIt) {
    auto shape = std::make_shared<engine::CacheShape>();
    shape->n_layers = 3;
    shape->n_kv_heads = 2;
    shape->head_dim = 8;
    shape->recurrent = {true, false, true};
    shape->conv_dim = 12;
    shape->conv_width = 3;
    shape->v_heads = 2;
    shape->k_head_dim = 4;
    shape->v_head_dim = 5;
    EXPECT_EQ(shape->kv_bytes_per_token(), 1 * 2 * 2 * 8 * 4) << "only the attention layer keeps K/V";
    EXPECT_EQ(shape->state_bytes(), 2 * (12 * 3 + 2 * 4 * 5) * 4);
    engine::SequenceCache cache(shape);
    cache.reserve(10);
    EXPECT_EQ(cache.capacity(), 10);
    EXPECT_EQ(cache.keys(1, 10).sizes(), (std::vector<int64_t>{2, 10, 8}));
    EXPECT_ANY_THROW(cache.keys(0, 1)) << "no K/V slab for a linear-attention layer";
    ASSERT_EQ(cache.conv_state(0).sizes(), (std::vector<int64_t>{12, 3}));
    ASSERT_EQ(cache.recurrent_state(2).sizes(), (std::vector<int64_t>{2, 4, 5}));
    EXPECT_EQ(cache.recurrent_state(2).abs().sum().item<double>(), 0.0) << "a fresh sequence starts at zero";
    cache.recurrent_state(2).fill_(1.5);
    engine::SequenceCache copy = cache.fork();
    cache.recurrent_state(2).fill_(-3.0);
    cache.conv_state(0).fill_(2.0);
    EXPECT_EQ(copy.recurrent_state(2).min().item<double>(), 1.5);
    EXPECT_EQ(copy.conv_state(0).abs().sum().item<double>(), 0.0);
}

}  // namespace
}  // namespace tinkerd::testing
