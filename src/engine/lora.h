// LoRA adapters: per-adapter A/B matrices for each targeted projection, their accumulated gradients
// and AdamW moments, PEFT key names, and the row-segmented LoRA linear used by the transformer.
// Semantics per row r of adapter a: y[r] = x[r]·Wᵀ + (alpha/R)·(x[r]·A_aᵀ)·B_aᵀ.
#pragma once

#include <array>
#include <string>
#include <vector>

#include <torch/torch.h>

#include "engine/engine.h"
#include "model/lora_layout.h"

namespace tinkerd::engine {

using model::lora_target_name;  // "q_proj", ..., "lm_head"
using model::LoraTarget;
using model::N_LAYER_TARGETS;
using model::peft_key;  // PEFT key of a target's A or B (model/lora_layout.h)
using model::projection_shape;
using model::ProjectionShape;

struct Adapter {
    AdapterId id = BASE_MODEL;
    LoraSpec spec;
    double scale = 1.0;              // alpha / rank
    std::vector<std::string> names;  // PEFT keys, one per parameter, A then B per projection
    // params[i], grads[i], exp_avg[i], exp_avg_sq[i] are views into the flat buffers below (same offsets):
    // write them in place (copy_, add_, zero_); assigning a new tensor to a slot detaches it from its buffer.
    // leaves with requires_grad; A [R, in], B [out, R]; experts as in model::LoraPair (3-D per-expert factors)
    std::vector<torch::Tensor> params;
    std::vector<torch::Tensor> grads;                // accumulated gradients, same shapes
    std::vector<torch::Tensor> exp_avg, exp_avg_sq;  // AdamW moments
    torch::Tensor flat_params, flat_grads;           // [N] every parameter / gradient back to back
    torch::Tensor flat_exp_avg, flat_exp_avg_sq;     // [N] the moments, same layout
    int64_t step = 0;                                // AdamW steps taken
    // What the last accepted CPU AdamW step left: the largest |parameter|, |exp_avg| and exp_avg_sq, valid while
    // the three flat buffers' version counters are as recorded (any torch write to them or their views moves
    // them). adamw_step skips its checking pass when these bound the next values far from overflow.
    struct StepBounds {
        bool known = false;
        double param = 0, exp_avg = 0, exp_avg_sq = 0;
        std::array<int64_t, 3> versions{};
    } step_bounds;
    int64_t checked_steps = 0;  // CPU AdamW steps that needed the checking pass (no usable step_bounds)
    // After a CPU optim_step the gradient reads as zero but its memory still holds the consumed values (not
    // rewritten: one pass over N values fewer per step), while flat_grads' version is still `consumed_version`
    // (-1: never; any write to the gradient moves the version and ends it). The next accumulation writes instead
    // of adding; every other reader calls settle_gradient (grad_accumulate.h) first.
    int64_t consumed_version = -1;
    // Σ g² of the flat gradient, computed by the CPU accumulation that last wrote it (optim_step's norm without
    // a pass of its own); trusted while flat_grads' version counter is `version`.
    struct GradientSquares {
        bool known = false;
        double sum = 0;
        int64_t version = 0;
    } gradient_squares;
    // index of A in params for [layer][target]; -1 = not targeted. B is at index + 1.
    std::vector<std::array<int, N_LAYER_TARGETS>> layer_index;
    int lm_head_index = -1;

    const torch::Tensor * lora_a(int64_t layer, LoraTarget target) const;  // nullptr when absent
    const torch::Tensor * lora_b(int64_t layer, LoraTarget target) const;
};

// Zeroes a flat buffer; on the CPU its whole pages are handed back to the kernel (MADV_DONTNEED: they read as
// zeros and take no memory until written again), so untouched gradients and moments cost nothing resident.
void zero_releasing(torch::Tensor & flat);

// Builds an adapter: A kaiming-uniform (bound 1/sqrt(in), as PEFT), B zero, moments zero; every
// per-parameter tensor a view into its flat buffer.
Adapter make_adapter(AdapterId id, const LoraSpec & spec, const model::ModelConfig & config, torch::ScalarType dtype,
                     torch::Device device, uint64_t seed);

// Contiguous rows of the packed batch that share one adapter (nullptr = bare base model).
struct RowSegment {
    int64_t begin = 0;
    int64_t end = 0;
    const Adapter * adapter = nullptr;
};

// y + each segment's LoRA delta for (layer, target): y [T, out] and x [T, in] in the act dtype.
// Returns y itself when no segment's adapter targets this projection; without autograd (sampling) the
// delta may be added to y in place.
torch::Tensor add_lora(const torch::Tensor & y, const torch::Tensor & x, const std::vector<RowSegment> & segments,
                       int64_t layer, LoraTarget target);

// add_lora for several projections of the same input x (q, k, v; gate, up): per segment, their A matrices
// run as one product (add_lora is the one-target case). ys[i] [T, out_i] belongs to targets[i].
std::vector<torch::Tensor> add_lora_shared_input(std::vector<torch::Tensor> ys, const torch::Tensor & x,
                                                 const std::vector<RowSegment> & segments, int64_t layer,
                                                 const std::vector<LoraTarget> & targets);

// y = x·Wᵀ (+ bias) with each segment's LoRA delta added. x [T, in] act dtype; w [out, in] compute
// dtype; returns [T, out] in the act dtype. layer = -1 selects the lm_head target.
torch::Tensor lora_linear(const torch::Tensor & x, const torch::Tensor & w, const torch::Tensor & bias,
                          const std::vector<RowSegment> & segments, int64_t layer, LoraTarget target);

}  // namespace tinkerd::engine
