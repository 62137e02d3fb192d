// Gated DeltaNet building blocks (see delta_rule.h). Packed sequences are gathered into a zero-padded batch
// [S, H, chunks, 64, D] (padding rows have k = v = g = beta = 0, so they leave the state unchanged), the
// within-chunk terms are computed for all chunks at once and only the state is carried chunk to chunk.
#include "engine/arch/delta_rule.h"

#include <algorithm>
#include <cmath>

#include "engine/arch/unit_lower_solve.h"
#include "engine/host_access.h"
#include "engine/kernels/delta_step.h"

namespace tinkerd::engine {
namespace {

constexpr int64_t kChunk = 64;
constexpr double kL2Eps = 1e-6;

// fp64 stays fp64; everything else is computed in fp32.
torch::ScalarType compute_dtype(const torch::Tensor & x) {
    return x.scalar_type() == torch::kFloat64 ? torch::kFloat64 : torch::kFloat32;
}

torch::Tensor index_tensor(const std::vector<int64_t> & rows, const torch::Device & device) {
    return torch::tensor(rows, torch::TensorOptions().dtype(torch::kInt64)).to(device);
}

// x [N, ...] with one zero row appended at index N (the row that padding slots read).
torch::Tensor with_zero_row(const torch::Tensor & x) {
    std::vector<int64_t> shape = x.sizes().vec();
    shape[0] = 1;
    return torch::cat({x, x.new_zeros(shape)}, 0);
}

// x * rsqrt(Σx² + eps) over the last dim, in x's dtype (as the FLA kernels and transformers do).
torch::Tensor l2_normalize(const torch::Tensor & x) {
    return x * torch::rsqrt((x * x).sum(-1, /*keepdim=*/true) + kL2Eps);
}

// Packed row read by each packed row at `lag` rows back within its sequence (T, the zero row, before it).
torch::Tensor lag_index(const SequenceLayout & layout, int64_t n_rows, int64_t lag, const torch::Device & device) {
    std::vector<int64_t> rows(static_cast<size_t>(n_rows), n_rows);
    for (size_t s = 0; s < layout.lengths.size(); ++s) {
        for (int64_t i = lag; i < layout.lengths[s]; ++i) {
            rows[static_cast<size_t>(layout.offsets[s] + i)] = layout.offsets[s] + i - lag;
        }
    }
    return index_tensor(rows, device);
}

// How packed rows map onto the padded batch: S sequences, each padded to `padded` rows (a multiple of 64).
struct ChunkPlan {
    int64_t seqs = 0, padded = 0;
    torch::Tensor gather;   // [S·padded] packed row of each padded slot (T: the zero row)
    torch::Tensor scatter;  // [T] padded slot of each packed row (S·padded: the zero row)
};

ChunkPlan plan_chunks(const SequenceLayout & layout, int64_t n_rows, const torch::Device & device) {
    ChunkPlan plan;
    plan.seqs = static_cast<int64_t>(layout.lengths.size());
    int64_t longest = 1;
    for (int64_t len : layout.lengths) {
        longest = std::max(longest, len);
    }
    plan.padded = (longest + kChunk - 1) / kChunk * kChunk;
    std::vector<int64_t> gather(static_cast<size_t>(plan.seqs * plan.padded), n_rows);
    std::vector<int64_t> scatter(static_cast<size_t>(n_rows), plan.seqs * plan.padded);
    for (int64_t s = 0; s < plan.seqs; ++s) {
        for (int64_t i = 0; i < layout.lengths[s]; ++i) {
            gather[static_cast<size_t>(s * plan.padded + i)] = layout.offsets[s] + i;
            scatter[static_cast<size_t>(layout.offsets[s] + i)] = s * plan.padded + i;
        }
    }
    plan.gather = index_tensor(gather, device);
    plan.scatter = index_tensor(scatter, device);
    return plan;
}

// [T, H, D...] -> [S, H, chunks, 64, D...] (zero-padded).
torch::Tensor to_chunks(const torch::Tensor & x, const ChunkPlan & plan) {
    const torch::Tensor rows = with_zero_row(x).index_select(0, plan.gather);  // [S·Lp, H, D...]
    std::vector<int64_t> padded = {plan.seqs, plan.padded},
                         chunked = {plan.seqs, x.size(1), plan.padded / kChunk, kChunk};
    for (int64_t d = 1; d < x.dim(); ++d) {
        padded.push_back(x.size(d));
        if (d > 1) {
            chunked.push_back(x.size(d));
        }
    }
    return rows.view(padded).transpose(1, 2).reshape(chunked);
}

// [S, H, chunks, 64, D] -> [T, H, D] (the packed rows back in place).
torch::Tensor from_chunks(const torch::Tensor & y, const ChunkPlan & plan) {
    const int64_t H = y.size(1), D = y.size(4);
    const torch::Tensor rows =
        y.reshape({plan.seqs, H, plan.padded, D}).transpose(1, 2).reshape({plan.seqs * plan.padded, H, D});
    return with_zero_row(rows).index_select(0, plan.scatter);
}

// Within-chunk terms of the chunked rule (all chunks at once), shapes [S, H, N, 64, ...].
struct ChunkTerms {
    torch::Tensor w_v;    // [.., 64, Dv] (I + M)⁻¹ (beta·v): the new values before the state's correction
    torch::Tensor w_k;    // [.., 64, Dk] (I + M)⁻¹ (beta·k·exp(G)): what the incoming state subtracts
    torch::Tensor attn;   // [.., 64, 64] (q kᵀ)·decay, lower triangle with the diagonal
    torch::Tensor q_dec;  // [.., 64, Dk] q·exp(G): reads the incoming state
    torch::Tensor k_dec;  // [.., 64, Dk] k·exp(G_last - G): writes the outgoing state
    torch::Tensor g_end;  // [S, H, N] G_last: the whole chunk's log-decay
};

ChunkTerms chunk_terms(const torch::Tensor & q, const torch::Tensor & k, const torch::Tensor & v,
                       const torch::Tensor & g, const torch::Tensor & beta) {
    const torch::Tensor G = g.cumsum(-1);                          // [S, H, N, 64]
    const torch::Tensor diff = G.unsqueeze(-1) - G.unsqueeze(-2);  // [.., i, j] = G_i - G_j
    const torch::Tensor decay = diff.tril().exp().tril();          // masked before exp: no inf above
    const torch::Tensor k_beta = k * beta.unsqueeze(-1);           // [.., 64, Dk]
    // M's strictly lower triangle (the solve reads nothing else: its diagonal is taken as 1; decay's upper is 0)
    const torch::Tensor M = k_beta.matmul(k.transpose(-1, -2)) * decay;
    const torch::Tensor rhs = torch::cat({v * beta.unsqueeze(-1), k_beta * G.exp().unsqueeze(-1)}, -1);
    const torch::Tensor sol = unit_lower_solve(M, rhs);  // (I + M)⁻¹ rhs, [.., 64, Dv + Dk]
    ChunkTerms t;
    const int64_t Dv = v.size(-1), Dk = k.size(-1);
    t.w_v = sol.narrow(-1, 0, Dv);
    t.w_k = sol.narrow(-1, Dv, Dk);
    t.attn = q.matmul(k.transpose(-1, -2)) * decay;
    t.q_dec = q * G.exp().unsqueeze(-1);
    t.g_end = G.select(-1, kChunk - 1);
    t.k_dec = k * (t.g_end.unsqueeze(-1) - G).exp().unsqueeze(-1);
    return t;
}

}  // namespace

torch::Tensor causal_conv1d_silu(const torch::Tensor & x, const torch::Tensor & weight, const SequenceLayout & layout) {
    const int64_t T = x.size(0), K = weight.size(1);
    const torch::Tensor padded = with_zero_row(x);  // [T+1, Cc]
    torch::Tensor acc = x * weight.select(1, K - 1);
    for (int64_t lag = 1; lag < K; ++lag) {
        acc = acc + padded.index_select(0, lag_index(layout, T, lag, x.device())) * weight.select(1, K - 1 - lag);
    }
    return torch::silu(acc);
}

torch::Tensor conv_state_from_prompt(const torch::Tensor & x, const SequenceLayout & layout, int64_t kernel) {
    const int64_t T = x.size(0), S = static_cast<int64_t>(layout.lengths.size()), W = kernel - 1;
    std::vector<int64_t> rows(static_cast<size_t>(S * W), T);
    for (int64_t s = 0; s < S; ++s) {
        for (int64_t j = 0; j < W; ++j) {  // slot j holds the input W - j rows before the end
            const int64_t back = W - j;
            if (back <= layout.lengths[s]) {
                rows[static_cast<size_t>(s * W + j)] = layout.offsets[s] + layout.lengths[s] - back;
            }
        }
    }
    const torch::Tensor picked = with_zero_row(x).index_select(0, index_tensor(rows, x.device()));  // [S·W, Cc]
    return picked.view({S, W, x.size(1)}).transpose(1, 2).contiguous();
}

torch::Tensor causal_conv1d_silu_step(const torch::Tensor & x, const torch::Tensor & weight, torch::Tensor & state) {
    torch::NoGradGuard no_grad;
    const torch::Tensor window = torch::cat({state.to(x.scalar_type()), x.unsqueeze(-1)}, -1);  // [S, Cc, K]
    const torch::Tensor out = torch::silu((window * weight.unsqueeze(0)).sum(-1));
    state.copy_(window.narrow(-1, 1, window.size(-1) - 1));
    return out;
}

torch::Tensor gated_delta_rule(const torch::Tensor & q, const torch::Tensor & k, const torch::Tensor & v,
                               const torch::Tensor & g, const torch::Tensor & beta, const SequenceLayout & layout,
                               torch::Tensor * final_state) {
    const auto cd = compute_dtype(q);
    const int64_t Dk = q.size(2), Dv = v.size(2);
    const ChunkPlan plan = plan_chunks(layout, q.size(0), q.device());
    const double scale = 1.0 / std::sqrt(static_cast<double>(Dk));
    const ChunkTerms t =
        chunk_terms(to_chunks(l2_normalize(q).to(cd) * scale, plan), to_chunks(l2_normalize(k).to(cd), plan),
                    to_chunks(v.to(cd), plan), to_chunks(g.to(cd), plan), to_chunks(beta.to(cd), plan));
    torch::Tensor state = torch::zeros({plan.seqs, q.size(1), Dk, Dv}, t.w_v.options());  // [S, H, Dk, Dv]
    // Per-chunk views by ONE unbind each (its backward stacks the chunks' gradients once); a select per chunk
    // would make autograd allocate a zero gradient of the whole tensor per chunk: quadratic in the length.
    const auto w_v = t.w_v.unbind(2), w_k = t.w_k.unbind(2), q_dec = t.q_dec.unbind(2), attn = t.attn.unbind(2);
    const auto k_dec = t.k_dec.unbind(2), decay_end = t.g_end.exp().unbind(2);
    std::vector<torch::Tensor> outs;
    for (size_t n = 0; n < w_v.size(); ++n) {
        const torch::Tensor v_new = w_v[n] - w_k[n].matmul(state);  // [S, H, 64, Dv]
        outs.push_back(q_dec[n].matmul(state) + attn[n].matmul(v_new));
        state = state * decay_end[n].unsqueeze(-1).unsqueeze(-1) + k_dec[n].transpose(-1, -2).matmul(v_new);
    }
    if (final_state != nullptr) {
        *final_state = state;
    }
    return from_chunks(torch::stack(outs, 2), plan).to(q.scalar_type());
}

torch::Tensor recurrent_gated_delta_step_ops(const torch::Tensor & q, const torch::Tensor & k, const torch::Tensor & v,
                                             const torch::Tensor & g, const torch::Tensor & beta,
                                             torch::Tensor & state) {
    torch::NoGradGuard no_grad;
    const auto cd = state.scalar_type() == torch::kFloat64 ? torch::kFloat64 : compute_dtype(q);
    const double scale = 1.0 / std::sqrt(static_cast<double>(q.size(-1)));
    const torch::Tensor qn = l2_normalize(q).to(cd) * scale, kn = l2_normalize(k).to(cd);  // [S, H, Dk]
    torch::Tensor S = state.to(cd) * g.to(cd).exp().unsqueeze(-1).unsqueeze(-1);           // [S, H, Dk, Dv]
    const torch::Tensor recalled = kn.unsqueeze(-2).matmul(S).squeeze(-2);                 // [S, H, Dv]
    const torch::Tensor delta = (v.to(cd) - recalled) * beta.to(cd).unsqueeze(-1);
    S = S + kn.unsqueeze(-1) * delta.unsqueeze(-2);
    state.copy_(S);
    return qn.unsqueeze(-2).matmul(S).squeeze(-2).to(q.scalar_type());
}

namespace {

// The fused kernel takes CPU fp32 states, each contiguous [H, Dk, Dv], and inputs that are not fp64.
bool fused_step_applies(const torch::Tensor & q, const std::vector<torch::Tensor> & states) {
    return q.device().is_cpu() && q.scalar_type() != torch::kFloat64 &&
           std::all_of(states.begin(), states.end(), [](const torch::Tensor & s) {
               return s.device().is_cpu() && s.scalar_type() == torch::kFloat && s.is_contiguous();
           });
}

// kernels::delta_step over the rows' states in place, the inputs prepared as the ops form prepares them.
torch::Tensor fused_delta_step(const torch::Tensor & q, const torch::Tensor & k, const torch::Tensor & v,
                               const torch::Tensor & g, const torch::Tensor & beta,
                               const std::vector<torch::Tensor> & states) {
    const double scale = 1.0 / std::sqrt(static_cast<double>(q.size(-1)));
    const torch::Tensor qn = (l2_normalize(q).to(torch::kFloat) * scale).contiguous();  // [S, H, Dk]
    const torch::Tensor kn = l2_normalize(k).to(torch::kFloat).contiguous();            // [S, H, Dk]
    const torch::Tensor vf = v.to(torch::kFloat).contiguous();                          // [S, H, Dv]
    const torch::Tensor decay = g.to(torch::kFloat).exp().contiguous();                 // [S, H]
    const torch::Tensor bf = beta.to(torch::kFloat).contiguous();                       // [S, H]
    const int64_t S = q.size(0), H = q.size(1), Dk = q.size(2), Dv = v.size(2);
    torch::Tensor out = torch::empty({S, H, Dv}, vf.options());  // [S, H, Dv]
    std::vector<kernels::DeltaStepRow> rows;
    for (int64_t s = 0; s < S; ++s) {
        TORCH_CHECK(states[s].numel() == H * Dk * Dv, "delta step: state ", s, " has ", states[s].numel(),
                    " values, expected ", H * Dk * Dv);
        const char * who = "recurrent_gated_delta_step";
        rows.push_back({host_data<const float>(qn[s], who), host_data<const float>(kn[s], who),
                        host_data<const float>(vf[s], who), host_data<const float>(decay[s], who),
                        host_data<const float>(bf[s], who), host_data<float>(states[s], who),
                        host_data<float>(out[s], who)});
    }
    kernels::delta_step(rows.data(), S, H, Dk, Dv);
    return out.to(q.scalar_type());
}

}  // namespace

torch::Tensor recurrent_gated_delta_step(const torch::Tensor & q, const torch::Tensor & k, const torch::Tensor & v,
                                         const torch::Tensor & g, const torch::Tensor & beta,
                                         const std::vector<torch::Tensor> & states) {
    torch::NoGradGuard no_grad;
    TORCH_CHECK(static_cast<int64_t>(states.size()) == q.size(0), "delta step: ", states.size(), " states for ",
                q.size(0), " rows");
    if (fused_step_applies(q, states)) {
        return fused_delta_step(q, k, v, g, beta, states);
    }
    torch::Tensor stacked = torch::stack(states);  // [S, H, Dk, Dv]
    torch::Tensor out = recurrent_gated_delta_step_ops(q, k, v, g, beta, stacked);
    for (size_t s = 0; s < states.size(); ++s) {
        states[s].copy_(stacked[static_cast<int64_t>(s)]);  // the tensors share the callers' storage
    }
    return out;
}

torch::Tensor recurrent_gated_delta_step(const torch::Tensor & q, const torch::Tensor & k, const torch::Tensor & v,
                                         const torch::Tensor & g, const torch::Tensor & beta, torch::Tensor & state) {
    if (!fused_step_applies(q, {state})) {  // it also asks for a contiguous state: its rows are views
        return recurrent_gated_delta_step_ops(q, k, v, g, beta, state);
    }
    return recurrent_gated_delta_step(q, k, v, g, beta, state.unbind(0));  // views of state: updated in place
}

torch::Tensor gated_rms_norm(const torch::Tensor & x, const torch::Tensor & weight, const torch::Tensor & z,
                             double eps) {
    const auto cd = compute_dtype(x);
    const torch::Tensor h = x.to(cd);
    const torch::Tensor normed = (h * torch::rsqrt(h.pow(2).mean(-1, /*keepdim=*/true) + eps)).to(x.scalar_type());
    return (weight * normed * torch::silu(z.to(cd))).to(x.scalar_type());
}

namespace {

// The mixer's per-row heads and gates from the conv output mixed [T, Cc] (q, k repeated to HV heads).
struct HeadsAndGates {
    torch::Tensor q, k;     // [T, HV, Dk]
    torch::Tensor v;        // [T, HV, Dv]
    torch::Tensor g, beta;  // [T, HV]; g in fp32 (fp64 for fp64 inputs), as transformers computes it
};

HeadsAndGates heads_and_gates(const torch::Tensor & mixed, const DeltaNetWeights & w, const DeltaNetDims & d,
                              const DeltaNetInputs & in) {
    const int64_t T = mixed.size(0), repeat = d.v_heads / d.k_heads;
    HeadsAndGates h;
    h.q = mixed.narrow(1, 0, d.key_dim()).reshape({T, d.k_heads, d.k_head_dim});
    h.k = mixed.narrow(1, d.key_dim(), d.key_dim()).reshape({T, d.k_heads, d.k_head_dim});
    h.v = mixed.narrow(1, 2 * d.key_dim(), d.value_dim()).reshape({T, d.v_heads, d.v_head_dim});
    if (repeat > 1) {
        h.q = h.q.repeat_interleave(repeat, 1);
        h.k = h.k.repeat_interleave(repeat, 1);
    }
    const auto cd = compute_dtype(in.a);
    h.beta = torch::sigmoid(in.b);
    h.g = -w.A_log.to(cd).exp() * torch::softplus(in.a.to(cd) + w.dt_bias);
    return h;
}

// Core output [T, HV, Dv] -> gated norm with z -> [T, HV·Dv].
torch::Tensor norm_and_gate(const torch::Tensor & core, const DeltaNetWeights & w, const DeltaNetDims & d,
                            const torch::Tensor & z) {
    const int64_t T = core.size(0);
    return gated_rms_norm(core.reshape({T * d.v_heads, d.v_head_dim}), w.norm, z.reshape({T * d.v_heads, d.v_head_dim}),
                          d.rms_eps)
        .view({T, d.value_dim()});
}

}  // namespace

torch::Tensor deltanet_mix(const DeltaNetWeights & w, const DeltaNetDims & dims, const DeltaNetInputs & in,
                           const SequenceLayout & layout, DeltaNetState * state) {
    const torch::Tensor mixed = causal_conv1d_silu(in.qkv, w.conv1d, layout);  // [T, Cc]
    const HeadsAndGates h = heads_and_gates(mixed, w, dims, in);
    if (state != nullptr) {
        state->conv = conv_state_from_prompt(in.qkv.detach(), layout, dims.conv_kernel);
    }
    const torch::Tensor core =
        gated_delta_rule(h.q, h.k, h.v, h.g, h.beta, layout, state != nullptr ? &state->recurrent : nullptr);
    if (state != nullptr) {
        state->recurrent = state->recurrent.detach();
    }
    return norm_and_gate(core, w, dims, in.z);
}

namespace {

// kernels::delta_mix_step takes the step after the conv: CPU fp32 inputs, weights and states (contiguous).
bool fused_mix_applies(const torch::Tensor & mixed, const DeltaNetWeights & w, const DeltaNetInputs & in,
                       const std::vector<torch::Tensor> & recurrent) {
    const auto f32_cpu = [](const torch::Tensor & t) {
        return t.device().is_cpu() && t.scalar_type() == torch::kFloat;
    };
    return f32_cpu(mixed) && f32_cpu(in.a) && f32_cpu(in.b) && f32_cpu(in.z) && f32_cpu(w.A_log) &&
           f32_cpu(w.dt_bias) && f32_cpu(w.norm) && fused_step_applies(mixed, recurrent);
}

// The fused decode step: mixed [S, Cc] (the conv output) -> [S, HV·Dv], each recurrent state updated in place.
torch::Tensor fused_mix_step(const torch::Tensor & mixed, const DeltaNetWeights & w, const DeltaNetDims & d,
                             const DeltaNetInputs & in, const std::vector<torch::Tensor> & recurrent) {
    const int64_t S = mixed.size(0);
    const torch::Tensor m = mixed.contiguous(), a = in.a.contiguous(), b = in.b.contiguous();  // [S, Cc], [S, HV]
    const torch::Tensor z = in.z.contiguous(), A_log = w.A_log.contiguous(), dt = w.dt_bias.contiguous();
    const torch::Tensor norm = w.norm.contiguous();
    torch::Tensor out = torch::empty({S, d.value_dim()}, m.options());  // [S, HV·Dv]
    const char * who = "deltanet decode step";
    std::vector<kernels::DeltaMixRow> rows;
    for (int64_t s = 0; s < S; ++s) {
        TORCH_CHECK(recurrent[s].numel() == d.v_heads * d.k_head_dim * d.v_head_dim, "deltanet decode step: state ", s,
                    " has ", recurrent[s].numel(), " values");
        const float * row = host_data<const float>(m[s], who);
        rows.push_back({row, row + d.key_dim(), row + 2 * d.key_dim(), host_data<const float>(a[s], who),
                        host_data<const float>(b[s], who), host_data<const float>(z[s], who),
                        host_data<float>(recurrent[s], who), host_data<float>(out[s], who)});
    }
    const kernels::DeltaMixWeights weights{host_data<const float>(A_log, who), host_data<const float>(dt, who),
                                           host_data<const float>(norm, who), static_cast<float>(d.rms_eps)};
    kernels::delta_mix_step(rows.data(), S, d.k_heads, d.v_heads, d.k_head_dim, d.v_head_dim, weights);
    return out;
}

// One decoding step: conv [S, Cc, K-1] and each sequence's recurrent state [HV, Dk, Dv] updated in place.
torch::Tensor mix_step(const DeltaNetWeights & w, const DeltaNetDims & dims, const DeltaNetInputs & in,
                       torch::Tensor & conv, const std::vector<torch::Tensor> & recurrent) {
    const torch::Tensor mixed = causal_conv1d_silu_step(in.qkv, w.conv1d, conv);  // [S, Cc]
    if (fused_mix_applies(mixed, w, in, recurrent)) {
        return fused_mix_step(mixed, w, dims, in, recurrent);
    }
    const HeadsAndGates h = heads_and_gates(mixed, w, dims, in);
    const torch::Tensor core = recurrent_gated_delta_step(h.q, h.k, h.v, h.g, h.beta, recurrent);
    return norm_and_gate(core, w, dims, in.z);
}

}  // namespace

torch::Tensor deltanet_mix_step(const DeltaNetWeights & w, const DeltaNetDims & dims, const DeltaNetInputs & in,
                                DeltaNetState & state) {
    torch::NoGradGuard no_grad;
    if (!state.recurrent.is_contiguous()) {
        state.recurrent = state.recurrent.contiguous();
    }
    return mix_step(w, dims, in, state.conv, state.recurrent.unbind(0));
}

namespace {

void store_conv_states(const torch::Tensor & conv, const std::vector<SequenceCache *> & caches, int64_t layer) {
    for (size_t s = 0; s < caches.size(); ++s) {
        caches[s]->conv_state(layer).copy_(conv[static_cast<int64_t>(s)]);
    }
}

void store_states(const DeltaNetState & state, const std::vector<SequenceCache *> & caches, int64_t layer) {
    store_conv_states(state.conv, caches, layer);
    for (size_t s = 0; s < caches.size(); ++s) {
        caches[s]->recurrent_state(layer).copy_(state.recurrent[static_cast<int64_t>(s)]);
    }
}

// A decode step on the caches' own states: the small conv states stacked and stored back, the recurrent ones
// (2 MiB a sequence at Qwen3.5's sizes) updated where they are.
torch::Tensor mix_step_in_caches(const DeltaNetWeights & w, const DeltaNetDims & dims, const DeltaNetInputs & in,
                                 const std::vector<SequenceCache *> & caches, int64_t layer) {
    std::vector<torch::Tensor> conv, recurrent;
    for (SequenceCache * cache : caches) {
        conv.push_back(cache->conv_state(layer));
        recurrent.push_back(cache->recurrent_state(layer));
    }
    torch::Tensor stacked_conv = torch::stack(conv);                     // [S, Cc, K-1]
    torch::Tensor out = mix_step(w, dims, in, stacked_conv, recurrent);  // [S, HV·Dv]
    store_conv_states(stacked_conv, caches, layer);
    return out;
}

}  // namespace

torch::Tensor deltanet_mix_cached(const DeltaNetWeights & w, const DeltaNetDims & dims, const DeltaNetInputs & in,
                                  const std::vector<int64_t> & lengths, const std::vector<SequenceCache *> & caches,
                                  int64_t layer) {
    torch::NoGradGuard no_grad;
    if (std::all_of(lengths.begin(), lengths.end(), [](int64_t n) { return n == 1; })) {
        return mix_step_in_caches(w, dims, in, caches, layer);  // [S, HV·Dv]
    }
    SequenceLayout layout;
    int64_t offset = 0;
    for (size_t s = 0; s < caches.size(); ++s) {
        TORCH_CHECK(caches[s]->length() == 0,
                    "a linear-attention prefill of several rows must start from an empty "
                    "cache (sequence ",
                    s, " holds ", caches[s]->length(), " tokens)");
        layout.offsets.push_back(offset);
        layout.lengths.push_back(lengths[s]);
        offset += lengths[s];
    }
    DeltaNetState state;
    torch::Tensor out = deltanet_mix(w, dims, in, layout, &state);  // [T, HV·Dv]
    store_states(state, caches, layer);
    return out;
}

}  // namespace tinkerd::engine
