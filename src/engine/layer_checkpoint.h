// Activation checkpointing: a decoder layer run without keeping its autograd graph (only its input is saved);
// the backward runs it again with autograd on to get the gradients of the input and of the LoRA factors. A
// training step then holds one layer's activations at a time instead of every layer's, for a second forward.
#pragma once

#include <cstdint>
#include <functional>
#include <vector>

#include <torch/torch.h>

namespace tinkerd::engine {

// y = run(x), x [T, C] -> y [T, C], differentiable in x and in params (the trainable tensors run reads, which
// must include every one it uses: the others get no gradient), with nothing but x kept for the backward.
// run must compute the same function when called again (no randomness), and may outlive this call.
torch::Tensor checkpointed(std::function<torch::Tensor(const torch::Tensor &)> run, const torch::Tensor & x,
                           const std::vector<torch::Tensor> & params);

// Whether a training forward of `tokens` rows should checkpoint its layers: TINKERD_CHECKPOINT_ACTIVATIONS=1 / 0
// forces it; otherwise when the activations it would keep (activation_bytes: an estimate per token) exceed a
// quarter of the memory available now.
bool should_checkpoint(int64_t tokens, int64_t bytes_per_token);

}  // namespace tinkerd::engine
