// Continuous batching (Engine::sample_submit / sample_step / sample_cancel) on the tiny llama, qwen3_moe and
// qwen3_5 models:
// a request joining a running batch gets the tokens it gets alone, a KV budget too small for everything
// preempts and resumes requests without changing any token, cancel and adapter removal free the cache,
// on_token streams exactly the final tokens, and top_logprobs agree with the chosen token.
#include <algorithm>
#include <map>
#include <optional>
#include <random>

#include <gtest/gtest.h>

#include "engine/engine.h"
#include "sample_test_helpers.h"
#include "test_models.h"

namespace tinkerd::testing {
namespace {

using engine::AdapterId;
using engine::Engine;
using engine::SampleHandle;
using engine::SampleOutput;
using engine::SampleRequest;

std::vector<std::vector<int64_t>> tokens_of(const SampleOutput & out) {
    std::vector<std::vector<int64_t>> all;
    for (const auto & s : out.sequences) {
        all.push_back(s.tokens);
    }
    return all;
}

class ContinuousBatchingTest : public ::testing::TestWithParam<TinyFamily> {
  protected:
    void SetUp() override { write_tiny_model(dir_.path(), GetParam(), model::DType::F32, 11); }
    std::unique_ptr<Engine> load(int64_t kv_bytes = int64_t{1} << 30) {
        auto loaded = Engine::load(dir_.path(), {engine::ComputeDType::AUTO, 1, kv_bytes});
        EXPECT_TRUE(loaded.ok()) << loaded.error().message;
        return std::move(loaded).value();
    }
    static std::vector<int64_t> prompt(int64_t n, uint32_t seed) {
        std::mt19937 rng(seed);
        std::uniform_int_distribution<int64_t> tok(3, 50);  // inside every tiny vocabulary
        std::vector<int64_t> out(n);
        for (auto & t : out)
            t = tok(rng);
        return out;
    }
    // Steps until every handle has finished; returns each one's output.
    static std::map<SampleHandle, SampleOutput> run(Engine & e, std::vector<SampleHandle> handles) {
        std::map<SampleHandle, SampleOutput> done;
        for (int guard = 0; done.size() < handles.size() && guard < 10000; ++guard) {
            for (auto & f : e.sample_step()) {
                EXPECT_TRUE(f.output.ok()) << f.output.error().message;
                if (f.output.ok())
                    done[f.handle] = *f.output;
            }
        }
        return done;
    }

