// The Gated DeltaNet blocks (arch/delta_rule.h) against a naive per-token recurrence written here, in fp64:
// chunked outputs and final states, prompt + decode steps (conv and recurrent state) vs one full pass, a prompt's
// final state vs stepping it token by token,
// autograd gradients vs central finite differences (the rule, the conv, and the whole mixer in its inputs and
// weights), and packing independence.
#include "engine/arch/delta_rule.h"

#include <algorithm>
#include <cmath>
#include <cstdio>
#include <functional>

#include <gtest/gtest.h>

namespace tinkerd::testing {
namespace {

using engine::SequenceLayout;

const auto kF64 = torch::TensorOptions().dtype(torch::kFloat64);

SequenceLayout packed(const std::vector<int64_t> & lengths) {
    SequenceLayout layout;
    int64_t offset = 0;
    for (int64_t len : lengths) {
        layout.offsets.push_back(offset);
        layout.lengths.push_back(len);
        offset += len;
    }
    return layout;
}

double max_abs_diff(const torch::Tensor & a, const torch::Tensor & b) {
    return (a - b).abs().max().item<double>();
}

struct RuleInputs {
    torch::Tensor q, k, v, g, beta;  // [T, H, Dk] x2, [T, H, Dv], [T, H] x2
};

RuleInputs random_rule_inputs(int64_t T, int64_t H, int64_t Dk, int64_t Dv) {
    return {torch::randn({T, H, Dk}, kF64), torch::randn({T, H, Dk}, kF64), torch::randn({T, H, Dv}, kF64),
            -0.5 * torch::softplus(torch::randn({T, H}, kF64)), torch::sigmoid(torch::randn({T, H}, kF64))};
}

torch::Tensor unit(const torch::Tensor & x) {  // [H, D], eps under the root as the kernels
    return x / (x * x).sum(-1, true).add(1e-6).sqrt();
}

// One token at a time: S ← exp(g)·S; S ← S + k ⊗ beta·(v − kᵀS); o = Sᵀq / sqrt(Dk). states: [S, H, Dk, Dv].
torch::Tensor naive_rule(const RuleInputs & in, const SequenceLayout & layout, torch::Tensor * states = nullptr) {
    const int64_t H = in.q.size(1), Dk = in.q.size(2), Dv = in.v.size(2);
    torch::Tensor out = torch::zeros({in.q.size(0), H, Dv}, kF64);
    std::vector<torch::Tensor> finals;
    for (size_t s = 0; s < layout.lengths.size(); ++s) {
        torch::Tensor S = torch::zeros({H, Dk, Dv}, kF64);
        for (int64_t t = layout.offsets[s]; t < layout.offsets[s] + layout.lengths[s]; ++t) {
            const torch::Tensor q = unit(in.q[t]) / std::sqrt(double(Dk)), k = unit(in.k[t]);
            S = S * in.g[t].exp().view({H, 1, 1});
            const torch::Tensor recalled = torch::einsum("hk,hkv->hv", {k, S});
            const torch::Tensor delta = (in.v[t] - recalled) * in.beta[t].view({H, 1});
            S = S + torch::einsum("hk,hv->hkv", {k, delta});
            out[t] = torch::einsum("hk,hkv->hv", {q, S});
        }
        finals.push_back(S);
    }
    if (states != nullptr) {
        *states = torch::stack(finals);
    }
    return out;
}

TEST(DeltaRule, ChunkedMatchesNaiveRecurrence) {
    torch::manual_seed(1);
    const SequenceLayout layout = packed({1, 63, 64, 65, 130});
    const RuleInputs in = random_rule_inputs(layout.n_tokens(), 3, 8, 5);
    torch::Tensor naive_states, states;
    const torch::Tensor expected = naive_rule(in, layout, &naive_states);
    const torch::Tensor got = engine::gated_delta_rule(in.q, in.k, in.v, in.g, in.beta, layout, &states);
    const double out_err = max_abs_diff(got, expected), state_err = max_abs_diff(states, naive_states);
    std::printf("chunked vs naive: outputs %.3g, final states %.3g\n", out_err, state_err);
    EXPECT_LT(out_err, 1e-10);
    EXPECT_LT(state_err, 1e-10);
    // fp32 inputs are computed in fp32 and come back as fp32
    const torch::Tensor got32 =
        engine::gated_delta_rule(in.q.to(torch::kFloat32), in.k.to(torch::kFloat32), in.v.to(torch::kFloat32),
                                 in.g.to(torch::kFloat32), in.beta.to(torch::kFloat32), layout);
    EXPECT_EQ(got32.scalar_type(), torch::kFloat32);
    EXPECT_LT(max_abs_diff(got32.to(torch::kFloat64), expected), 1e-4);
}

// The fused fp32 decode step (kernels/delta_step.h, taken by fp32 states on the CPU) against the fp64 naive rule:
// 3 sequences stepped 40 tokens together, Dv not a multiple of a vector width, each state its own tensor (as
// each sequence's cache holds it) and updated in place; and the stacked-state form against the tensor-op form.
// fp32 bound: ~Dk roundings of unit-norm sums per step, damped by decay and beta <= 1 (measured ~1e-7): 1e-5.
TEST(DeltaRule, FusedFp32StepMatchesNaiveRule) {
    torch::manual_seed(7);
    const int64_t S = 3, L = 40, H = 4, Dk = 24, Dv = 37;
    const SequenceLayout layout = packed({L, L, L});
    const RuleInputs in = random_rule_inputs(S * L, H, Dk, Dv);
    torch::Tensor naive_states;
    const torch::Tensor expected = naive_rule(in, layout, &naive_states);  // [S·L, H, Dv]
    std::vector<torch::Tensor> states;
    for (int64_t s = 0; s < S; ++s) {
        states.push_back(torch::zeros({H, Dk, Dv}));
    }
    torch::Tensor stacked = torch::zeros({S, H, Dk, Dv}), stacked_ops = torch::zeros({S, H, Dk, Dv});
    double out_err = 0, ops_err = 0;
    for (int64_t t = 0; t < L; ++t) {
        const torch::Tensor index = torch::tensor({t, L + t, 2 * L + t});
        const auto f32 = [&](const torch::Tensor & x) { return x.index_select(0, index).to(torch::kFloat32); };
        const torch::Tensor out =
            engine::recurrent_gated_delta_step(f32(in.q), f32(in.k), f32(in.v), f32(in.g), f32(in.beta), states);
        ASSERT_EQ(out.scalar_type(), torch::kFloat32);
        out_err = std::max(out_err, max_abs_diff(out.to(torch::kFloat64), expected.index_select(0, index)));
        const torch::Tensor fused =
            engine::recurrent_gated_delta_step(f32(in.q), f32(in.k), f32(in.v), f32(in.g), f32(in.beta), stacked);
        const torch::Tensor ops = engine::recurrent_gated_delta_step_ops(f32(in.q), f32(in.k), f32(in.v), f32(in.g),
                                                                         f32(in.beta), stacked_ops);
        ops_err = std::max(ops_err, max_abs_diff(fused, ops));
    }
    double state_err = 0;
    for (int64_t s = 0; s < S; ++s) {
        state_err = std::max(state_err, max_abs_diff(states[s].to(torch::kFloat64), naive_states[s]));
    }
    std::printf("fused fp32 step vs naive: outputs %.3g, states %.3g; vs tensor ops %.3g\n", out_err, state_err,
                ops_err);
    EXPECT_LT(out_err, 1e-5);
    EXPECT_LT(state_err, 1e-5);
    EXPECT_LT(ops_err, 1e-5);
    EXPECT_LT(max_abs_diff(stacked, stacked_ops), 1e-5);
    EXPECT_TRUE(torch::equal(stacked, torch::stack(states)));  // both forms: the same kernel on the same values
}

// Rows of seq's own sequence in a packed [T, ...] tensor.
torch::Tensor rows_of(const torch::Tensor & x, const SequenceLayout & layout, size_t seq) {
    return x.narrow(0, layout.offsets[seq], layout.lengths[seq]);
}

TEST(DeltaRule, PackingDoesNotChangeASequence) {
    torch::manual_seed(2);
    const RuleInputs alone = random_rule_inputs(65, 2, 6, 4);
    const RuleInputs left = random_rule_inputs(1, 2, 6, 4), right = random_rule_inputs(130, 2, 6, 4);
    auto pack = [&](auto field) { return torch::cat({field(left), field(alone), field(right)}); };
    const RuleInputs both{
        pack([](const RuleInputs & r) { return r.q; }), pack([](const RuleInputs & r) { return r.k; }),
        pack([](const RuleInputs & r) { return r.v; }), pack([](const RuleInputs & r) { return r.g; }),
        pack([](const RuleInputs & r) { return r.beta; })};
    const SequenceLayout one = packed({65}), three = packed({1, 65, 130});
    torch::Tensor state_one, state_three;
    const torch::Tensor a = engine::gated_delta_rule(alone.q, alone.k, alone.v, alone.g, alone.beta, one, &state_one);
    const torch::Tensor b = engine::gated_delta_rule(both.q, both.k, both.v, both.g, both.beta, three, &state_three);
    // Not bitwise: packing changes the batch of every chunk product (S·H matrices), and the BLAS may split a
    // small batch's products across threads where it runs a large batch's one per thread, summing in another
    // order (MKL on an AMD EPYC does; on an Intel Xeon the results happened to be equal). The bound is fp64
    // rounding through the recurrence: each chunk's products reduce over K = 64 + Dk terms (sqrt(K)·u each,
    // Higham & Mary), the state carries every earlier chunk's error (N + 1 chunk steps), scaled by the largest
    // output or state entry M: u·M·sqrt(K)·(N + 1), u = 2^-53.
    const double a_scale = std::max(a.abs().max().item<double>(), state_one.abs().max().item<double>());
    const double chunks = std::ceil(65.0 / 64.0), bound = 0x1p-53 * a_scale * std::sqrt(64.0 + 6.0) * (chunks + 1);
    const double out_diff = max_abs_diff(a, rows_of(b, three, 1)),
                 state_diff = max_abs_diff(state_one[0], state_three[1]);
    std::printf("packed vs alone: outputs %.3g, final state %.3g (bound %.3g)\n", out_diff, state_diff, bound);
    EXPECT_LE(out_diff, bound);
    EXPECT_LE(state_diff, bound);
    const torch::Tensor w = torch::randn({6, 4}, kF64);
    const torch::Tensor conv_one = engine::causal_conv1d_silu(alone.v.reshape({65, 8}).narrow(1, 0, 6), w, one);
    const torch::Tensor conv_three = engine::causal_conv1d_silu(both.v.reshape({196, 8}).narrow(1, 0, 6), w, three);
    // The conv's sums are the same, but torch's SiLU is not bitwise position-independent: the last elements of a
    // tensor (the vector loop's tail) take the scalar exp, the others the vectorised one (1 ulp apart).
    const double conv_diff = max_abs_diff(conv_one, rows_of(conv_three, three, 1));
    std::printf("conv packed vs alone: %.3g\n", conv_diff);
    EXPECT_LT(conv_diff, 1e-15);
}

TEST(DeltaRule, ConvMatchesDirectSumAndSteps) {
    torch::manual_seed(3);
    const int64_t C = 7, K = 4;
    const SequenceLayout full = packed({1, 2, 9});
    const torch::Tensor x = torch::randn({12, C}, kF64), w = torch::randn({C, K}, kF64);
    const torch::Tensor y = engine::causal_conv1d_silu(x, w, full);
    for (size_t s = 0; s < full.lengths.size(); ++s) {
        for (int64_t i = 0; i < full.lengths[s]; ++i) {
            torch::Tensor acc = torch::zeros({C}, kF64);
            for (int64_t j = 0; j < K && j <= i; ++j) {
                acc += x[full.offsets[s] + i - j] * w.select(1, K - 1 - j);
            }
            EXPECT_LT(max_abs_diff(y[full.offsets[s] + i], torch::silu(acc)), 1e-14) << s << " " << i;
        }
    }
    // the longest sequence: prompt 5 rows, then 4 decode steps
    const torch::Tensor px = x.narrow(0, 3, 5);
    torch::Tensor state = engine::conv_state_from_prompt(px, packed({5}), K);  // [1, C, K-1]
    for (int64_t i = 5; i < 9; ++i) {
        const torch::Tensor out = engine::causal_conv1d_silu_step(x[3 + i].unsqueeze(0), w, state);
        EXPECT_LT(max_abs_diff(out[0], y[3 + i]), 1e-14) << i;
    }
    // a one-row prompt: the state is zero-padded in front
    const torch::Tensor short_state = engine::conv_state_from_prompt(x.narrow(0, 0, 2), packed({1, 1}), K);
    EXPECT_TRUE(torch::equal(short_state[1].select(1, K - 2), x[1]));
    EXPECT_EQ(short_state[1].narrow(1, 0, K - 2).abs().max().item<double>(), 0.0);
}

// Full-layer fixture for the mixer: HV = 2·HK, random weights and projected inputs.
struct Mixer {
    engine::DeltaNetDims dims{/*k_heads=*/2,    /*v_heads=*/4,     /*k_head_dim=*/6,
                              /*v_head_dim=*/5, /*conv_kernel=*/4,
                              /*rms_eps=*/1e-6};
    engine::DeltaNetWeights w;
    Mixer() {
        w.conv1d = torch::randn({dims.conv_dim(), dims.conv_kernel}, kF64) * 0.5;
        w.dt_bias = torch::randn({dims.v_heads}, kF64);
        w.A_log = torch::rand({dims.v_heads}, kF64).mul(4).log();
        w.norm = 1 + 0.1 * torch::randn({dims.v_head_dim}, kF64);
    }
    engine::DeltaNetInputs inputs(int64_t T) const {
        return {torch::randn({T, dims.conv_dim()}, kF64), torch::randn({T, dims.value_dim()}, kF64),
                torch::randn({T, dims.v_heads}, kF64), torch::randn({T, dims.v_heads}, kF64)};
    }
};

engine::DeltaNetInputs rows(const engine::DeltaNetInputs & in, const torch::Tensor & index) {
    return {in.qkv.index_select(0, index), in.z.index_select(0, index), in.b.index_select(0, index),
            in.a.index_select(0, index)};
}

TEST(DeltaRule, DecodeStepsMatchTheChunkedPass) {
    torch::manual_seed(4);
    const Mixer m;
    const std::vector<int64_t> prompts = {1, 63, 70};
    const int64_t steps = 5;
    const SequenceLayout full = packed({1 + steps, 63 + steps, 70 + steps}), prompt = packed(prompts);
    const engine::DeltaNetInputs in = m.inputs(full.n_tokens());
    const torch::Tensor expected = engine::deltanet_mix(m.w, m.dims, in, full);  // [T, HV·Dv]
    std::vector<int64_t> prompt_rows;
    for (size_t s = 0; s < prompts.size(); ++s) {
        for (int64_t i = 0; i < prompts[s]; ++i) {
            prompt_rows.push_back(full.offsets[s] + i);
        }
    }
    engine::DeltaNetState state;
    const torch::Tensor p = engine::deltanet_mix(m.w, m.dims, rows(in, torch::tensor(prompt_rows)), prompt, &state);
    EXPECT_LT(max_abs_diff(p, expected.index_select(0, torch::tensor(prompt_rows))), 1e-12);
    double worst = 0;
    for (int64_t i = 0; i < steps; ++i) {
        std::vector<int64_t> step_rows;
        for (size_t s = 0; s < prompts.size(); ++s) {
            step_rows.push_back(full.offsets[s] + prompts[s] + i);
        }
        const torch::Tensor index = torch::tensor(step_rows);
        const torch::Tensor out = engine::deltanet_mix_step(m.w, m.dims, rows(in, index), state);
        worst = std::max(worst, max_abs_diff(out, expected.index_select(0, index)));
    }
    std::printf("decode steps vs chunked: %.3g\n", worst);
    EXPECT_LT(worst, 1e-12);
}

// The fp32 decode step on the CPU (conv, then kernels::delta_mix_step: normalisation, gates, the rule and the
// gated norm fused) stepped from zero states for 3 sequences against the fp64 chunked pass of the same weights
// and inputs: within fp32 rounding (measured ~1e-6 on these O(1) outputs; bound 1e-4).
TEST(DeltaRule, FusedFp32DecodeStepsMatchTheFp64Pass) {
    torch::manual_seed(8);
    const Mixer m;
    const int64_t S = 3, L = 24;
    const SequenceLayout full = packed({L, L, L});
    const engine::DeltaNetInputs in = m.inputs(full.n_tokens());
    const torch::Tensor expected = engine::deltanet_mix(m.w, m.dims, in, full);  // [T, HV·Dv] fp64
    const auto f32 = [](const torch::Tensor & t) { return t.to(torch::kFloat32); };
    const engine::DeltaNetWeights w32{f32(m.w.conv1d), f32(m.w.dt_bias), f32(m.w.A_log), f32(m.w.norm)};
    const engine::DeltaNetInputs in32{f32(in.qkv), f32(in.z), f32(in.b), f32(in.a)};
    engine::DeltaNetState state{torch::zeros({S, m.dims.conv_dim(), m.dims.conv_kernel - 1}),
                                torch::zeros({S, m.dims.v_heads, m.dims.k_head_dim, m.dims.v_head_dim})};
    double worst = 0;
    for (int64_t t = 0; t < L; ++t) {
        const torch::Tensor index = torch::tensor({t, L + t, 2 * L + t});
        const torch::Tensor out = engine::deltanet_mix_step(w32, m.dims, rows(in32, index), state);
        ASSERT_EQ(out.scalar_type(), torch::kFloat32);
        worst = std::max(worst, max_abs_diff(out.to(torch::kFloat64), expected.index_select(0, index)));
    }
    std::printf("fused fp32 decode steps vs fp64 chunked: %.3g\n", worst);
    EXPECT_LT(worst, 1e-4);
}

// The state a prompt's chunked pass hands to decoding is the state of stepping its tokens one by one from zero
// (for a prompt shorter than the conv window, one chunk, and several chunks).
TEST(DeltaRule, PrefillStateEqualsTokenByTokenState) {
    torch::manual_seed(6);
    const Mixer m;
    const std::vector<int64_t> prompts = {2, 64, 130};
    const SequenceLayout layout = packed(prompts);
    const engine::DeltaNetInputs in = m.inputs(layout.n_tokens());
    engine::DeltaNetState chunked;
    engine::deltanet_mix(m.w, m.dims, in, layout, &chunked);
    ASSERT_EQ(chunked.conv.sizes(), (std::vector<int64_t>{3, m.dims.conv_dim(), m.dims.conv_kernel - 1}));
    ASSERT_EQ(chunked.recurrent.sizes(),
              (std::vector<int64_t>{3, m.dims.v_heads, m.dims.k_head_dim, m.dims.v_head_dim}));
    double worst = 0;
    for (size_t s = 0; s < prompts.size(); ++s) {
        engine::DeltaNetState stepped{torch::zeros({1, m.dims.conv_dim(), m.dims.conv_kernel - 1}, kF64),
                                      torch::zeros({1, m.dims.v_heads, m.dims.k_head_dim, m.dims.v_head_dim}, kF64)};
        for (int64_t i = 0; i < prompts[s]; ++i) {
            engine::deltanet_mix_step(m.w, m.dims, rows(in, torch::tensor({layout.offsets[s] + i})), stepped);
        }
        const int64_t row = static_cast<int64_t>(s);
        EXPECT_TRUE(torch::equal(stepped.conv[0], chunked.conv[row])) << "conv state, prompt " << prompts[s];
        worst = std::max(worst, max_abs_diff(stepped.recurrent[0], chunked.recurrent[row]));
    }
    std::printf("prefill vs stepped recurrent state: %.3g\n", worst);
    EXPECT_LT(worst, 1e-12);
}

// Central differences of loss() w.r.t. a few entries of x against x's autograd gradient.
void expect_gradient(const std::string & name, torch::Tensor & x, const std::function<torch::Tensor()> & loss) {
    x.mutable_grad() = torch::Tensor();
    loss().backward();
    const torch::Tensor grad = x.grad().clone().flatten();
    const int64_t n = x.numel();
    double worst = 0;
    for (int64_t e : {int64_t{0}, n / 3, n / 2 + 1, n - 1}) {
        const double h = 1e-6, orig = x.detach().flatten()[e].item<double>();
        auto at = [&](double value) {
            torch::NoGradGuard no_grad;
            x.detach().view(-1)[e] = value;
            return loss().item<double>();
        };
        const double fd = (at(orig + h) - at(orig - h)) / (2 * h);
        at(orig);
        const double ad = grad[e].item<double>(), rel = std::abs(ad - fd) / std::max(std::abs(fd), 0.1);
        worst = std::max(worst, rel);
        EXPECT_LT(rel, 1e-6) << name << " entry " << e << " autograd " << ad << " fd " << fd;
    }
    std::printf("finite differences %s: worst rel %.3g\n", name.c_str(), worst);
}

TEST(DeltaRule, GradientsMatchFiniteDifferences) {
    torch::manual_seed(5);
    const SequenceLayout layout = packed({3, 70});
    RuleInputs in = random_rule_inputs(73, 2, 5, 3);
    for (torch::Tensor * x : {&in.q, &in.k, &in.v, &in.g, &in.beta}) {
        x->requires_grad_(true);
    }
    const torch::Tensor r_out = torch::randn({73, 2, 3}, kF64), r_state = torch::randn({2, 2, 5, 3}, kF64);
    auto loss = [&] {
        torch::Tensor state;
        const torch::Tensor out = engine::gated_delta_rule(in.q, in.k, in.v, in.g, in.beta, layout, &state);
        return (out * r_out).sum() + (state * r_state).sum();
    };
    const char * names[] = {"q", "k", "v", "g", "beta"};
    int i = 0;
    for (torch::Tensor * x : {&in.q, &in.k, &in.v, &in.g, &in.beta}) {
        expect_gradient(names[i++], *x, loss);
    }
    torch::Tensor cx = torch::randn({73, 6}, kF64).requires_grad_(true), cw = torch::randn({6, 4}, kF64);
    cw.requires_grad_(true);
    const torch::Tensor r_conv = torch::randn({73, 6}, kF64);
    auto conv_loss = [&] { return (engine::causal_conv1d_silu(cx, cw, layout) * r_conv).sum(); };
    expect_gradient("conv x", cx, conv_loss);
    expect_gradient("conv weight", cw, conv_loss);
}

TEST(DeltaRule, MixerGradientsMatchFiniteDifferences) {
    torch::manual_seed(6);
    Mixer m;
    const SequenceLayout layout = packed({2, 66});
    engine::DeltaNetInputs in = m.inputs(68);
    for (torch::Tensor * x : {&in.qkv, &in.z, &in.b, &in.a, &m.w.conv1d, &m.w.dt_bias, &m.w.A_log, &m.w.norm}) {
        x->requires_grad_(true);
    }
    const torch::Tensor r = torch::randn({68, m.dims.value_dim()}, kF64);
    auto loss = [&] { return (engine::deltanet_mix(m.w, m.dims, in, layout) * r).sum(); };
    const char * names[] = {"qkv", "z", "b", "a", "conv1d", "dt_bias", "A_log", "norm"};
    int i = 0;
    for (torch::Tensor * x : {&in.qkv, &in.z, &in.b, &in.a, &m.w.conv1d, &m.w.dt_bias, &m.w.A_log, &m.w.norm}) {
        expect_gradient(std::string("mixer ") + names[i++], *x, loss);
    }
}

}  // namespace
}  // namespace tinkerd::testing
