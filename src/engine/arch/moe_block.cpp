// The mixture-of-experts MLP: loading the router and experts, routing, grouping the rows by expert, and
// the forward with the experts' LoRA (autograd provides the backward, through the routing weights too).
#include "engine/arch/moe_block.h"

#include <algorithm>
#include <cstdlib>
#include <map>

#include "engine/arch/family.h"
#include "engine/fused_ops.h"
#include "engine/host_access.h"
#include "engine/kernels/matmul.h"
#include "engine/kernels/quant_matmul.h"
#include "engine/kernels/quant_moe.h"

namespace tinkerd::engine {

namespace {

// Qwen3.5-MoE's shared expert (a dense SwiGLU into w_gate/w_up/w_down) and its gate [1, C]; none without one.
Result<void> load_shared_expert(const WeightLoader & loader, const model::ModelConfig & c, const std::string & p,
                                LayerWeights & w) {
    if (c.shared_expert_intermediate_size == 0) {
        return {};
    }
    TRY_STATUS(load_swiglu_weights(loader, p + "shared_expert.", c.hidden_size, c.shared_expert_intermediate_size, w));
    auto gate = loader.act_matrix(p + "shared_expert_gate.weight", {1, c.hidden_size});
    TRY_STATUS(gate);
    w.shared_expert_gate = std::move(gate).value();
    return {};
}

// A GGUF's experts (gguf::hf_tensor_name: "experts.gate_proj" [E, F, C] ...), used as they lie: gate and up
// stay two tensors (stacking them would copy most of the model).
Result<void> load_stacked_experts(const WeightLoader & loader, const model::ModelConfig & c, const std::string & p,
                                  LayerWeights & w) {
    const int64_t E = c.n_experts, F = c.moe_intermediate_size, C = c.hidden_size;
    TRY_STATUS(assign(w.experts_gate, loader.matrix(p + "experts.gate_proj", {E, F, C})));
    TRY_STATUS(assign(w.experts_up, loader.matrix(p + "experts.up_proj", {E, F, C})));
    TRY_STATUS(assign(w.experts_down, loader.matrix(p + "experts.down_proj", {E, C, F})));
    return load_shared_expert(loader, c, p, w);
}

}  // namespace

Result<void> load_moe_weights(const WeightLoader & loader, const model::ModelConfig & c, int64_t layer,
                              LayerWeights & w) {
    const std::string p = "model.layers." + std::to_string(layer) + ".mlp.";
    const int64_t E = c.n_experts, F = c.moe_intermediate_size, C = c.hidden_size;
    auto router = loader.act_matrix(p + "gate.weight", {E, C});
    TRY_STATUS(router);
    w.router = std::move(router).value();
    if (loader.contains(p + "experts.gate_proj")) {  // a GGUF's stacked experts, kept where they lie
        return load_stacked_experts(loader, c, p, w);
    }
    if (loader.contains(p + "experts.gate_up_proj")) {  // transformers 5's in-memory layout
        auto gate_up = loader.matrix(p + "experts.gate_up_proj", {E, 2 * F, C});
        TRY_STATUS(gate_up);
        auto down = loader.matrix(p + "experts.down_proj", {E, C, F});
        TRY_STATUS(down);
        w.experts_gate_up = std::move(gate_up).value();
        w.experts_down = std::move(down).value();
        return load_shared_expert(loader, c, p, w);
    }
    std::vector<torch::Tensor> gate_up, down, mapped;
    for (int64_t e = 0; e < E; ++e) {
        const std::string q = p + "experts." + std::to_string(e) + ".";
        auto gate = loader.matrix(q + "gate_proj.weight", {F, C});
        TRY_STATUS(gate);
        auto up = loader.matrix(q + "up_proj.weight", {F, C});
        TRY_STATUS(up);
        auto d = loader.matrix(q + "down_proj.weight", {C, F});
        TRY_STATUS(d);
        gate_up.push_back(torch::cat({*gate, *up}, 0));  // [2F, C]
        down.push_back(*d);
        mapped.insert(mapped.end(), {*gate, *up, *d});
    }
    w.experts_gate_up = torch::stack(gate_up);  // [E, 2F, C]
    w.experts_down = torch::stack(down);        // [E, C, F]
    for (const torch::Tensor & t : mapped) {
        loader.release(t);  // copied into the stacks
    }
    return load_shared_expert(loader, c, p, w);
}

Routing route_tokens(const torch::Tensor & x, const torch::Tensor & router, int64_t top_k, bool norm_topk_prob) {
    torch::Tensor probs = torch::softmax(kernels::gate_linear(x, router), -1);  // [T, E]
    auto [weights, experts] = torch::topk(probs, top_k, -1);                    // [T, k] each
    if (norm_topk_prob) {
        weights = weights / weights.sum(-1, /*keepdim=*/true);
    }
    return {weights, experts};
}

namespace {

// The gathered rows [T·k] grouped by expert (ascending), tokens ascending within each expert.
struct Dispatch {
    struct Group {
        int64_t expert = 0;
        int64_t begin = 0, end = 0;  // rows of the gathered order
    };
    std::vector<Group> groups;
    std::vector<int64_t> tokens;  // [T·k] the token of each gathered row
    std::vector<int64_t> slots;   // [T·k] token·k + slot: the row's weight in routing.weights.view(-1)
};

Dispatch dispatch(const torch::Tensor & experts, int64_t n_experts) {
    const torch::Tensor host = to_host(experts, torch::kInt64);  // [T, k]: one copy from the device per layer
    const int64_t T = host.size(0), k = host.size(1);
    const int64_t * e = host_data<int64_t>(host, "moe dispatch");
    std::vector<int64_t> start(n_experts + 1, 0);
    for (int64_t i = 0; i < T * k; ++i) {
        ++start[e[i] + 1];
    }
    for (int64_t x = 0; x < n_experts; ++x) {
        start[x + 1] += start[x];
    }
    Dispatch d;
    d.tokens.resize(T * k);
    d.slots.resize(T * k);
    std::vector<int64_t> next(start.begin(), start.end() - 1);
    for (int64_t i = 0; i < T * k; ++i) {  // i = token·k + slot: tokens come out ascending per expert
        const int64_t row = next[e[i]]++;
        d.tokens[row] = i / k;
        d.slots[row] = i;
    }
    for (int64_t x = 0; x < n_experts; ++x) {
        if (start[x + 1] > start[x]) {
            d.groups.push_back({x, start[x], start[x + 1]});
        }
    }
    return d;
}

// One segment's expert LoRA in this layer, the per-expert factors unbound once (one backward node each).
struct SegmentLora {
    int64_t begin = 0, end = 0;  // token rows of the segment
    double scale = 0;
    torch::Tensor a_gate, a_up, b_down;               // shared: [R, C], [R, C], [C, R] (undefined when not trained)
    std::vector<torch::Tensor> b_gate, b_up, a_down;  // per expert: [F, R], [F, R], [R, F]
};

std::vector<SegmentLora> segment_loras(const std::vector<RowSegment> & segments, int64_t layer) {
    std::vector<SegmentLora> out;
    for (const RowSegment & s : segments) {
        SegmentLora l;
        l.begin = s.begin;
        l.end = s.end;
        const Adapter * a = s.adapter;
        if (a && a->lora_a(layer, LoraTarget::EXPERT_GATE)) {
            l.scale = a->scale;
            l.a_gate = a->lora_a(layer, LoraTarget::EXPERT_GATE)->select(0, 0);  // [1, R, C] -> [R, C]
            l.b_gate = a->lora_b(layer, LoraTarget::EXPERT_GATE)->unbind(0);
            l.a_up = a->lora_a(layer, LoraTarget::EXPERT_UP)->select(0, 0);
            l.b_up = a->lora_b(layer, LoraTarget::EXPERT_UP)->unbind(0);
            l.a_down = a->lora_a(layer, LoraTarget::EXPERT_DOWN)->unbind(0);
            l.b_down = a->lora_b(layer, LoraTarget::EXPERT_DOWN)->select(0, 0);  // [1, C, R] -> [C, R]
        }
        out.push_back(std::move(l));
    }
    return out;
}

// Rows [begin, end) of one expert's group split at the segments' token boundaries: sizes[i] rows belong to
// loras[i] (gaps between segments, if any, count as base rows).
struct Pieces {
    std::vector<int64_t> sizes;
    std::vector<const SegmentLora *> loras;  // nullptr: base rows
};

Pieces split_by_segment(const Dispatch & d, const Dispatch::Group & g, const std::vector<SegmentLora> & loras) {
    Pieces p;
    const auto first = d.tokens.begin() + g.begin, last = d.tokens.begin() + g.end;
    auto at = first;
    for (const SegmentLora & l : loras) {
        const auto lo = std::lower_bound(at, last, l.begin), hi = std::lower_bound(lo, last, l.end);
        if (lo > at) {
            p.sizes.push_back(lo - at);
            p.loras.push_back(nullptr);
        }
        p.sizes.push_back(hi - lo);
        p.loras.push_back(l.a_gate.defined() ? &l : nullptr);
        at = hi;
    }
    if (at < last) {
        p.sizes.push_back(last - at);
        p.loras.push_back(nullptr);
    }
    return p;
}

bool any_lora(const Pieces & p) {
    return std::any_of(p.loras.begin(), p.loras.end(), [](const SegmentLora * l) { return l != nullptr; });
}

// y [n, F] + each piece's scale·(h·Aᵀ)·B_eᵀ (zeros for base rows), h [n, C].
torch::Tensor add_up_lora(const torch::Tensor & y, const std::vector<torch::Tensor> & h_parts, const Pieces & p,
                          int64_t expert, bool gate) {
    std::vector<torch::Tensor> deltas;
    for (size_t i = 0; i < p.sizes.size(); ++i) {
        const SegmentLora * l = p.loras[i];
        if (!l) {
            deltas.push_back(torch::zeros({p.sizes[i], y.size(1)}, y.options()));
            continue;
        }
        const torch::Tensor & a = gate ? l->a_gate : l->a_up;
        const torch::Tensor & b = gate ? l->b_gate[expert] : l->b_up[expert];
        torch::Tensor u = torch::matmul(h_parts[i].to(a.scalar_type()), a.t());  // [n_i, R]
        deltas.push_back((torch::matmul(u, b.t()) * l->scale).to(y.scalar_type()));
    }
    return y + torch::cat(deltas, 0);
}

// Per segment with down LoRA: the weighted u = act·A_eᵀ of every routed row, and the segment-local token of
// each, summed over experts after the loop (B is shared, so the delta is scale·(Σ_e w·act·A_eᵀ)·Bᵀ).
using DownParts = std::map<const SegmentLora *, std::pair<std::vector<torch::Tensor>, std::vector<torch::Tensor>>>;

void collect_down_lora(DownParts & parts, const std::vector<torch::Tensor> & act_parts,
                       const std::vector<torch::Tensor> & w_parts, const std::vector<torch::Tensor> & token_parts,
                       const Pieces & p, int64_t expert) {
    for (size_t i = 0; i < p.sizes.size(); ++i) {
        const SegmentLora * l = p.loras[i];
        if (!l || p.sizes[i] == 0) {
            continue;
        }
        const torch::Tensor & a = l->a_down[expert];                               // [R, F]
        torch::Tensor u = torch::matmul(act_parts[i].to(a.scalar_type()), a.t());  // [n_i, R]
        parts[l].first.push_back(u * w_parts[i].unsqueeze(1).to(u.scalar_type()));
        parts[l].second.push_back(token_parts[i] - l->begin);
    }
}

torch::Tensor add_down_lora(const torch::Tensor & y, const DownParts & parts, const std::vector<SegmentLora> & loras) {
    if (parts.empty()) {
        return y;
    }
    std::vector<torch::Tensor> deltas;
    for (const SegmentLora & l : loras) {
        auto it = parts.find(&l);
        if (it == parts.end()) {
            deltas.push_back(torch::zeros({l.end - l.begin, y.size(1)}, y.options()));
            continue;
        }
        torch::Tensor u = torch::cat(it->second.first, 0);  // [rows, R]
        torch::Tensor z = torch::zeros({l.end - l.begin, u.size(1)}, u.options())
                              .index_add(0, torch::cat(it->second.second, 0), u);  // [n_s, R]
        deltas.push_back((torch::matmul(z, l.b_down.t()) * l.scale).to(y.scalar_type()));
    }
    return y + torch::cat(deltas, 0);
}

// y [T, C] + sigmoid(x·gᵀ) · shared_expert(x) (Qwen3.5-MoE, transformers' order: routed + shared), the
// shared expert's LoRA on SHARED_GATE / SHARED_UP / SHARED_DOWN; y itself without a shared expert.
torch::Tensor add_shared_expert(const torch::Tensor & y, const LayerWeights & w, const torch::Tensor & x,
                                const std::vector<RowSegment> & segments, int64_t layer) {
    if (!w.shared_expert_gate.defined()) {
        return y;
    }
    const torch::Tensor shared =
        swiglu_mlp(x, w, segments, layer, {LoraTarget::SHARED_GATE, LoraTarget::SHARED_UP, LoraTarget::SHARED_DOWN});
    const torch::Tensor gate = torch::sigmoid(kernels::gate_linear(x, w.shared_expert_gate));  // [T, 1]
    return y + gate * shared;
}

// The grouped quantised path (kernels::quantised_moe_forward) applies: experts kept quantised as the GGUF
// stacks them, few tokens (decode), no expert LoRA in any segment, and no gradient to carry back through x;
// TINKERD_GROUPED_MOE=0 turns it off (benchmarks' A/B).
bool grouped_quantised(const LayerWeights & w, const torch::Tensor & x, const std::vector<SegmentLora> & loras) {
    static const bool off =
        std::getenv("TINKERD_GROUPED_MOE") && std::string(std::getenv("TINKERD_GROUPED_MOE")) == "0";
    if (off || !w.experts_gate.defined() || !kernels::is_quantised(w.experts_gate) ||
        !kernels::is_quantised(w.experts_up) || !kernels::is_quantised(w.experts_down) || !x.device().is_cpu() ||
        x.size(0) > kernels::kGroupedMoeMaxTokens) {
        return false;
    }
    if (torch::GradMode::is_enabled() && x.requires_grad()) {
        return false;
    }
    return std::none_of(loras.begin(), loras.end(), [](const SegmentLora & l) { return l.a_gate.defined(); });
}

}  // namespace

torch::Tensor moe_forward(const LayerWeights & w, const model::ModelConfig & c, const torch::Tensor & x,
                          const std::vector<RowSegment> & segments, int64_t layer) {
    const int64_t T = x.size(0), F = c.moe_intermediate_size;
    if (T == 0) {
        return torch::zeros_like(x);  // [0, C]
    }
    const Routing routing = route_tokens(x, w.router, c.n_experts_per_token, c.norm_topk_prob);
    const std::vector<SegmentLora> loras = segment_loras(segments, layer);
    if (grouped_quantised(w, x, loras)) {
        const torch::Tensor y = kernels::quantised_moe_forward(x, w.experts_gate, w.experts_up, w.experts_down,
                                                               routing.experts, routing.weights);  // [T, C]
        return add_shared_expert(y, w, x, segments, layer);
    }
    const Dispatch d = dispatch(routing.experts, c.n_experts);
    const auto index_options = torch::TensorOptions().dtype(torch::kInt64);
    const torch::Tensor rows = torch::tensor(d.tokens, index_options).to(x.device());  // [T·k]
    const torch::Tensor slots = torch::tensor(d.slots, index_options).to(x.device());  // [T·k]
    std::vector<int64_t> group_sizes;
    for (const auto & g : d.groups) {
        group_sizes.push_back(g.end - g.begin);
    }
    // split (not narrow): the backward of each gather is one cat, not a zero-filled tensor per expert.
    const auto x_groups = x.index_select(0, rows).split_with_sizes(group_sizes, 0);  // [n_e, C]
    const auto w_groups =
        routing.weights.reshape({-1}).index_select(0, slots).split_with_sizes(group_sizes, 0);  // [n_e]
    const auto token_groups = rows.split_with_sizes(group_sizes, 0);
    DownParts down_parts;
    std::vector<torch::Tensor> outs;  // [n_e, C] per expert, weighted
    for (size_t i = 0; i < d.groups.size(); ++i) {
        const int64_t e = d.groups[i].expert;
        const Pieces p = split_by_segment(d, d.groups[i], loras);
        const bool lora = any_lora(p);
        const torch::Tensor & h = x_groups[i];
        auto gate_up = w.experts_gate_up.defined()
                           ? kernels::base_linear(h, w.experts_gate_up[e]).split(F, 1)  // [n_e, F] each
                           : std::vector<torch::Tensor>{kernels::base_linear(h, w.experts_gate[e]),
                                                        kernels::base_linear(h, w.experts_up[e])};
        torch::Tensor gate = gate_up[0], up = gate_up[1];
        std::vector<torch::Tensor> h_parts, act_parts, w_parts, token_parts;
        if (lora) {
            h_parts = h.split_with_sizes(p.sizes, 0);
            gate = add_up_lora(gate, h_parts, p, e, true);
            up = add_up_lora(up, h_parts, p, e, false);
        }
        torch::Tensor act = fused_swiglu(gate, up);  // [n_e, F]
        outs.push_back(kernels::base_linear(act, w.experts_down[e]) * w_groups[i].unsqueeze(1).to(act.scalar_type()));
        if (lora) {
            collect_down_lora(down_parts, act.split_with_sizes(p.sizes, 0), w_groups[i].split_with_sizes(p.sizes, 0),
                              token_groups[i].split_with_sizes(p.sizes, 0), p, e);
        }
    }
    // One index_add over the rows in expert order: each token's experts are summed in ascending order.
    torch::Tensor y = torch::zeros({T, x.size(1)}, x.options()).index_add(0, rows, torch::cat(outs, 0));  // [T, C]
    return add_shared_expert(add_down_lora(y, down_parts, loras), w, x, segments, layer);
}

}  // namespace tinkerd::engine
