// The flat adapter buffers and the fused AdamW: every per-parameter tensor is a view into its flat
// buffer, and adamw_step (with and without clipping, weight decay) matches the per-tensor torch ops
// of torch.optim.AdamW's single-tensor path over several steps, in fp32 and fp64.
#include "engine/optimizer.h"

#include <gtest/gtest.h>
#include <torch/torch.h>

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
        adamw_step(a, p);
        EXPECT_EQ(a.flat_grads.abs().sum().item<double>(), 0.0);
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

}  // namespace
}  // namespace tinkerd::engine