    ScopedTempDir dir_{"cb_test"};
};

TEST_P(ContinuousBatchingTest, RequestJoiningARunningBatchGetsItsTokensAlone) {
    auto e = load();
    const SampleRequest a = seeded_request(engine::BASE_MODEL, prompt(7, 1), 50, 5, 2);
    const SampleRequest b = seeded_request(engine::BASE_MODEL, prompt(11, 2), 25, 9, 3);
    const auto a_alone = tokens_of(e->sample({a})[0].value());
    const auto b_alone = tokens_of(e->sample({b})[0].value());

    const SampleHandle ha = e->sample_submit(a).value();
    for (int i = 0; i < 6; ++i) {
        EXPECT_TRUE(e->sample_step().empty());
    }
    const SampleHandle hb = e->sample_submit(b).value();
    EXPECT_TRUE(e->sample_step().empty());
    EXPECT_EQ(e->sample_stats().running, 2);
    EXPECT_EQ(e->sample_stats().live_sequences, 5);
    auto done = run(*e, {ha, hb});
    EXPECT_EQ(tokens_of(done[ha]), a_alone);
    EXPECT_EQ(tokens_of(done[hb]), b_alone);
    EXPECT_EQ(e->sample_stats().kv_bytes, 0) << "finished requests keep no cache";
}

TEST_P(ContinuousBatchingTest, SmallKvBudgetPreemptsAndResumesWithoutChangingAnyToken) {
    std::vector<SampleRequest> requests;
    for (uint32_t i = 0; i < 5; ++i) {
        requests.push_back(seeded_request(engine::BASE_MODEL, prompt(6 + i, 10 + i), 50, 100 + i, 2));
    }
    auto roomy = load();
    std::vector<std::vector<std::vector<int64_t>>> expected;
    for (auto & out : roomy->sample(requests)) {
        expected.push_back(tokens_of(out.value()));
    }
    // Room for about 2.5 of the five requests at full length: the later ones must wait or be preempted.
    auto tight = load(kv_bytes_per_token(*roomy) * 2 * (10 + 50 + kv_state_tokens(*roomy)) * 5 / 2);
    std::vector<SampleHandle> handles;
    for (const auto & r : requests) {
        handles.push_back(tight->sample_submit(r).value());
    }
    std::map<SampleHandle, SampleOutput> done;
    while (done.size() < handles.size()) {
        for (auto & f : tight->sample_step()) {
            ASSERT_TRUE(f.output.ok()) << f.output.error().message;
            done[f.handle] = *f.output;
        }
        const auto stats = tight->sample_stats();
        ASSERT_LE(stats.kv_bytes, stats.kv_budget_bytes);
    }
    EXPECT_GT(tight->sample_stats().preemptions, 0) << "the budget should have forced a preemption";
    for (size_t i = 0; i < handles.size(); ++i) {
        EXPECT_EQ(tokens_of(done[handles[i]]), expected[i]) << "request " << i;
    }
}

TEST_P(ContinuousBatchingTest, RequestLargerThanTheWholeBudgetIsRefusedWithANamedReason) {
    auto e = load(int64_t{64} << 10);
    auto h = e->sample_submit(seeded_request(engine::BASE_MODEL, prompt(8, 3), 50, 1, 128));
    ASSERT_FALSE(h.ok());
    EXPECT_NE(h.error().message.find("KV cache"), std::string::npos) << h.error().message;
    EXPECT_NE(h.error().message.find("max_tokens"), std::string::npos) << h.error().message;
}

TEST_P(ContinuousBatchingTest, CancelFreesTheCacheAndOthersContinue) {
    auto e = load();
    const SampleRequest keep = seeded_request(engine::BASE_MODEL, prompt(5, 4), 30, 3);
    const auto keep_alone = tokens_of(e->sample({keep})[0].value());
    const SampleHandle hk = e->sample_submit(keep).value();
    const SampleHandle hc = e->sample_submit(seeded_request(engine::BASE_MODEL, prompt(9, 5), 50, 4, 4)).value();
    e->sample_step();
    e->sample_step();
    const int64_t before = e->sample_stats().kv_bytes;
    EXPECT_TRUE(e->sample_cancel(hc));
    EXPECT_FALSE(e->sample_cancel(hc));
    EXPECT_LT(e->sample_stats().kv_bytes, before);
    EXPECT_EQ(e->sample_stats().live_sequences, 1);
    auto done = run(*e, {hk});
    EXPECT_EQ(tokens_of(done[hk]), keep_alone);
    EXPECT_EQ(done.count(hc), 0u);
}

TEST_P(ContinuousBatchingTest, RemovingAnAdapterFailsItsRequestsOnly) {
    auto e = load();
    engine::LoraSpec spec;
    spec.rank = 2;
    const AdapterId id = e->create_adapter(spec).value();
    const SampleHandle ha = e->sample_submit(seeded_request(id, prompt(5, 6), 50, 1)).value();
    const SampleHandle hb = e->sample_submit(seeded_request(engine::BASE_MODEL, prompt(5, 7), 20, 2)).value();
    e->sample_step();
    ASSERT_TRUE(e->remove_adapter(id).ok());
    std::map<SampleHandle, engine::FinishedSample> done;
    for (int guard = 0; done.size() < 2 && guard < 100; ++guard) {
        for (auto & f : e->sample_step()) {
            done.emplace(f.handle, std::move(f));
        }
    }
    ASSERT_EQ(done.size(), 2u);
    ASSERT_FALSE(done.at(ha).output.ok());
    EXPECT_EQ(done.at(ha).output.error().kind, ErrorKind::NOT_FOUND);
    EXPECT_TRUE(done.at(hb).output.ok());
}

TEST_P(ContinuousBatchingTest, OnTokenStreamsTheFinalTokensAndTopLogprobsAgree) {
    auto e = load();
    for (double temperature : {0.0, 0.7}) {
        SampleRequest r = seeded_request(engine::BASE_MODEL, prompt(6, 8), 20, 7, 3);
        r.params.temperature = temperature;
        r.top_logprobs = 5;
        std::map<int64_t, std::vector<int64_t>> streamed;
        r.on_token = [&](int64_t index, int64_t token, float, const engine::TopLogprobs &) {
            streamed[index].push_back(token);
        };
        const SampleOutput out = e->sample({r})[0].value();
        ASSERT_EQ(out.sequences.size(), 3u);
        for (size_t i = 0; i < out.sequences.size(); ++i) {
            const auto & s = out.sequences[i];
            EXPECT_EQ(streamed[static_cast<int64_t>(i)], s.tokens);
            ASSERT_EQ(s.top_logprobs.size(), s.tokens.size());
            for (size_t t = 0; t < s.tokens.size(); ++t) {
                const auto & top = s.top_logprobs[t];
                ASSERT_EQ(top.size(), 5u);
                EXPECT_TRUE(std::is_sorted(top.begin(), top.end(),
                                           [](const auto & a, const auto & b) { return a.second > b.second; }));
                auto it = std::find_if(top.begin(), top.end(), [&](const auto & p) { return p.first == s.tokens[t]; });
                if (temperature == 0.0) {
                    EXPECT_EQ(top[0].first, s.tokens[t]) << "greedy picks the best token";
                }
                if (it != top.end()) {
                    EXPECT_NEAR(it->second, s.logprobs[t], 1e-6) << "same distribution as the token's logprob";
                }
            }
        }
    }
}

// Llama, Qwen3-MoE (the experts' routing must not depend on the batch, preemption or the cache either) and
// Qwen3.5 (its recurrent state is dropped on preemption and recomputed from the prompt and tokens so far), and
// Qwen3.5-MoE (both at once).
INSTANTIATE_TEST_SUITE_P(Families, ContinuousBatchingTest,
                         ::testing::Values(TinyFamily::LLAMA, TinyFamily::QWEN3_MOE, TinyFamily::QWEN3_5,
                                           TinyFamily::QWEN3_5_MOE));

}  // namespace
}  // namespace tinkerd::testing
