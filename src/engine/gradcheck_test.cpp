// Finite-difference checks in float64 of the LoRA gradients the engine computes for every loss
// (cross_entropy 1-D / 2-D, importance_sampling, ppo with clipped and unclipped tokens, cispo with its
// stop-gradient weight, dro, gspo's shared sequence ratio and stable_reinforce's truncated weight and KL
// term, each against the cross_entropy whose weights are its per-token gradient), on tiny random llama and qwen3 models
// with random nonzero A and B, and of every expert LoRA tensor (shared-outer factors) of a tiny Qwen3-MoE, and of the
// Qwen3.5 hybrid's Gated DeltaNet LoRAs (in_proj_q/k/v on the fused in_proj_qkv, in_proj_z, out_proj) and its gated
// q_proj, and of Qwen3.5-MoE's shared expert LoRAs (beside its routed experts', through its sigmoid gate). Central
// differences (eps 1e-6) of "loss:sum" must agree with export_gradients to 1e-6 relative.
#include <algorithm>
#include <cmath>
#include <cstring>
#include <random>

#include <gtest/gtest.h>

#include "engine/engine.h"
#include "test_models.h"

namespace tinkerd::testing {
namespace {

using engine::AdapterId;
using engine::Datum;
using engine::Engine;
using engine::ForwardBackwardInput;
using engine::HostTensor;
using Weights = std::map<std::string, std::vector<double>>;

HostTensor f64_tensor(std::vector<int64_t> shape, const std::vector<double> & values) {
    HostTensor t{model::DType::F64, std::move(shape), std::vector<uint8_t>(values.size() * sizeof(double))};
    std::memcpy(t.bytes.data(), values.data(), t.bytes.size());
    return t;
}

std::string layer_key(int layer, const std::string & module, const char * ab) {
    const bool mlp = module == "gate_proj" || module == "up_proj" || module == "down_proj";
    return "base_model.model.model.layers." + std::to_string(layer) + (mlp ? ".mlp." : ".self_attn.") + module +
           ".lora_" + ab + ".weight";
}
std::string head_key(const char * ab) {
    return std::string("base_model.model.lm_head.lora_") + ab + ".weight";
}

// An FP64 engine over a tiny model with one rank-2 adapter holding random nonzero A and B.
class GradCheck {
  public:
    explicit GradCheck(TinyFamily family) : rng_(1234) {
        write_tiny_model(dir_.path(), family, model::DType::F32, 99);
        auto loaded = Engine::load(dir_.path(), {engine::ComputeDType::FP64, 1});
        if (!loaded.ok())
            throw std::runtime_error(loaded.error().message);
        engine_ = std::move(loaded).value();
        if (engine_->compute_dtype_name() != "fp64")
            throw std::runtime_error("engine is not fp64");
        engine::LoraSpec spec;
        spec.rank = 2;
        spec.alpha = 4.0;
        spec.seed = 5;
        id_ = engine_->create_adapter(spec).value();
        std::normal_distribution<double> normal(0.0, 1.0);
        const auto exported = engine_->export_adapter(id_, false).value();
        for (const auto & [key, t] : exported) {
            const bool is_b = key.find("lora_B") != std::string::npos;
            std::vector<double> v(engine::host_tensor_values(t).size());
            for (double & x : v)
                x = (is_b ? 0.1 : 0.3) * normal(rng_);
            weights_[key] = std::move(v);
            shapes_[key] = t.shape;
        }
        import(weights_);
    }

    Engine & engine() { return *engine_; }
    AdapterId id() const { return id_; }
    int64_t vocab() const { return engine_->config().vocab_size; }
    std::mt19937 & rng() { return rng_; }

    void import(const Weights & w) {
        std::map<std::string, HostTensor> tensors;
        for (const auto & [key, v] : w)
            tensors[key] = f64_tensor(shapes_.at(key), v);
        auto status = engine_->import_adapter(id_, tensors, false);
        if (!status.ok())
            throw std::runtime_error(status.error().message);
    }

    double loss(const ForwardBackwardInput & input, const Weights & w) {
        import(w);
        auto r = engine_->forward_backward({input}, false);
        if (!r[0].ok())
            throw std::runtime_error(r[0].error().message);
        return r[0]->metrics.at("loss:sum");
    }

