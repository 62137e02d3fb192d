// The routed experts of one MoE layer in few calls when the experts are kept quantised and no gradient is
// needed (decode, prefill without training): every (token, expert) pair of the layer is multiplied by the
// same fused kernels as quantised_forward, in one parallel region for gate and up over experts × row
// ranges and one for down, with no per-expert torch ops. For T < 16 tokens (each expert's rows then take
// quantised_forward's fused kernels too) results equal the per-expert path's bit for bit.
#pragma once

#include <torch/torch.h>

namespace tinkerd::engine::kernels {

constexpr int64_t kGroupedMoeMaxTokens = 15;  // moe_forward's limit for this path

// y [T, C] = Σ_slot weights[t, slot] · down_e(silu(gate_e(x_t)) · up_e(x_t)), e = experts[t, slot], summed
// over each token's experts in ascending expert order. x [T, C] fp32; experts [T, k] int64, weights [T, k]
// (any float dtype); gate, up [E, F, C / blk, bb] and down [E, C, F / blk, bb] quantised.
torch::Tensor quantised_moe_forward(const torch::Tensor & x, const torch::Tensor & gate, const torch::Tensor & up,
                                    const torch::Tensor & down, const torch::Tensor & experts,
                                    const torch::Tensor & weights);

}  // namespace tinkerd::engine::kernels
