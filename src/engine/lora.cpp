// LoRA adapters: construction, PEFT naming and the segmented LoRA linear.
#include "engine/lora.h"

#include <cmath>

#include <ATen/CPUGeneratorImpl.h>

#include "engine/kernels/matmul.h"
#include "engine/lora_rows.h"

namespace tinkerd::engine {

const char * lora_target_name(LoraTarget target) {
    static const char * names[] = {"q_proj",    "k_proj",  "v_proj",    "o_proj",
                                   "gate_proj", "up_proj", "down_proj", "lm_head"};
    return names[static_cast<int>(target)];
}

ProjectionShape projection_shape(const model::ModelConfig & c, LoraTarget target) {
    const int64_t q_dim = c.n_heads * c.head_dim;
    const int64_t kv_dim = c.n_kv_heads * c.head_dim;
    switch (target) {
        case LoraTarget::Q:
            return {c.hidden_size, q_dim};
        case LoraTarget::K:
        case LoraTarget::V:
            return {c.hidden_size, kv_dim};
        case LoraTarget::O:
            return {q_dim, c.hidden_size};
        case LoraTarget::GATE:
        case LoraTarget::UP:
            return {c.hidden_size, c.intermediate_size};
        case LoraTarget::DOWN:
            return {c.intermediate_size, c.hidden_size};
        case LoraTarget::LM_HEAD:
            return {c.hidden_size, c.vocab_size};
    }
    return {};
}

std::string peft_key(int64_t layer, LoraTarget target, bool is_b) {
    const char * suffix = is_b ? ".lora_B.weight" : ".lora_A.weight";
    if (target == LoraTarget::LM_HEAD) {
        return std::string("base_model.model.lm_head") + suffix;
    }
    const bool is_mlp = target == LoraTarget::GATE || target == LoraTarget::UP || target == LoraTarget::DOWN;
    return "base_model.model.model.layers." + std::to_string(layer) + (is_mlp ? ".mlp." : ".self_attn.") +
           lora_target_name(target) + suffix;
}

static bool is_targeted(const LoraSpec & spec, LoraTarget target) {
    switch (target) {
        case LoraTarget::Q:
        case LoraTarget::K:
        case LoraTarget::V:
        case LoraTarget::O:
            return spec.train_attn;
        case LoraTarget::GATE:
        case LoraTarget::UP:
        case LoraTarget::DOWN:
            return spec.train_mlp;
        case LoraTarget::LM_HEAD:
            return spec.train_unembed;
    }
    return false;
}

// Where one projection's A/B pair goes: its shape and the offset of A in the flat buffers (B follows A).
struct PairPlan {
    int64_t layer;
    LoraTarget target;
    ProjectionShape shape;
    int64_t offset;
};

// Plans every targeted pair in parameter order (layers, then the lm_head) and sets the index fields.
static std::vector<PairPlan> plan_pairs(Adapter & a, const model::ModelConfig & config) {
    std::vector<PairPlan> plans;
    int64_t offset = 0;
    auto add = [&](int64_t layer, LoraTarget target) {
        const ProjectionShape shape = projection_shape(config, target);
        plans.push_back({layer, target, shape, offset});
        offset += a.spec.rank * (shape.in + shape.out);
        return static_cast<int>(2 * plans.size() - 2);
    };
    a.layer_index.assign(config.n_layers, {});
    for (int64_t layer = 0; layer < config.n_layers; ++layer) {
        for (int t = 0; t < N_LAYER_TARGETS; ++t) {
            const auto target = static_cast<LoraTarget>(t);
            a.layer_index[layer][t] = is_targeted(a.spec, target) ? add(layer, target) : -1;
        }
    }
    if (is_targeted(a.spec, LoraTarget::LM_HEAD)) {
        a.lm_head_index = add(-1, LoraTarget::LM_HEAD);
    }
    return plans;
}

// The [rows, cols] view at offset of a flat buffer.
static torch::Tensor view_of(const torch::Tensor & flat, int64_t offset, int64_t rows, int64_t cols) {
    return flat.narrow(0, offset, rows * cols).view({rows, cols});
}

// Adds the A/B views of one planned pair to every list; A is drawn from gen, B stays zero.
static void add_pair(Adapter & a, const PairPlan & plan, at::Generator & gen) {
    const int64_t R = a.spec.rank;
    const double bound = 1.0 / std::sqrt(static_cast<double>(plan.shape.in));
    const std::pair<int64_t, int64_t> shapes[] = {{R, plan.shape.in}, {plan.shape.out, R}};
    int64_t offset = plan.offset;
    for (int is_b = 0; is_b < 2; ++is_b) {
        auto [rows, cols] = shapes[is_b];
        a.names.push_back(peft_key(plan.layer, plan.target, is_b == 1));
        a.grads.push_back(view_of(a.flat_grads, offset, rows, cols));
        a.exp_avg.push_back(view_of(a.flat_exp_avg, offset, rows, cols));
        a.exp_avg_sq.push_back(view_of(a.flat_exp_avg_sq, offset, rows, cols));
        torch::Tensor p = view_of(a.flat_params, offset, rows, cols);
        if (is_b == 0) {
            p.copy_(torch::rand({rows, cols}, gen, torch::kFloat64) * (2 * bound) - bound);
        }
        a.params.push_back(p.set_requires_grad(true));  // a leaf: flat_params itself never requires grad
        offset += rows * cols;
    }
}

Adapter make_adapter(AdapterId id, const LoraSpec & spec, const model::ModelConfig & config, torch::ScalarType dtype,
                     torch::Device device, uint64_t seed) {
    Adapter a;
    a.id = id;
    a.spec = spec;
    a.scale = spec.alpha / static_cast<double>(spec.rank);
    const std::vector<PairPlan> plans = plan_pairs(a, config);
    int64_t total = 0;  // [N] parameters in all
    for (const PairPlan & plan : plans) {
        total += spec.rank * (plan.shape.in + plan.shape.out);
    }
    auto options = torch::TensorOptions().dtype(dtype).device(device);
    for (torch::Tensor * flat : {&a.flat_params, &a.flat_grads, &a.flat_exp_avg, &a.flat_exp_avg_sq}) {
        *flat = torch::zeros({total}, options);  // [N]
    }
    auto gen = at::detail::createCPUGenerator(seed);
    for (const PairPlan & plan : plans) {
        add_pair(a, plan, gen);
    }
    return a;
}

static int index_of(const Adapter & a, int64_t layer, LoraTarget target) {
    if (target == LoraTarget::LM_HEAD) {
        return a.lm_head_index;
    }
    return a.layer_index[layer][static_cast<int>(target)];
}

const torch::Tensor * Adapter::lora_a(int64_t layer, LoraTarget target) const {
    const int i = index_of(*this, layer, target);
    return i < 0 ? nullptr : &params[i];
}

const torch::Tensor * Adapter::lora_b(int64_t layer, LoraTarget target) const {
    const int i = index_of(*this, layer, target);
    return i < 0 ? nullptr : &params[i + 1];
}

// y + scale·(x·Aᵀ)·Bᵀ given u = x·Aᵀ [n, R]: one addmm (the add fused into the product) when dtypes agree.
static torch::Tensor add_delta(const torch::Tensor & y, const torch::Tensor & u, const torch::Tensor & lora_b,
                               double scale) {
    if (y.scalar_type() == lora_b.scalar_type()) {
        return torch::addmm(y, u, lora_b.t(), /*beta=*/1.0, /*alpha=*/scale);  // [n, out]
    }
    return y + (torch::matmul(u, lora_b.t()) * scale).to(y.scalar_type());
}

// One segment's rows of add_lora_shared_input: one product x·[A_1; A_2; ...]ᵀ [n, ΣR] (the input's gradient
// comes from one matmul, not one per target), then one addmm per target.
static std::vector<torch::Tensor> shared_input_segment(std::vector<torch::Tensor> ys, const torch::Tensor & x,
                                                       const Adapter * a, int64_t layer,
                                                       const std::vector<LoraTarget> & targets) {
    std::vector<torch::Tensor> a_parts;  // A of each targeted projection, [R_t, in]
    std::vector<int64_t> ranks;
    std::vector<size_t> which;  // index into ys of each part
    for (size_t i = 0; i < ys.size() && a; ++i) {
        if (const torch::Tensor * lora_a = a->lora_a(layer, targets[i])) {
            a_parts.push_back(*lora_a);
            ranks.push_back(lora_a->size(0));
            which.push_back(i);
        }
    }
    if (a_parts.empty()) {
        return ys;
    }
    torch::Tensor lora_a = a_parts.size() == 1 ? a_parts[0] : torch::cat(a_parts, 0);
    torch::Tensor u = torch::matmul(x.to(lora_a.scalar_type()), lora_a.t());  // [n, ΣR]
    auto u_parts = u.split_with_sizes(ranks, 1);
    for (size_t j = 0; j < which.size(); ++j) {
        ys[which[j]] = add_delta(ys[which[j]], u_parts[j], *a->lora_b(layer, targets[which[j]]), a->scale);
    }
    return ys;
}

// Whether any segment's adapter targets one of targets in this layer.
static bool any_lora(const std::vector<RowSegment> & segments, int64_t layer, const std::vector<LoraTarget> & targets) {
    for (const RowSegment & s : segments) {
        for (LoraTarget target : targets) {
            if (s.adapter && s.adapter->lora_a(layer, target)) {
                return true;
            }
        }
    }
    return false;
}

std::vector<torch::Tensor> add_lora_shared_input(std::vector<torch::Tensor> ys, const torch::Tensor & x,
                                                 const std::vector<RowSegment> & segments, int64_t layer,
                                                 const std::vector<LoraTarget> & targets) {
    if (!any_lora(segments, layer, targets)) {
        return ys;
    }
    if (lora_rows_applicable(ys[0], x, segments)) {  // sampling: one row-wise pass per target, in place
        for (size_t i = 0; i < ys.size(); ++i) {
            add_lora_rows(ys[i], x, segments, layer, targets[i]);
        }
        return ys;
    }
    if (segments.size() == 1) {
        return shared_input_segment(std::move(ys), x, segments[0].adapter, layer, targets);
    }
    // Several adapters: the same per-segment products on each segment's rows (so a datum's numbers do not
    // depend on what shares its batch). split (not narrow): the backward is one cat, not a zero-filled
    // [T, ·] gradient per segment.
    std::vector<int64_t> sizes;
    for (const RowSegment & s : segments) {
        sizes.push_back(s.end - s.begin);
    }
    const auto x_parts = x.split_with_sizes(sizes, 0);
    std::vector<std::vector<torch::Tensor>> y_parts(ys.size());  // [target][segment]
    for (size_t i = 0; i < ys.size(); ++i) {
        y_parts[i] = ys[i].split_with_sizes(sizes, 0);
    }
    for (size_t k = 0; k < segments.size(); ++k) {
        std::vector<torch::Tensor> seg_ys;
        for (const auto & parts : y_parts) {
            seg_ys.push_back(parts[k]);
        }
        seg_ys = shared_input_segment(std::move(seg_ys), x_parts[k], segments[k].adapter, layer, targets);
        for (size_t i = 0; i < ys.size(); ++i) {
            y_parts[i][k] = seg_ys[i];
        }
    }
    for (size_t i = 0; i < ys.size(); ++i) {
        ys[i] = torch::cat(y_parts[i], 0);
    }
    return ys;
}

torch::Tensor add_lora(const torch::Tensor & y, const torch::Tensor & x, const std::vector<RowSegment> & segments,
                       int64_t layer, LoraTarget target) {
    return add_lora_shared_input({y}, x, segments, layer, {target})[0];
}

torch::Tensor lora_linear(const torch::Tensor & x, const torch::Tensor & w, const torch::Tensor & bias,
                          const std::vector<RowSegment> & segments, int64_t layer, LoraTarget target) {
    torch::Tensor y = kernels::base_linear(x, w);  // [T, out]
    if (bias.defined()) {
        y = y + bias;
    }
    return add_lora(y, x, segments, layer, target);
}

}  // namespace tinkerd::engine