    Weights gradients(const ForwardBackwardInput & input) {
        import(weights_);  // also zeroes the accumulated gradients
        auto r = engine_->forward_backward({input}, true);
        if (!r[0].ok())
            throw std::runtime_error(r[0].error().message);
        Weights g;
        const auto grads = engine_->export_gradients(id_).value();
        for (const auto & [key, t] : grads)
            g[key] = engine::host_tensor_values(t);
        return g;
    }

    // Exact float64 target logprobs of one datum: one cross_entropy input per token with one-hot weights.
    std::vector<double> logprobs(const std::vector<int64_t> & tokens, const std::vector<int64_t> & targets) {
        import(weights_);
        const int64_t n = static_cast<int64_t>(tokens.size());
        std::vector<ForwardBackwardInput> inputs;
        for (int64_t i = 0; i < n; ++i) {
            std::vector<double> onehot(n, 0.0);
            onehot[i] = 1.0;
            Datum d{
                tokens,
                {{"target_tokens", engine::make_host_tensor_i64({n}, targets)}, {"weights", f64_tensor({n}, onehot)}}};
            inputs.push_back({id_, {d}, "cross_entropy", {}});
        }
        std::vector<double> lp;
        for (auto & r : engine_->forward_backward(inputs, false))
            lp.push_back(-r.value().metrics.at("loss:sum"));
        return lp;
    }

    std::vector<int64_t> random_tokens(int64_t n) {
        std::uniform_int_distribution<int64_t> pick(0, vocab() - 1);
        std::vector<int64_t> t(n);
        for (auto & x : t)
            x = pick(rng_);
        return t;
    }

    // Compares the gradient of train_input with central differences of fd_input's loss at 8 entries
    // (4 in A, 4 in B; two layers and lm_head; the same entries for the same gradient). max_rel 0 skips
    // the comparison. Returns the finite differences it computed.
    std::vector<double> check(const ForwardBackwardInput & train_input, const ForwardBackwardInput & fd_input,
                              double max_rel = 1e-6) {
        const std::vector<std::string> keys = {
            layer_key(0, "q_proj", "A"),    layer_key(1, "gate_proj", "A"), head_key("A"), layer_key(1, "v_proj", "A"),
            layer_key(0, "down_proj", "B"), layer_key(1, "o_proj", "B"),    head_key("B"), layer_key(0, "k_proj", "B")};
        return check_keys(train_input, fd_input, keys, max_rel);
    }

    // check() at one large-gradient entry of each of the given tensors.
    std::vector<double> check_keys(const ForwardBackwardInput & train_input, const ForwardBackwardInput & fd_input,
                                   const std::vector<std::string> & keys, double max_rel = 1e-6) {
        const Weights g = gradients(train_input);
        std::mt19937 pick(42);
        std::vector<double> fds;
        for (const std::string & key : keys) {
            const std::vector<double> & gk = g.at(key);
            double gmax = 0;
            for (double x : gk)
                gmax = std::max(gmax, std::abs(x));
            if (max_rel > 0) {
                EXPECT_GT(gmax, 1e-8) << key << ": gradient is zero";
            }
            std::vector<size_t> large;  // entries with a gradient big enough for a relative check
            for (size_t i = 0; i < gk.size(); ++i) {
                if (std::abs(gk[i]) >= 0.25 * gmax)
                    large.push_back(i);
            }
            const size_t i = large[std::uniform_int_distribution<size_t>(0, large.size() - 1)(pick)];
            const double eps = 1e-6;
            Weights plus = weights_, minus = weights_;
            plus[key][i] += eps;
            minus[key][i] -= eps;
            const double fd = (loss(fd_input, plus) - loss(fd_input, minus)) / (2 * eps);
            fds.push_back(fd);
            if (max_rel > 0) {
                EXPECT_LT(std::abs(fd - gk[i]) / std::abs(gk[i]), max_rel)
                    << key << "[" << i << "]: engine " << gk[i] << ", finite difference " << fd;
            }
        }
        return fds;
    }

    const Weights & weights() const { return weights_; }

