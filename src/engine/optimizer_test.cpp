// The flat adapter buffers and the fused AdamW: every per-parameter tensor is a view into its flat
// buffer, and adamw_step (with and without clipping, weight decay) matches the per-tensor torch ops
// of torch.optim.AdamW's single-tensor path over several steps, in fp32 and fp64; a step proven finite by the
// last step's maxima skips the checking pass and computes the same.
#include "engine/optimizer.h"

#include <cmath>
#include <limits>

#include <gtest/gtest.h>
#include <torch/torch.h>

#include "engine/grad_accumulate.h"
#include "engine/lora.h"

namespace tinkerd::engine {
namespace {

model::ModelConfig tiny_config() {
    model::ModelConfig c;
    c.vocab_size = 37;
    c.hidden_size = 12;
    c.intermediate_size = 20;
    c.n_layers = 2;
    c.n_heads = 3;
    c.n_kv_heads = 1;
    c.head_dim = 4;
    return c;
}

Adapter tiny_adapter(torch::ScalarType dtype) {
    LoraSpec spec;
    spec.rank = 3;
    spec.alpha = 6.0;
    return make_adapter(1, spec, tiny_config(), dtype, torch::kCPU, 11);
}

TEST(FlatAdapter, EveryTensorIsAViewIntoItsFlatBuffer) {
    Adapter a = tiny_adapter(torch::kFloat32);
    int64_t offset = 0;
    for (size_t i = 0; i < a.params.size(); ++i) {
        const std::pair<const torch::Tensor *, const torch::Tensor *> pairs[] = {
            {&a.params[i], &a.flat_params},
            {&a.grads[i], &a.flat_grads},
            {&a.exp_avg[i], &a.flat_exp_avg},
            {&a.exp_avg_sq[i], &a.flat_exp_avg_sq}};
        for (auto [view, flat] : pairs) {
            EXPECT_EQ(view->data_ptr<float>(), flat->data_ptr<float>() + offset) << a.names[i];
        }
        EXPECT_TRUE(a.params[i].requires_grad() && a.params[i].is_leaf());
        offset += a.params[i].numel();
    }
    EXPECT_EQ(offset, a.flat_params.numel());
    EXPECT_FALSE(a.flat_params.requires_grad());
    EXPECT_GT(a.params[0].abs().sum().item<double>(), 0.0);  // A drawn, B zero
    EXPECT_EQ(a.params[1].abs().sum().item<double>(), 0.0);
}

// torch.optim.AdamW (single tensor) after clip_grad_norm_, per tensor, as adamw_step was written before.
void reference_step(std::vector<torch::Tensor> & params, std::vector<torch::Tensor> & grads,
                    std::vector<torch::Tensor> & m, std::vector<torch::Tensor> & v, int64_t step,
                    const AdamParams & p) {
    std::vector<torch::Tensor> norms;
    for (auto & g : grads) {
        norms.push_back(g.norm());
    }
    torch::Tensor total = torch::stack(norms).norm();
    if (p.grad_clip_norm > 0) {
        torch::Tensor coef = torch::clamp_max(p.grad_clip_norm / (total + 1e-6), 1.0);
        for (auto & g : grads) {
            g.mul_(coef);
        }
    }
    const double bc1 = 1 - std::pow(p.beta1, step), bc2_sqrt = std::sqrt(1 - std::pow(p.beta2, step));
    for (size_t i = 0; i < params.size(); ++i) {
        params[i].mul_(1 - p.learning_rate * p.weight_decay);
        m[i].mul_(p.beta1).add_(grads[i], 1 - p.beta1);
        v[i].mul_(p.beta2).addcmul_(grads[i], grads[i], 1 - p.beta2);
        params[i].addcdiv_(m[i], (v[i].sqrt() / bc2_sqrt).add_(p.eps), -p.learning_rate / bc1);
    }
}

// Σ|g| of a's gradient as every reader sees it: a CPU step leaves it consumed (read as zero, not rewritten).
double settled_gradient_sum(Adapter & a) {
    EXPECT_TRUE(gradient_is_consumed(a) || !a.flat_grads.is_cpu());
    settle_gradient(a);
    return a.flat_grads.abs().sum().item<double>();
}

std::vector<torch::Tensor> clones(const std::vector<torch::Tensor> & ts) {
    std::vector<torch::Tensor> out;
    for (const auto & t : ts) {
        out.push_back(t.detach().clone());
    }
    return out;
}

void expect_matches_reference(torch::ScalarType dtype, const AdamParams & p, double tol) {
    torch::NoGradGuard no_grad;
    torch::manual_seed(3);
    Adapter a = tiny_adapter(dtype);
    auto params = clones(a.params), m = clones(a.exp_avg), v = clones(a.exp_avg_sq);
    for (int64_t step = 1; step <= 4; ++step) {
        for (auto & g : a.grads) {
            g.copy_(torch::randn(g.sizes(), g.options()) * 3);
        }
        auto grads = clones(a.grads);
        reference_step(params, grads, m, v, step, p);
        torch::Tensor scratch;
        ASSERT_TRUE(adamw_step(a, p, scratch).ok());
        EXPECT_EQ(settled_gradient_sum(a), 0.0);
    }
    for (size_t i = 0; i < params.size(); ++i) {
        EXPECT_LT((a.params[i] - params[i]).abs().max().item<double>(), tol) << a.names[i];
        EXPECT_LT((a.exp_avg_sq[i] - v[i]).abs().max().item<double>(), tol) << a.names[i];
    }
    EXPECT_EQ(a.step, 4);
}

TEST(FusedAdamW, MatchesPerTensorOpsFp32) {
    expect_matches_reference(torch::kFloat32, {1e-2, 0.9, 0.95, 1e-8, 0.1, 1.0}, 1e-6);
    expect_matches_reference(torch::kFloat32, {1e-3, 0.8, 0.99, 1e-12, 0.0, 0.0}, 1e-6);
}

TEST(FusedAdamW, MatchesPerTensorOpsFp64) {
    expect_matches_reference(torch::kFloat64, {1e-2, 0.9, 0.95, 1e-8, 0.1, 1.0}, 1e-13);
    expect_matches_reference(torch::kFloat64, {1e-3, 0.8, 0.99, 1e-12, 0.0, 0.0}, 1e-13);
}

// A step that would leave a non-finite weight or moment is refused and changes nothing: weights, moments,
// step and gradient are bit-identical afterwards, and a sane step on the same gradient then works.
void expect_refused_and_unchanged(torch::ScalarType dtype, const AdamParams & p, float grad_value) {
    torch::NoGradGuard no_grad;
    torch::manual_seed(5);
    Adapter a = tiny_adapter(dtype);
    torch::Tensor scratch;
    a.flat_grads.copy_(torch::randn(a.flat_grads.sizes(), a.flat_grads.options()));
    ASSERT_TRUE(adamw_step(a, {}, scratch).ok());  // nonzero moments
    a.flat_grads.copy_(torch::randn(a.flat_grads.sizes(), a.flat_grads.options()));
    a.flat_grads[7] = grad_value;
    const auto before = clones({a.flat_params, a.flat_grads, a.flat_exp_avg, a.flat_exp_avg_sq});
    auto refused = adamw_step(a, p, scratch);
    ASSERT_FALSE(refused.ok());
    EXPECT_NE(refused.error().message.find("unchanged"), std::string::npos) << refused.error().message;
    const auto after = clones({a.flat_params, a.flat_grads, a.flat_exp_avg, a.flat_exp_avg_sq});
    for (size_t i = 0; i < before.size(); ++i) {
        // byte-wise, so that a NaN gradient kept as it was counts as unchanged
        EXPECT_TRUE(torch::equal(before[i].view(torch::kByte), after[i].view(torch::kByte))) << "buffer " << i;
    }
    EXPECT_EQ(a.step, 1);
    EXPECT_FALSE(scratch.defined());  // on the CPU a checking pass replaces the [3N] copy of the old values
    if (std::isfinite(grad_value) && std::abs(grad_value) < 1e10f) {
        ASSERT_TRUE(adamw_step(a, {}, scratch).ok());  // the kept gradient, default hyper-parameters
        EXPECT_EQ(a.step, 2);
        EXPECT_EQ(settled_gradient_sum(a), 0.0);
    }
}

TEST(FusedAdamW, RefusesANonFiniteStepAndChangesNothing) {
    for (auto dtype : {torch::kFloat32, torch::kFloat64}) {
        expect_refused_and_unchanged(dtype, {}, std::numeric_limits<float>::quiet_NaN());
        expect_refused_and_unchanged(dtype, {}, std::numeric_limits<float>::infinity());
        AdamParams decay_overflow;  // decay factor 1 - lr·wd = -inf: weights overflow
        decay_overflow.learning_rate = 10.0;
        decay_overflow.weight_decay = 1e308;
        expect_refused_and_unchanged(dtype, decay_overflow, 1.0f);
    }
    expect_refused_and_unchanged(torch::kFloat32, {}, 3e19f);  // g² overflows fp32: exp_avg_sq would be inf
}

// After an accepted step the next one skips the checking pass when the last step's maxima prove it finite, and
// computes bit for bit what the checked step computes.
TEST(FusedAdamW, ABoundedStepSkipsTheCheckAndMatchesTheCheckedStep) {
    for (auto dtype : {torch::kFloat32, torch::kFloat64}) {
        torch::NoGradGuard no_grad;
        torch::manual_seed(9);
        Adapter a = tiny_adapter(dtype), b = tiny_adapter(dtype);
        for (int64_t step = 1; step <= 3; ++step) {
            const torch::Tensor g = torch::randn(a.flat_grads.sizes(), a.flat_grads.options());
            a.flat_grads.copy_(g);
            b.flat_grads.copy_(g);
            b.step_bounds.known = false;  // b always takes the checking pass
            torch::Tensor scratch_a, scratch_b;
            ASSERT_TRUE(adamw_step(a, {}, scratch_a).ok());
            ASSERT_TRUE(adamw_step(b, {}, scratch_b).ok());
            EXPECT_EQ(a.checked_steps, 1) << "step " << step;  // only the first step has no bounds
            EXPECT_EQ(b.checked_steps, step);
            EXPECT_FALSE(scratch_a.defined() || scratch_b.defined());  // no copy of the old values on the CPU
            for (auto [x, y] : {std::pair{&a.flat_params, &b.flat_params},
                                {&a.flat_exp_avg, &b.flat_exp_avg},
                                {&a.flat_exp_avg_sq, &b.flat_exp_avg_sq}}) {
                EXPECT_TRUE(torch::equal(*x, *y)) << "step " << step;
            }
        }
    }
}

// A write to a parameter through its view (a loaded checkpoint, another optimizer) moves the flat buffer's
// version counter, so the next step does not trust the old maxima: a step that overflows only because of the
// written value is still checked and refused, nothing changed.
TEST(FusedAdamW, AWriteThroughAViewInvalidatesTheBounds) {
    torch::NoGradGuard no_grad;
    torch::manual_seed(13);
    Adapter a = tiny_adapter(torch::kFloat32);
    torch::Tensor scratch;
    a.flat_grads.copy_(torch::randn(a.flat_grads.sizes(), a.flat_grads.options()));
    ASSERT_TRUE(adamw_step(a, {}, scratch).ok());
    ASSERT_TRUE(a.step_bounds.known);
    a.params[0].copy_(torch::full(a.params[0].sizes(), 3e38, a.params[0].options()));
    a.flat_grads.copy_(torch::randn(a.flat_grads.sizes(), a.flat_grads.options()));
    const auto before = clones({a.flat_params, a.flat_exp_avg, a.flat_exp_avg_sq});
    AdamParams growing;  // decay factor 1 - lr·wd = 1.5: 3e38 overflows
    growing.learning_rate = 0.5;
    growing.weight_decay = -1.0;
    ASSERT_FALSE(adamw_step(a, growing, scratch).ok());
    const auto after = clones({a.flat_params, a.flat_exp_avg, a.flat_exp_avg_sq});
    for (size_t i = 0; i < before.size(); ++i) {
        EXPECT_TRUE(torch::equal(before[i], after[i])) << "buffer " << i;
    }
}

TEST(AdamParamsBounds, NameTheField) {
    const std::pair<AdamParams, const char *> bad[] = {
        {{0.1, 0.9, 0.95, 0.0, 0, 0}, "eps"},
        {{0.1, 0.9, 0.95, 1e-40, 0, 0}, "eps"},
        {{1e308, 0.9, 0.95, 1e-8, 0, 0}, "learning_rate"},
        {{-1e-3, 0.9, 0.95, 1e-8, 0, 0}, "learning_rate"},
        {{std::nan(""), 0.9, 0.95, 1e-8, 0, 0}, "learning_rate"},
        {{1e-3, 1.0, 0.95, 1e-8, 0, 0}, "beta1"},
        {{1e-3, 0.9, 0.95, 1e-8, INFINITY, 0}, "weight_decay"},
        {{1e-3, 0.9, 0.95, 1e-8, 0, -1}, "grad_clip_norm"},
    };
    for (const auto & [params, field] : bad) {
        auto r = validate_adam_params(params);
        ASSERT_FALSE(r.ok()) << field;
        EXPECT_NE(r.error().message.find(field), std::string::npos) << r.error().message;
    }
    EXPECT_TRUE(validate_adam_params({10.0, 0.0, 0.999, 1e-30, 0.1, 1.0}).ok());
}

}  // namespace
}  // namespace tinkerd::engine
