// The Tinker losses (cross_entropy, importance_sampling, ppo, cispo, dro, and SDK 0.38's gspo and
// stable_reinforce) over target-token logprobs, with the validation of their names, config keys and
// per-datum inputs. All are sums. docs/sdk-0.38.md states the two new objectives and their defaults.
#pragma once

#include <map>
#include <string>

#include <torch/torch.h>

#include "engine/engine.h"

namespace tinkerd::engine {

enum class LossKind { CROSS_ENTROPY, IMPORTANCE_SAMPLING, PPO, CISPO, DRO, GSPO, STABLE_REINFORCE };

struct LossConfig {
    LossKind kind = LossKind::CROSS_ENTROPY;
    double clip_low = 0.0;   // ppo and gspo 0.8, cispo 0.0
    double clip_high = 0.0;  // ppo and gspo 1.2, cispo 4.0, stable_reinforce 2.0 (the truncation)
    double beta = 0.1;       // dro
    double kl_coeff = 0.0;   // stable_reinforce
};

// Unknown loss name or config key -> INVALID_ARGUMENT naming it.
Result<LossConfig> parse_loss(const std::string & name, const std::map<std::string, double> & config);

// Checks a datum's loss inputs: required and allowed keys, dtypes, shapes ([N] or [N,K] targets;
// the rest the shape of target_tokens), target ids in [0, vocab), finite float values.
Result<void> validate_loss_inputs(const LossConfig & loss, const Datum & datum, int64_t vocab_size);

// The datum's loss (a 0-dim tensor). lp [N] or [N,K] target logprobs (requires grad when training);
// inputs are the datum's loss_fn_inputs as tensors in lp's dtype and device.
torch::Tensor datum_loss(const LossConfig & loss, const torch::Tensor & lp,
                         const std::map<std::string, torch::Tensor> & inputs);

}  // namespace tinkerd::engine
