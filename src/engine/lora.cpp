// LoRA adapters: construction, PEFT naming and the segmented LoRA linear.
#include "engine/lora.h"

#include <cmath>
#include <cstring>
#include <sys/mman.h>
#include <unistd.h>

#include <ATen/CPUGeneratorImpl.h>

#include "engine/host_access.h"
#include "engine/kernels/matmul.h"
#include "engine/lora_rows.h"

namespace tinkerd::engine {

// Plans every targeted pair in parameter order (model::lora_pairs) and sets the index fields; returns the
// offset of each pair's A in the flat buffers (B follows A).
static std::vector<int64_t> plan_pairs(Adapter & a, const std::vector<model::LoraPair> & pairs,
                                       const model::ModelConfig & config) {
    std::vector<int64_t> offsets;
    int64_t offset = 0;
    a.layer_index.assign(config.n_layers, {});
    for (auto & targets : a.layer_index) {
        targets.fill(-1);
    }
    for (const model::LoraPair & pair : pairs) {
        const int index = static_cast<int>(2 * offsets.size());
        if (pair.target == LoraTarget::LM_HEAD) {
            a.lm_head_index = index;
        } else {
            a.layer_index[pair.layer][static_cast<int>(pair.target)] = index;
        }
        offsets.push_back(offset);
        offset += pair.size();
    }
    return offsets;
}

static int64_t numel_of(const std::vector<int64_t> & shape) {
    int64_t n = 1;
    for (int64_t d : shape) {
        n *= d;
    }
    return n;
}

// The view of the given shape at offset of a flat buffer.
static torch::Tensor view_of(const torch::Tensor & flat, int64_t offset, const std::vector<int64_t> & shape) {
    return flat.narrow(0, offset, numel_of(shape)).view(shape);
}

// Adds the A/B views of one planned pair to every list; A is drawn from gen, B stays zero.
static void add_pair(Adapter & a, const model::LoraPair & pair, int64_t offset, at::Generator & gen) {
    const double bound = 1.0 / std::sqrt(static_cast<double>(pair.fan_in));
    for (int is_b = 0; is_b < 2; ++is_b) {
        const std::vector<int64_t> & shape = is_b ? pair.b_shape : pair.a_shape;
        a.names.push_back(peft_key(pair.layer, pair.target, is_b == 1));
        a.grads.push_back(view_of(a.flat_grads, offset, shape));
        a.exp_avg.push_back(view_of(a.flat_exp_avg, offset, shape));
        a.exp_avg_sq.push_back(view_of(a.flat_exp_avg_sq, offset, shape));
        torch::Tensor p = view_of(a.flat_params, offset, shape);
        if (is_b == 0) {
            p.copy_(torch::rand(shape, gen, torch::kFloat64) * (2 * bound) - bound);
        }
        a.params.push_back(p.set_requires_grad(true));  // a leaf: flat_params itself never requires grad
        offset += numel_of(shape);
    }
}

void zero_releasing(torch::Tensor & flat) {
    if (!flat.device().is_cpu() || flat.nbytes() < 2 * static_cast<size_t>(::sysconf(_SC_PAGESIZE))) {
        flat.zero_();
        return;
    }
    const auto page = static_cast<uintptr_t>(::sysconf(_SC_PAGESIZE));
    auto * begin = static_cast<uint8_t *>(host_bytes(flat, "zero_releasing"));
    uint8_t * end = begin + flat.nbytes();
    auto * first = reinterpret_cast<uint8_t *>((reinterpret_cast<uintptr_t>(begin) + page - 1) / page * page);
    auto * last = reinterpret_cast<uint8_t *>(reinterpret_cast<uintptr_t>(end) / page * page);
    // Whole pages of a private anonymous buffer (torch's CPU allocations) read as zeros after MADV_DONTNEED.
    if (::madvise(first, static_cast<size_t>(last - first), MADV_DONTNEED) != 0) {
        flat.zero_();
        return;
    }
    std::memset(begin, 0, static_cast<size_t>(first - begin));
    std::memset(last, 0, static_cast<size_t>(end - last));
    flat.unsafeGetTensorImpl()->bump_version();  // torch did not see these writes
}

Adapter make_adapter(AdapterId id, const LoraSpec & spec, const model::ModelConfig & config, torch::ScalarType dtype,
                     torch::Device device, uint64_t seed) {
    Adapter a;
    a.id = id;
    a.spec = spec;
    a.scale = spec.alpha / static_cast<double>(spec.rank);
    const model::LoraSelection selection{spec.train_attn, spec.train_mlp, spec.train_unembed};
    const std::vector<model::LoraPair> pairs = model::lora_pairs(config, selection, spec.rank);
    const std::vector<int64_t> offsets = plan_pairs(a, pairs, config);
    const int64_t total = model::lora_parameter_count(config, selection, spec.rank);  // [N] parameters in all
    auto options = torch::TensorOptions().dtype(dtype).device(device);
    for (torch::Tensor * flat : {&a.flat_params, &a.flat_grads, &a.flat_exp_avg, &a.flat_exp_avg_sq}) {
        *flat = torch::empty({total}, options);  // [N]
        zero_releasing(*flat);  // a sampler's adapter never writes its gradients or moments: they take no memory
    }
    auto gen = at::detail::createCPUGenerator(seed);
    for (size_t i = 0; i < pairs.size(); ++i) {
        add_pair(a, pairs[i], offsets[i], gen);
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