  private:
    ScopedTempDir dir_{"gradcheck"};
    std::unique_ptr<Engine> engine_;
    AdapterId id_ = 0;
    std::mt19937 rng_;
    Weights weights_;
    std::map<std::string, std::vector<int64_t>> shapes_;
};

std::vector<double> uniform(std::mt19937 & rng, size_t n, double lo, double hi) {
    std::uniform_real_distribution<double> u(lo, hi);
    std::vector<double> v(n);
    for (double & x : v)
        x = u(rng);
    return v;
}

// A cross_entropy input of two random datums (9 and 6 tokens) with weights in [-0.5, 1.5).
ForwardBackwardInput weighted_ce_input(GradCheck & gc) {
    ForwardBackwardInput in{gc.id(), {}, "cross_entropy", {}};
    for (int64_t n : {9, 6}) {
        in.datums.push_back({gc.random_tokens(n),
                             {{"target_tokens", engine::make_host_tensor_i64({n}, gc.random_tokens(n))},
                              {"weights", f64_tensor({n}, uniform(gc.rng(), n, -0.5, 1.5))}}});
    }
    return in;
}

// An RL input (logprobs + advantages) whose per-token ratio exp(lp - q) equals ratios[i % size].
ForwardBackwardInput rl_input(GradCheck & gc, const std::string & loss, const std::vector<double> & ratios,
                              const std::vector<double> & advantages, std::map<std::string, double> config = {}) {
    ForwardBackwardInput in{gc.id(), {}, loss, std::move(config)};
    size_t k = 0;
    for (int64_t n : {7, 5}) {
        Datum d{gc.random_tokens(n), {}};
        const auto targets = gc.random_tokens(n);
        const auto lp = gc.logprobs(d.tokens, targets);
        std::vector<double> q(n), adv(n);
        for (int64_t i = 0; i < n; ++i, ++k) {
            q[i] = lp[i] - std::log(ratios[k % ratios.size()]);
            adv[i] = advantages[k % advantages.size()];
        }
        d.loss_inputs = {{"target_tokens", engine::make_host_tensor_i64({n}, targets)},
                         {"logprobs", f64_tensor({n}, q)},
                         {"advantages", f64_tensor({n}, adv)}};
        in.datums.push_back(std::move(d));
    }
    return in;
}

TEST(GradCheck, CrossEntropyWithFractionalAndNegativeWeights) {
    for (TinyFamily family : {TinyFamily::LLAMA, TinyFamily::QWEN3}) {
        GradCheck gc(family);
        ForwardBackwardInput in{gc.id(), {}, "cross_entropy", {}};
        for (int64_t n : {8, 5}) {
            in.datums.push_back({gc.random_tokens(n),
                                 {{"target_tokens", engine::make_host_tensor_i64({n}, gc.random_tokens(n))},
                                  {"weights", f64_tensor({n}, uniform(gc.rng(), n, -1.0, 1.5))}}});
        }
        gc.check(in, in);
    }
}

TEST(GradCheck, CrossEntropyWithTwoDimensionalTargets) {
    GradCheck gc(TinyFamily::LLAMA);
    ForwardBackwardInput in{gc.id(), {}, "cross_entropy", {}};
    for (int64_t n : {6, 4}) {
        in.datums.push_back({gc.random_tokens(n),
                             {{"target_tokens", engine::make_host_tensor_i64({n, 3}, gc.random_tokens(3 * n))},
                              {"weights", f64_tensor({n, 3}, uniform(gc.rng(), 3 * n, -0.5, 1.0))}}});
    }
    gc.check(in, in);
}

TEST(GradCheck, ImportanceSampling) {
    GradCheck gc(TinyFamily::LLAMA);
    auto in = rl_input(gc, "importance_sampling", uniform(gc.rng(), 12, 0.6, 1.6), uniform(gc.rng(), 12, -1.5, 1.5));
    gc.check(in, in);
}

TEST(GradCheck, PpoWithRatiosInsideAndOutsideTheClipRange) {
    GradCheck gc(TinyFamily::LLAMA);
    // (ratio, advantage): inside; clipped (zero gradient) above and below; outside but unclipped branch.
    const std::vector<double> ratios = {1.05, 1.6, 0.5, 1.7, 0.6, 0.9};
    const std::vector<double> adv = {1.3, 0.7, -0.9, -0.6, 0.8, -1.1};
    const auto ppo = rl_input(gc, "ppo", ratios, adv);
    gc.check(ppo, ppo);
    // The same gradient as importance_sampling with the clipped tokens' advantages set to zero.
    auto is = ppo;
    is.loss_fn = "importance_sampling";
    size_t k = 0;
    for (auto & d : is.datums) {
        auto a = engine::host_tensor_values(d.loss_inputs.at("advantages"));
        for (double & x : a) {
            if (k % ratios.size() == 1 || k % ratios.size() == 2)
                x = 0.0;
            ++k;
        }
        d.loss_inputs["advantages"] = f64_tensor(d.loss_inputs.at("advantages").shape, a);
    }
    const Weights g_ppo = gc.gradients(ppo), g_is = gc.gradients(is);
    for (const auto & [key, g] : g_ppo) {
        for (size_t i = 0; i < g.size(); ++i) {
            ASSERT_NEAR(g[i], g_is.at(key)[i], 1e-12 * std::max(1.0, std::abs(g[i]))) << key << "[" << i << "]";
        }
    }
}

TEST(GradCheck, PpoWithEveryTokenClippedHasZeroGradient) {
    GradCheck gc(TinyFamily::LLAMA);
    const auto in = rl_input(gc, "ppo", {1.5, 0.6, 2.0}, {0.8, -1.2, 0.4});
    const double loss = gc.loss(in, gc.weights());
    EXPECT_GT(std::abs(loss), 0.1);
    for (const auto & [key, g] : gc.gradients(in)) {
        for (double x : g)
            ASSERT_EQ(x, 0.0) << key;
    }
    for (double fd : gc.check(in, in, /*max_rel=*/0))
        EXPECT_LT(std::abs(fd), 1e-8);
}

TEST(GradCheck, CispoTreatsTheClippedRatioAsAConstant) {
    GradCheck gc(TinyFamily::LLAMA);
    // ratios below, inside and above [0.7, 3.0]; c = clip(ratio) is then known exactly.
    const std::vector<double> ratios = {0.3, 1.5, 5.0, 0.9};
    const std::vector<double> adv = {1.1, -0.7, 0.6, 1.4, -1.3};
    const auto cispo = rl_input(gc, "cispo", ratios, adv, {{"clip_low_threshold", 0.7}, {"clip_high_threshold", 3.0}});
    // The cispo gradient is the gradient of cross_entropy with weights c·A.
    auto ce = cispo;
    ce.loss_fn = "cross_entropy";
    ce.loss_fn_config.clear();
    for (auto & d : ce.datums) {
        const auto q = engine::host_tensor_values(d.loss_inputs.at("logprobs"));
        const auto a = engine::host_tensor_values(d.loss_inputs.at("advantages"));
        const auto targets = engine::host_tensor_values(d.loss_inputs.at("target_tokens"));
        const auto lp = gc.logprobs(d.tokens, std::vector<int64_t>(targets.begin(), targets.end()));
        std::vector<double> w(q.size());
        for (size_t i = 0; i < q.size(); ++i)
            w[i] = std::clamp(std::exp(lp[i] - q[i]), 0.7, 3.0) * a[i];
        const auto shape = d.loss_inputs.at("advantages").shape;
        d.loss_inputs = {{"target_tokens", d.loss_inputs.at("target_tokens")}, {"weights", f64_tensor(shape, w)}};
    }
    const std::vector<double> fd_ce = gc.check(cispo, ce);
    // Differentiating through the ratio would give a different gradient: the stop-gradient matters.
    const std::vector<double> fd_true = gc.check(cispo, cispo, /*max_rel=*/0);
    double max_rel = 0;
    for (size_t i = 0; i < fd_true.size(); ++i) {
        max_rel = std::max(max_rel, std::abs(fd_true[i] - fd_ce[i]) / std::abs(fd_ce[i]));
    }
    EXPECT_GT(max_rel, 1e-3) << "the cispo gradient seems to flow through clip(ratio)";
}

TEST(GradCheck, DroWithBeta) {
    for (TinyFamily family : {TinyFamily::LLAMA, TinyFamily::QWEN3}) {
        GradCheck gc(family);
        auto in =
            rl_input(gc, "dro", uniform(gc.rng(), 12, 0.5, 2.0), uniform(gc.rng(), 12, -1.0, 1.0), {{"beta", 0.3}});
        gc.check(in, in);
    }
}

// The cross_entropy input whose weights are `weight(datum, lp)`: the gradient a loss with stop-gradient
// factors must equal.
template <typename WeightFn>
ForwardBackwardInput weighted_ce(GradCheck & gc, const ForwardBackwardInput & in, WeightFn weight) {
    ForwardBackwardInput ce = in;
    ce.loss_fn = "cross_entropy";
    ce.loss_fn_config.clear();
    for (auto & d : ce.datums) {
        const auto targets = engine::host_tensor_values(d.loss_inputs.at("target_tokens"));
        const auto lp = gc.logprobs(d.tokens, std::vector<int64_t>(targets.begin(), targets.end()));
        const std::vector<double> w = weight(d, lp);
        const auto shape = d.loss_inputs.at("target_tokens").shape;
        d.loss_inputs = {{"target_tokens", d.loss_inputs.at("target_tokens")}, {"weights", f64_tensor(shape, w)}};
    }
    return ce;
}

TEST(GradCheck, GspoCarriesTheSequenceRatioAndClipsPerAdvantageSign) {
    GradCheck gc(TinyFamily::LLAMA);
    // Datum ratios around 1.3 (above 1.2: positive advantages clipped) and 0.9 (inside).
    auto in = rl_input(gc, "gspo", {1.3, 1.4, 1.25, 1.35, 1.3, 1.3, 1.3, 0.9, 0.85, 0.95, 0.9, 0.9},
                       {1.0, -0.5, 0.7, -1.2, 0.0, 0.4, -0.3, 0.8, -0.6, 0.5, 1.1, -0.9});
    for (auto & d : in.datums) {
        const int64_t n = static_cast<int64_t>(d.tokens.size());
        std::vector<double> mask(n, 1.0);
        mask[0] = 0.0;  // a prompt-like position outside the ratio
        d.loss_inputs["sequence_ratio_mask"] = f64_tensor({n}, mask);
    }
    const auto ce = weighted_ce(gc, in, [](const Datum & d, const std::vector<double> & lp) {
        const auto q = engine::host_tensor_values(d.loss_inputs.at("logprobs"));
        const auto a = engine::host_tensor_values(d.loss_inputs.at("advantages"));
        const auto m = engine::host_tensor_values(d.loss_inputs.at("sequence_ratio_mask"));
        double sum = 0, count = 0;
        for (size_t i = 0; i < lp.size(); ++i) {
            sum += m[i] != 0 ? lp[i] - q[i] : 0.0;
            count += m[i] != 0 ? 1.0 : 0.0;
        }
        const double s = std::exp(sum / count);
        std::vector<double> w(lp.size());
        for (size_t i = 0; i < lp.size(); ++i) {
            const bool clipped = (a[i] > 0 && s > 1.2) || (a[i] < 0 && s < 0.8);
            w[i] = clipped ? 0.0 : s * a[i];
        }
        return w;
    });
    gc.check(in, ce);
}

TEST(GradCheck, StableReinforceTruncatesTheWeightAndAddsTheKlTerm) {
    GradCheck gc(TinyFamily::LLAMA);
    const double kl = 0.3, cap = 1.5;
    auto in = rl_input(gc, "stable_reinforce", {0.5, 1.2, 3.0, 0.9, 2.5, 1.0}, {1.0, -0.7, 0.6, 0.0, -1.2, 0.9},
                       {{"kl_coeff", kl}, {"clip_high_threshold", cap}});
    for (auto & d : in.datums) {  // the server's record: the sampler logprobs, NaN on the first (prompt) target
        auto q = engine::host_tensor_values(d.loss_inputs.at("logprobs"));
        auto a = engine::host_tensor_values(d.loss_inputs.at("advantages"));
        q[0] = std::nan("");
        a[0] = 0.0;
        const int64_t n = static_cast<int64_t>(q.size());
        d.loss_inputs[engine::SAMPLER_RECORD_KEY] = f64_tensor({n}, q);
        d.loss_inputs["advantages"] = f64_tensor({n}, a);
        d.loss_inputs.erase("logprobs");
    }
    const auto ce = weighted_ce(gc, in, [&](const Datum & d, const std::vector<double> & lp) {
        const auto q = engine::host_tensor_values(d.loss_inputs.at(engine::SAMPLER_RECORD_KEY));
        const auto a = engine::host_tensor_values(d.loss_inputs.at("advantages"));
        std::vector<double> w(lp.size(), 0.0);
        for (size_t i = 0; i < lp.size(); ++i) {
            if (!std::isnan(q[i])) {
                const double ratio = std::exp(lp[i] - q[i]);
                w[i] = std::min(ratio, cap) * a[i] - kl * (ratio - 1.0);
            }
        }
        return w;
    });
    gc.check(in, ce);
    // A nonzero advantage on a target without a record is a user error.
    auto bad = in;
    auto a = engine::host_tensor_values(bad.datums[0].loss_inputs.at("advantages"));
    a[0] = 1.0;
    bad.datums[0].loss_inputs["advantages"] = f64_tensor({static_cast<int64_t>(a.size())}, a);
    auto results = gc.engine().forward_backward({bad}, false);
    ASSERT_FALSE(results[0].ok());
    EXPECT_NE(results[0].error().message.find("not a sampled token"), std::string::npos) << results[0].error().message;
}

TEST(GradCheck, MoeExpertLoraTensorsAndTheRoutingWeights) {
    // Layer 0 is sparse: its six expert factors (A [1,R,C] and B [E,F,R] of gate/up, A [E,R,F] and B [1,C,R]
    // of down) and its attention (whose gradient also flows through the routing weights); layer 1 is dense.
    GradCheck gc(TinyFamily::QWEN3_MOE);
    std::vector<std::string> keys;
    for (const char * module : {"experts.w1", "experts.w3", "experts.w2"}) {
        for (const char * ab : {"A", "B"}) {
            keys.push_back(std::string("base_model.model.model.layers.0.mlp.") + module + ".lora_" + ab + ".weight");
        }
    }
    keys.insert(keys.end(), {layer_key(0, "q_proj", "A"), layer_key(0, "v_proj", "B"), layer_key(1, "down_proj", "A"),
                             head_key("B")});
    const ForwardBackwardInput in = weighted_ce_input(gc);
    gc.check_keys(in, in, keys);
    const auto ppo = rl_input(gc, "ppo", {1.05, 1.6, 0.5, 0.9}, {1.3, 0.7, -0.9, -1.1});
    gc.check_keys(ppo, ppo, keys);
}

TEST(GradCheck, Qwen35LinearAttentionAndGatedQueryLoraTensors) {
    // Layer 0 is Gated DeltaNet: the three LoRAs on the row slices of in_proj_qkv, in_proj_z and out_proj,
    // A and B each; layer 1 is gated full attention: q_proj's LoRA covers query and gate.
    GradCheck gc(TinyFamily::QWEN3_5);
    std::vector<std::string> keys;
    for (const char * module : {"in_proj_q", "in_proj_k", "in_proj_v", "in_proj_z", "out_proj"}) {
        for (const char * ab : {"A", "B"}) {
            keys.push_back(std::string("base_model.model.model.layers.0.linear_attn.") + module + ".lora_" + ab +
                           ".weight");
        }
    }
    keys.insert(keys.end(), {layer_key(1, "q_proj", "A"), layer_key(1, "q_proj", "B"), layer_key(1, "k_proj", "B"),
                             layer_key(0, "down_proj", "A"), head_key("B")});
    const ForwardBackwardInput in = weighted_ce_input(gc);
    gc.check_keys(in, in, keys);
}

TEST(GradCheck, Qwen35MoeSharedExpertAndExpertLoraTensors) {
    // Both layers sparse: the shared expert's three LoRAs (A and B each), the routed experts' shared-outer
    // factors, and LoRAs upstream of the MLP (in_proj_q, q_proj), whose gradients also flow through the shared
    // expert's sigmoid gate and the routing weights.
    GradCheck gc(TinyFamily::QWEN3_5_MOE);
    std::vector<std::string> keys;
    for (int layer : {0, 1}) {
        for (const char * module : {"shared_expert.gate_proj", "shared_expert.up_proj", "shared_expert.down_proj",
                                    "experts.w1", "experts.w2", "experts.w3"}) {
            for (const char * ab : {"A", "B"}) {
                keys.push_back("base_model.model.model.layers." + std::to_string(layer) + ".mlp." + module + ".lora_" +
                               ab + ".weight");
            }
        }
    }
    keys.insert(keys.end(), {"base_model.model.model.layers.0.linear_attn.in_proj_q.lora_A.weight",
                             layer_key(1, "q_proj", "A"), head_key("B")});
    const ForwardBackwardInput in = weighted_ce_input(gc);
    gc.check_keys(in, in, keys);
}

}  // namespace
}  // namespace tinkerd::testing
