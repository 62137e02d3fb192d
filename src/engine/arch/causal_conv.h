// The Gated DeltaNet's depthwise causal conv + SiLU (delta_rule.h's causal_conv1d_silu) as one differentiable
// function on the CPU kernels of kernels/causal_conv.h: one pass forward, three in the backward, instead of the
// tensor-op form's dozen [T, Cc] temporaries.
#pragma once

#include <torch/torch.h>

#include "engine/attention.h"

namespace tinkerd::engine {

// Whether fused_causal_conv1d_silu takes these: CPU tensors, x and weight both fp32 or both fp64.
bool fused_causal_conv_applies(const torch::Tensor & x, const torch::Tensor & weight);

// causal_conv1d_silu's values by the kernels: x [T, Cc], weight [Cc, K] -> [T, Cc]; differentiable by autograd in
// x and weight (the backward recomputes the pre-activation rather than keeping it).
torch::Tensor fused_causal_conv1d_silu(const torch::Tensor & x, const torch::Tensor & weight,
                                       const SequenceLayout & layout);

}  // namespace tinkerd::engine
