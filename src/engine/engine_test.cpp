// Engine semantics on a tiny random fp32 llama: forward leaves gradients alone, gradients accumulate,
// failing inputs name the problem and change nothing (alone or next to a valid input), optim_step
// touches only its adapter, export/import with optimizer resumes bit-exactly, fresh adapters equal
// the base model, seeded initialisation, and which PEFT keys each LoRA target set creates.
#include "engine/engine.h"

#include <algorithm>
#include <cmath>
#include <random>

#include <gtest/gtest.h>

#include "test_models.h"

namespace tinkerd::testing {
namespace {

using engine::AdapterId;
using engine::Engine;
using engine::ForwardBackwardInput;
using engine::HostTensor;
using State = std::map<std::string, HostTensor>;

// Weights, optimizer state and accumulated gradients of an adapter, for bitwise comparisons.
State snapshot(const Engine & e, AdapterId id) {
    State s = e.export_adapter(id, true).value();
    const State grads = e.export_gradients(id).value();  // named: looping over .value() of a temporary dangles
    for (const auto & [key, g] : grads)
        s["grad:" + key] = g;
    return s;
}

bool same(const State & a, const State & b) {
    if (a.size() != b.size())
        return false;
    for (const auto & [key, t] : a) {
        auto it = b.find(key);
        if (it == b.end() || it->second.dtype != t.dtype || it->second.shape != t.shape || it->second.bytes != t.bytes)
            return false;
    }
    return true;
}

double max_abs(const State & s, const std::string & prefix) {
    double m = 0;
    for (const auto & [key, t] : s)
        if (key.rfind(prefix, 0) == 0 && key.find(".exp_avg") == std::string::npos)
            for (double x : engine::host_tensor_values(t))
                m = std::max(m, std::abs(x));
    return m;
}

// max |a - b| / max |b| (1 when the sizes differ or b is all zero)
double max_rel_diff(const std::vector<double> & a, const std::vector<double> & b) {
    double diff = 0, scale = 0;
    if (a.size() != b.size())
        return 1.0;
    for (size_t i = 0; i < a.size(); ++i)
        diff = std::max(diff, std::abs(a[i] - b[i])), scale = std::max(scale, std::abs(b[i]));
    return scale > 0 ? diff / scale : 1.0;
}

class EngineTest : public ::testing::Test {
  protected:
    void SetUp() override {
        write_tiny_model(dir_.path(), TinyFamily::LLAMA, model::DType::F32, 3);
        engine_ = load();
    }
    std::unique_ptr<Engine> load() {
        auto loaded = Engine::load(dir_.path(), {engine::ComputeDType::AUTO, 1});
        EXPECT_TRUE(loaded.ok()) << loaded.error().message;
        return std::move(loaded).value();
    }
    AdapterId adapter(uint64_t seed) {
        engine::LoraSpec spec;
        spec.rank = 4;
        spec.alpha = 8.0;
        spec.seed = seed;
        return engine_->create_adapter(spec).value();
    }
    // A cross_entropy input of two datums with random tokens, targets and fractional weights.
    ForwardBackwardInput ce_input(AdapterId id, uint32_t seed) {
        std::mt19937 rng(seed);
        std::uniform_int_distribution<int64_t> tok(0, engine_->config().vocab_size - 1);
        std::uniform_real_distribution<float> w(-0.5f, 1.5f);
        ForwardBackwardInput in{id, {}, "cross_entropy", {}};
        for (int64_t n : {9, 6}) {
            std::vector<int64_t> tokens(n), targets(n);
            std::vector<float> weights(n);
            for (int64_t i = 0; i < n; ++i)
                tokens[i] = tok(rng), targets[i] = tok(rng), weights[i] = w(rng);
            in.datums.push_back({tokens,
                                 {{"target_tokens", engine::make_host_tensor_i64({n}, targets)},
                                  {"weights", engine::make_host_tensor_f32({n}, weights)}}});
        }
        return in;
    }
    // forward_backward of one input that must succeed; returns its loss.
    double run(const ForwardBackwardInput & in, bool backward) {
        auto r = engine_->forward_backward({in}, backward);
        EXPECT_TRUE(r[0].ok()) << r[0].error().message;
        return r[0].ok() ? r[0]->metrics.at("loss:sum") : NAN;
    }
    // Zeroes an adapter's gradients by re-importing its own weights.
    void reset_grads(AdapterId id) {
        ASSERT_TRUE(engine_->import_adapter(id, engine_->export_adapter(id, false).value(), false).ok());
    }
    // Valid importance_sampling input whose loss overflows fp32 (ratio exp(lp + 1000)).
    ForwardBackwardInput infinite_loss_input(AdapterId id) {
        auto in = ce_input(id, 6);
        in.loss_fn = "importance_sampling";
        for (auto & d : in.datums) {
            const int64_t m = static_cast<int64_t>(d.tokens.size());
            d.loss_inputs.erase("weights");
            d.loss_inputs["logprobs"] = engine::make_host_tensor_f32({m}, std::vector<float>(m, -1000.0f));
            d.loss_inputs["advantages"] = engine::make_host_tensor_f32({m}, std::vector<float>(m, 1.0f));
        }
        return in;
    }
    std::vector<double> grads(AdapterId id) {
        std::vector<double> all;
        const State exported = engine_->export_gradients(id).value();
        for (const auto & [key, g] : exported) {
            auto v = engine::host_tensor_values(g);
            all.insert(all.end(), v.begin(), v.end());
        }
        return all;
    }

