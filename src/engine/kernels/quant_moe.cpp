// The routed experts of one MoE layer with quantised experts and no gradient (quant_moe.h): the (token,
// expert) pairs grouped by expert, then one parallel region over (expert, gate/up, row range) items and one
// over (expert, row range) items of down, each item one quant_forward_rows call on the expert's gathered rows.
#include "engine/kernels/quant_moe.h"

#include <algorithm>
#include <vector>

#include <ATen/Parallel.h>

#include "engine/host_access.h"
#include "engine/kernels/quant_int8.h"
#include "engine/kernels/quant_kernels.h"
#include "engine/kernels/quant_matmul.h"

namespace tinkerd::engine::kernels {

namespace {

constexpr int64_t kItemBytes = int64_t{1} << 16;  // quantised weight bytes per work item, about

// The pairs [P = T·k] grouped by expert (ascending), tokens ascending within each group.
struct Groups {
    std::vector<int64_t> expert, begin;  // per group; begin has one more entry (P)
    std::vector<int64_t> token;          // [P] the token of each gathered row
    std::vector<float> weight;           // [P] its routing weight
};

Groups group_pairs(const torch::Tensor & experts, const torch::Tensor & weights, int64_t n_experts) {
    const torch::Tensor e_host = experts.to(torch::kCPU, torch::kLong).contiguous();   // [T, k]
    const torch::Tensor w_host = weights.to(torch::kCPU, torch::kFloat).contiguous();  // [T, k]
    const int64_t P = e_host.numel(), k = e_host.size(1);
    const int64_t * e = host_data<const int64_t>(e_host, "moe groups");
    const float * w = host_data<const float>(w_host, "moe groups");
    std::vector<int64_t> start(n_experts + 1, 0);
    for (int64_t i = 0; i < P; ++i) {
        TORCH_CHECK(e[i] >= 0 && e[i] < n_experts, "expert ", e[i], " outside ", n_experts);
        ++start[e[i] + 1];
    }
    for (int64_t x = 0; x < n_experts; ++x) {
        start[x + 1] += start[x];
    }
    Groups g;
    g.token.resize(P);
    g.weight.resize(P);
    std::vector<int64_t> next(start.begin(), start.end() - 1);
    for (int64_t i = 0; i < P; ++i) {  // i = token·k + slot: tokens come out ascending per expert
        const int64_t row = next[e[i]]++;
        g.token[row] = i / k;
        g.weight[row] = w[i];
    }
    for (int64_t x = 0; x < n_experts; ++x) {
        if (start[x + 1] > start[x]) {
            g.expert.push_back(x);
            g.begin.push_back(start[x]);
        }
    }
    g.begin.push_back(P);
    return g;
}

// One stacked weight [E, out, in / blk, bb] as the kernels see it.
struct Stack {
    gguf::GgmlType type;
    const uint8_t * data;
    int64_t out, in, row_bytes;
};

Stack stack_of(const torch::Tensor & w) {
    TORCH_CHECK(w.dim() == 4 && is_quantised(w) && w.is_contiguous(), "stacked quantised experts expected, got ",
                w.sizes());
    return {quantised_type(w), host_data<const uint8_t>(w, "moe experts"), w.size(1), quantised_in(w),
            quantised_row_bytes(w)};
}

// x quantised for the int8-activation mode (sampling's opt-in), per stack where on: each source row once per
// weight type (gate and up share theirs), then gathered to the pairs' order when `gather` is given.
struct Int8Stacks {
    std::vector<detail::Int8Rows> rows;  // [stacks]: filled for the first stack of each type and width
    std::vector<size_t> source;          // [stacks]: the entry of rows a stack reads
    std::vector<bool> on;
    detail::Int8Isa isa = detail::Int8Isa::scalar;
    const detail::Int8Rows & of(size_t stack) const { return rows[source[stack]]; }
};

// x [rows, in]: the gathered rows themselves (gather null) or the tokens' rows that `gather` [P] indexes.
Int8Stacks int8_stacks(const std::vector<Stack> & stacks, const float * x, int64_t rows,
                       const std::vector<int64_t> * gather) {
    Int8Stacks r;
    r.rows.resize(stacks.size());
    r.source.resize(stacks.size());
    r.on.assign(stacks.size(), false);
    r.isa = detail::int8_isa_for(detail::quant_isa());
    for (size_t s = 0; s < stacks.size(); ++s) {
        r.on[s] = detail::int8_activations_on() && detail::int8_type_supported(stacks[s].type);
        if (!r.on[s]) {
            continue;
        }
        size_t same = 0;  // an earlier stack quantised for the same type and width
        while (same < s && !(r.on[same] && stacks[same].type == stacks[s].type && stacks[same].in == stacks[s].in)) {
            ++same;
        }
        r.source[s] = same;  // s itself when no earlier stack matches
        if (same < s) {
            continue;
        }
        if (gather == nullptr) {
            detail::quantise_rows_int8(stacks[s].type, x, rows, stacks[s].in, r.rows[s]);
        } else {
            detail::Int8Rows tokens;
            detail::quantise_rows_int8(stacks[s].type, x, rows, stacks[s].in, tokens);
            detail::gather_rows_int8(tokens, *gather, r.rows[s]);
        }
    }
    return r;
}

// y [P, out] (gathered order) = x [P, in] · W_eᵀ per group, for every stack in `stacks` (y[s] its output):
// items (group, stack, row range), split across the threads in one parallel region.
void grouped_products(const Groups & g, const std::vector<Stack> & stacks, const float * x, const Int8Stacks & int8,
                      const std::vector<float *> & y) {
    struct Item {
        int64_t group, stack, o0, o1;
    };
    std::vector<Item> items;
    for (size_t gi = 0; gi + 1 < g.begin.size(); ++gi) {
        for (size_t s = 0; s < stacks.size(); ++s) {
            const int64_t rows = std::max<int64_t>(8, kItemBytes / stacks[s].row_bytes);
            for (int64_t o0 = 0; o0 < stacks[s].out; o0 += rows) {
                items.push_back(
                    {static_cast<int64_t>(gi), static_cast<int64_t>(s), o0, std::min(stacks[s].out, o0 + rows)});
            }
        }
    }
    const detail::QuantIsa isa = detail::quant_isa();
    at::parallel_for(0, static_cast<int64_t>(items.size()), 1, [&](int64_t begin, int64_t end) {
        for (int64_t i = begin; i < end; ++i) {
            const Item & it = items[i];
            const Stack & s = stacks[it.stack];
            const int64_t r0 = g.begin[it.group], n = g.begin[it.group + 1] - r0;
            const uint8_t * w = s.data + g.expert[it.group] * s.out * s.row_bytes;
            float * ys = y[it.stack] + r0 * s.out;
            if (int8.on[it.stack]) {
                detail::int8_forward_rows(s.type, detail::int8_view(int8.of(it.stack), r0, n), w, s.row_bytes, it.o0,
                                          it.o1, ys, s.out, int8.isa);
            } else {
                detail::quant_forward_rows(s.type, x + r0 * s.in, n, s.in, w, s.row_bytes, it.o0, it.o1, ys, s.out,
                                           isa);
            }
        }
    });
}

}  // namespace

torch::Tensor quantised_moe_forward(const torch::Tensor & x, const torch::Tensor & gate, const torch::Tensor & up,
                                    const torch::Tensor & down, const torch::Tensor & experts,
                                    const torch::Tensor & weights) {
    const Stack sg = stack_of(gate), su = stack_of(up), sd = stack_of(down);
    const int64_t T = x.size(0), C = x.size(1), F = sg.out;
    TORCH_CHECK(sg.in == C && su.in == C && su.out == F && sd.in == F && sd.out == C, "expert shapes do not chain");
    const Groups g = group_pairs(experts, weights, gate.size(0));
    const int64_t P = static_cast<int64_t>(g.token.size());
    const torch::Tensor xs = x.to(torch::kFloat).contiguous();
    const torch::Tensor rows = host_wrap(const_cast<int64_t *>(g.token.data()), {P}, torch::kLong);
    const torch::Tensor xg = xs.index_select(0, rows);  // [P, C] gathered
    torch::Tensor gu = torch::empty({2, P, F}, torch::kFloat), dn = torch::empty({P, C}, torch::kFloat);
    float *gp = host_data<float>(gu, "moe gate"), *up_p = gp + P * F;
    const float * x_tokens = host_data<const float>(xs, "moe x");  // [T, C]: int8 quantises each token once
    grouped_products(g, {sg, su}, host_data<const float>(xg, "moe x"), int8_stacks({sg, su}, x_tokens, T, &g.token),
                     {gp, up_p});
    const torch::Tensor sig = torch::sigmoid(gu[0]);  // [P, F]: fused_swiglu's g · sigmoid(g) · u
    const float * sp = host_data<const float>(sig, "moe act");
    for (int64_t i = 0; i < P * F; ++i) {
        gp[i] = gp[i] * sp[i] * up_p[i];
    }
    grouped_products(g, {sd}, gp, int8_stacks({sd}, gp, P, nullptr), {host_data<float>(dn, "moe down")});
    torch::Tensor y = torch::zeros({T, C}, torch::kFloat);  // [T, C]
    float * yp = host_data<float>(y, "moe out");
    const float * dp = host_data<const float>(dn, "moe down");
    for (int64_t r = 0; r < P; ++r) {  // rows in expert order: each token's experts summed ascending
        float * yt = yp + g.token[r] * C;
        for (int64_t c = 0; c < C; ++c) {
            yt[c] += dp[r * C + c] * g.weight[r];
        }
    }
    return y.to(x.scalar_type());
}

}  // namespace tinkerd::engine::kernels