    ScopedTempDir dir_{"engine_test"};
    std::unique_ptr<Engine> engine_;
    engine::AdamParams adam_{1e-2, 0.9, 0.95, 1e-8, 0.01, 1.0};
};

TEST_F(EngineTest, ForwardLeavesAccumulatedGradientsBitwiseUnchanged) {
    const AdapterId id = adapter(1);
    run(ce_input(id, 1), true);
    ASSERT_TRUE(engine_->optim_step(id, adam_).ok());  // B != 0 so every gradient is nonzero
    run(ce_input(id, 2), true);
    const State before = snapshot(*engine_, id);
    ASSERT_GT(max_abs(before, "grad:"), 0.0);
    run(ce_input(id, 3), false);
    EXPECT_TRUE(same(before, snapshot(*engine_, id)));
}

TEST_F(EngineTest, GradientsAccumulateAcrossCalls) {
    const AdapterId id = adapter(1);
    run(ce_input(id, 1), true);
    ASSERT_TRUE(engine_->optim_step(id, adam_).ok());
    const auto x1 = ce_input(id, 10), x2 = ce_input(id, 11);
    run(x1, true);
    const auto g1 = grads(id);
    reset_grads(id);
    run(x2, true);
    const auto g2 = grads(id);
    reset_grads(id);
    run(x1, true);
    run(x2, true);
    const auto sum = grads(id);
    ASSERT_EQ(sum.size(), g1.size());
    double largest = 0;
    for (size_t i = 0; i < sum.size(); ++i) {
        ASSERT_EQ(sum[i], static_cast<double>(static_cast<float>(g1[i]) + static_cast<float>(g2[i]))) << i;
        largest = std::max(largest, std::abs(g1[i]));
    }
    EXPECT_GT(largest, 0.0);
}

TEST_F(EngineTest, FailingInputsNameTheProblemAndChangeNothing) {
    const AdapterId id = adapter(1);
    run(ce_input(id, 1), true);
    ASSERT_TRUE(engine_->optim_step(id, adam_).ok());
    run(ce_input(id, 2), true);  // weights, moments, step and gradients are all nonzero now
    const State before = snapshot(*engine_, id);
    const auto good = ce_input(id, 3);
    const int64_t n = static_cast<int64_t>(good.datums[0].tokens.size());
    auto rl = good;  // importance_sampling with valid logprobs and advantages
    rl.loss_fn = "importance_sampling";
    for (auto & d : rl.datums) {
        const int64_t m = static_cast<int64_t>(d.tokens.size());
        d.loss_inputs.erase("weights");
        d.loss_inputs["logprobs"] = engine::make_host_tensor_f32({m}, std::vector<float>(m, -4.0f));
        d.loss_inputs["advantages"] = engine::make_host_tensor_f32({m}, std::vector<float>(m, 0.5f));
    }
    struct Case {
        const char * what;
        ForwardBackwardInput input;
        std::vector<std::string> words;  // each must appear in the message
    };
    std::vector<Case> cases;
    auto add = [&](const char * what, std::vector<std::string> words, auto edit) {
        Case c{what, good, std::move(words)};
        edit(c.input);
        cases.push_back(std::move(c));
    };
    add("unknown loss", {"hinge"}, [](auto & in) { in.loss_fn = "hinge"; });
    add("unknown config key", {"clip_low_threshold"}, [](auto & in) { in.loss_fn_config["clip_low_threshold"] = 0.5; });
    add("missing targets", {"missing", "target_tokens"},
        [](auto & in) { in.datums[1].loss_inputs.erase("target_tokens"); });
    add("targets shape", {"target_tokens", "shape"}, [&](auto & in) {
        in.datums[0].loss_inputs["target_tokens"] =
            engine::make_host_tensor_i64({n + 1}, std::vector<int64_t>(n + 1, 0));
    });
    add("input token out of vocab", {"61", "vocabulary"}, [](auto & in) { in.datums[1].tokens[2] = 61; });
    add("target out of vocab", {"-3", "vocabulary"}, [&](auto & in) {
        std::vector<int64_t> t(n, 0);
        t[4] = -3;
        in.datums[0].loss_inputs["target_tokens"] = engine::make_host_tensor_i64({n}, t);
    });
    add("weights shape", {"weights", "shape"}, [&](auto & in) {
        in.datums[0].loss_inputs["weights"] = engine::make_host_tensor_f32({n - 1}, std::vector<float>(n - 1, 1.0f));
    });
    add("no datums", {"datum"}, [](auto & in) { in.datums.clear(); });
    add("unknown adapter", {"adapter", "999"}, [](auto & in) { in.adapter = 999; });
    add("backward on the base model", {"base model"}, [](auto & in) { in.adapter = engine::BASE_MODEL; });
    cases.push_back({"NaN advantages", rl, {"advantages", "non-finite"}});
    cases.back().input.datums[1].loss_inputs["advantages"] = engine::make_host_tensor_f32({6}, {0, 1, NAN, 0, 0, 0});
    cases.push_back({"missing advantages", rl, {"missing", "advantages"}});
    cases.back().input.datums[0].loss_inputs.erase("advantages");
    cases.push_back({"infinite loss", rl, {"not finite"}});  // ratio exp(lp + 1000) overflows fp32
    cases.back().input.datums[0].loss_inputs["logprobs"] =
        engine::make_host_tensor_f32({n}, std::vector<float>(n, -1000.0f));
    for (const Case & c : cases) {
        auto r = engine_->forward_backward({c.input}, true);
        ASSERT_FALSE(r[0].ok()) << c.what;
        for (const auto & w : c.words)
            EXPECT_NE(r[0].error().message.find(w), std::string::npos) << c.what << ": " << r[0].error().message;
        EXPECT_TRUE(same(before, snapshot(*engine_, id))) << c.what << " changed the adapter";
    }
    auto bad_step = adam_;
    bad_step.beta1 = 1.0;
    auto s = engine_->optim_step(id, bad_step);
    ASSERT_FALSE(s.ok());
    EXPECT_NE(s.error().message.find("beta1"), std::string::npos) << s.error().message;
    EXPECT_TRUE(same(before, snapshot(*engine_, id)));
    run(rl, true);  // the valid RL input itself is fine
}

TEST_F(EngineTest, InvalidInputNextToAValidOneLeavesTheValidOneIntact) {
    const AdapterId a = adapter(1), b = adapter(2);
    const auto valid = ce_input(a, 5);
    const double alone_loss = run(valid, true);
    const auto alone = grads(a);
    reset_grads(a);
    auto bad_token = valid;
    bad_token.datums[0].tokens[0] = -1;
    auto r = engine_->forward_backward({bad_token, valid}, true);
    EXPECT_FALSE(r[0].ok());
    ASSERT_TRUE(r[1].ok()) << r[1].error().message;
    EXPECT_EQ(r[1]->metrics.at("loss:sum"), alone_loss);
    EXPECT_EQ(grads(a), alone);
    // An input of another adapter whose loss is not finite (passes validation) fails alone.
    reset_grads(a);
    const auto inf_b = infinite_loss_input(b);
    const State b_before = snapshot(*engine_, b);
    r = engine_->forward_backward({inf_b, valid}, true);
    EXPECT_FALSE(r[0].ok());
    ASSERT_TRUE(r[1].ok()) << r[1].error().message;
    EXPECT_LT(max_rel_diff(grads(a), alone), 1e-5);  // not bitwise: b's rows share the packed batch
    EXPECT_TRUE(same(b_before, snapshot(*engine_, b)));
}

// "Each input succeeds or fails on its own" (engine.h): an input of the same adapter whose loss is not
// finite must not silently drop the gradient of a valid input that is reported as successful.
TEST_F(EngineTest, NonFiniteLossDoesNotDropTheGradientOfAValidInputOfTheSameAdapter) {
    const AdapterId a = adapter(1);
    const auto valid = ce_input(a, 5);
    run(valid, true);
    const auto alone = grads(a);
    reset_grads(a);
    auto r = engine_->forward_backward({infinite_loss_input(a), valid}, true);
    EXPECT_FALSE(r[0].ok());
    ASSERT_TRUE(r[1].ok()) << "a valid input failed because of another input: " << r[1].error().message;
    EXPECT_LT(max_rel_diff(grads(a), alone), 1e-5) << "input 1 reported success but its gradient was not accumulated";
}

TEST_F(EngineTest, OptimStepChangesOnlyItsOwnAdapterAndZeroesItsGradients) {
    const AdapterId a = adapter(1), b = adapter(2);
    auto r = engine_->forward_backward({ce_input(a, 1), ce_input(b, 1)}, true);
    ASSERT_TRUE(r[0].ok() && r[1].ok());
    const State a_before = snapshot(*engine_, a), b_before = snapshot(*engine_, b);
    auto out = engine_->optim_step(a, adam_);
    ASSERT_TRUE(out.ok()) << out.error().message;
    EXPECT_EQ(out->metrics.at("step:max"), 1.0);
    EXPECT_GT(out->metrics.at("grad_norm:mean"), 0.0);
    EXPECT_TRUE(same(b_before, snapshot(*engine_, b)));
    const State a_after = snapshot(*engine_, a);
    EXPECT_EQ(max_abs(a_after, "grad:"), 0.0);
    EXPECT_GT(max_abs(a_before, "grad:"), 0.0);
    EXPECT_FALSE(same(a_before, a_after));
    EXPECT_GT(max_abs(a_after, "base_model.model.lm_head.lora_B"), 0.0);  // B moved off zero
    EXPECT_EQ(engine::host_tensor_values(a_after.at("optimizer.step"))[0], 1.0);
}

TEST_F(EngineTest, ExportImportWithOptimizerResumesBitExactly) {
    const AdapterId id = adapter(7);
    const auto x = ce_input(id, 42);
    for (int s = 0; s < 2; ++s) {
        run(x, true);
        ASSERT_TRUE(engine_->optim_step(id, adam_).ok());
    }
    const State checkpoint = engine_->export_adapter(id, true).value();
    std::vector<double> uninterrupted;
    for (int s = 0; s < 3; ++s) {
        uninterrupted.push_back(run(x, true));
        ASSERT_TRUE(engine_->optim_step(id, adam_).ok());
    }
    const State final_weights = engine_->export_adapter(id, true).value();
    for (bool with_optimizer : {true, false}) {
        engine_ = load();
        const AdapterId resumed = adapter(7);
        ASSERT_TRUE(engine_->import_adapter(resumed, checkpoint, with_optimizer).ok());
        auto in = x;
        in.adapter = resumed;
        std::vector<double> losses;
        for (int s = 0; s < 3; ++s) {
            losses.push_back(run(in, true));
            ASSERT_TRUE(engine_->optim_step(resumed, adam_).ok());
        }
        if (with_optimizer) {
            EXPECT_EQ(losses, uninterrupted);
            EXPECT_TRUE(same(final_weights, engine_->export_adapter(resumed, true).value()));
        } else {  // weights only: the optimizer restarts, so the trajectory differs
            EXPECT_EQ(losses[0], uninterrupted[0]);
            EXPECT_NE(losses[2], uninterrupted[2]);
        }
    }
}

TEST_F(EngineTest, FreshAdapterGivesExactlyTheBaseModelsOutputs) {
    const AdapterId id = adapter(3);
    auto in = ce_input(id, 8);
    auto base_in = in;
    base_in.adapter = engine::BASE_MODEL;
    auto r = engine_->forward_backward({in, base_in}, false);
    ASSERT_TRUE(r[0].ok() && r[1].ok());
    // The adapter's rows and the base rows are separate segments of one batch; MKL (torch 2.x wheels) may
    // block a GEMM differently for each segment's row count, so the zero LoRA delta leaves them equal up
    // to float rounding (bit-equal under OpenBLAS on Intel; 1 ulp apart under MKL on AMD EPYC).
    for (size_t d = 0; d < in.datums.size(); ++d) {
        const auto a = engine::host_tensor_values(r[0]->logprobs[d]), b = engine::host_tensor_values(r[1]->logprobs[d]);
        ASSERT_EQ(a.size(), b.size());
        for (size_t t = 0; t < a.size(); ++t)
            EXPECT_NEAR(a[t], b[t], 1e-6 * (1.0 + std::fabs(b[t]))) << d << "," << t;
    }
    // last_logits runs one sequence alone, where the BLAS may pick other kernels for the adapter's split
    // projections than for the base's fused ones: equal up to float rounding.
    const auto adapter_logits = engine_->last_logits(id, in.datums[0].tokens).value();
    const auto base_logits = engine_->last_logits(engine::BASE_MODEL, in.datums[0].tokens).value();
    ASSERT_EQ(adapter_logits.size(), base_logits.size());
    for (size_t v = 0; v < base_logits.size(); ++v)
        EXPECT_NEAR(adapter_logits[v], base_logits[v], 1e-5f * (1.0f + std::fabs(base_logits[v]))) << v;
    run(in, true);
    ASSERT_TRUE(engine_->optim_step(id, adam_).ok());
    EXPECT_NE(engine_->last_logits(id, in.datums[0].tokens).value(),
              engine_->last_logits(engine::BASE_MODEL, in.datums[0].tokens).value());
}

TEST_F(EngineTest, SeedsDetermineTheInitialisation) {
    const auto & c = engine_->config();
    const State a = engine_->export_adapter(adapter(21), false).value();
    EXPECT_TRUE(same(a, engine_->export_adapter(adapter(21), false).value()));
    EXPECT_FALSE(same(a, engine_->export_adapter(adapter(22), false).value()));
    ASSERT_EQ(a.size(), static_cast<size_t>(2 * (7 * c.n_layers + 1)));
    const int64_t q = c.n_heads * c.head_dim, kv = c.n_kv_heads * c.head_dim;
    const std::map<std::string, std::pair<int64_t, int64_t>> in_out = {
        {"q_proj", {c.hidden_size, q}},
        {"k_proj", {c.hidden_size, kv}},
        {"v_proj", {c.hidden_size, kv}},
        {"o_proj", {q, c.hidden_size}},
        {"gate_proj", {c.hidden_size, c.intermediate_size}},
        {"up_proj", {c.hidden_size, c.intermediate_size}},
        {"down_proj", {c.intermediate_size, c.hidden_size}},
        {"lm_head", {c.hidden_size, c.vocab_size}}};
    for (const auto & [key, t] : a) {
        const std::string module = key.substr(0, key.find(".lora_"));
        const auto [in, out] = in_out.at(module.substr(module.rfind('.') + 1));
        const auto v = engine::host_tensor_values(t);
        double m = 0;
        for (double x : v)
            m = std::max(m, std::abs(x));
        if (key.find("lora_A") != std::string::npos) {
            EXPECT_EQ(t.shape, (std::vector<int64_t>{4, in})) << key;
            const double bound = 1.0 / std::sqrt(static_cast<double>(in));
            EXPECT_LE(m, bound) << key;
            EXPECT_GT(m, 0.5 * bound) << key;  // uniform over the whole range, not a narrower one
        } else {
            EXPECT_EQ(t.shape, (std::vector<int64_t>{out, 4})) << key;
            EXPECT_EQ(m, 0.0) << key;
        }
    }
}

TEST_F(EngineTest, UnembedOnlyAdapterHasOnlyLmHeadKeys) {
    engine::LoraSpec spec{/*rank=*/3, /*alpha=*/32.0, /*attn=*/false, /*mlp=*/false, /*unembed=*/true, {}};
    const AdapterId id = engine_->create_adapter(spec).value();
    const State w = engine_->export_adapter(id, false).value();
    ASSERT_EQ(w.size(), 2u);
    EXPECT_EQ(w.begin()->first, "base_model.model.lm_head.lora_A.weight");
    EXPECT_EQ(w.rbegin()->first, "base_model.model.lm_head.lora_B.weight");
    run(ce_input(id, 4), true);
    EXPECT_EQ(engine_->export_gradients(id).value().size(), 2u);
    const auto g = grads(id);
    EXPECT_GT(*std::max_element(g.begin(), g.end()), 0.0);
    spec.train_unembed = false;
    EXPECT_FALSE(engine_->create_adapter(spec).ok());  // no target at all
}

}  // namespace
}  // namespace tinkerd::testing
