// AdamW hyper-parameter bounds, torch-free so the API can refuse a bad optim_step at submit (400 naming the
// field) and the engine can check again before it touches an adapter. The bounds keep every update finite
// for finite gradients; a step whose result would still be non-finite is refused by adamw_step itself.
#pragma once

#include <cmath>
#include <string>

#include "engine/engine.h"

namespace tinkerd::engine {

// The documented bounds (README, "optim_step"): 0 <= learning_rate <= MAX_LEARNING_RATE; 0 <= beta < 1;
// MIN_ADAM_EPS <= eps (a smaller eps is 0 in fp32 and 0/0 on an untouched parameter); weight_decay and
// grad_clip_norm finite and >= 0.
inline constexpr double MAX_LEARNING_RATE = 10.0;
inline constexpr double MIN_ADAM_EPS = 1e-30;

// DimuonParams: 0 <= learning_rate <= MAX_LEARNING_RATE, 0 <= beta1 < 1, damping > 0, the rest finite.
inline Result<void> validate_dimuon_params(const AdamParams & p) {
    const std::pair<const char *, double> fields[] = {{"learning_rate", p.learning_rate},
                                                      {"beta1", p.beta1},
                                                      {"grad_clip_norm", p.grad_clip_norm},
                                                      {"damping", p.damping},
                                                      {"rank_lr_correction_exponent", p.rank_lr_correction_exponent}};
    for (const auto & [name, value] : fields) {
        if (!std::isfinite(value)) {
            return invalid_argument(std::string("optimizer_params.") + name + " must be a finite number");
        }
    }
    if (p.learning_rate < 0 || p.learning_rate > MAX_LEARNING_RATE) {
        return invalid_argument("optimizer_params.learning_rate must be in [0, 10]");
    }
    if (p.beta1 < 0 || p.beta1 >= 1) {
        return invalid_argument("optimizer_params.beta1 must be in [0, 1)");
    }
    if (p.damping <= 0) {
        return invalid_argument("optimizer_params.damping must be > 0");
    }
    return {};
}

inline Result<void> validate_adam_params(const AdamParams & p) {
    if (p.kind == OptimizerKind::DIMUON) {
        return validate_dimuon_params(p);
    }
    const std::pair<const char *, double> fields[] = {{"learning_rate", p.learning_rate},
                                                      {"beta1", p.beta1},
                                                      {"beta2", p.beta2},
                                                      {"eps", p.eps},
                                                      {"weight_decay", p.weight_decay},
                                                      {"grad_clip_norm", p.grad_clip_norm}};
    for (const auto & [name, value] : fields) {
        if (!std::isfinite(value) || value < 0) {
            return invalid_argument(std::string("adam_params.") + name + " must be a finite number >= 0");
        }
    }
    if (p.learning_rate > MAX_LEARNING_RATE) {
        return invalid_argument("adam_params.learning_rate must be <= 10 (got " + std::to_string(p.learning_rate) +
                                ")");
    }
    if (p.beta1 >= 1 || p.beta2 >= 1) {
        return invalid_argument("adam_params.beta1 and beta2 must be < 1");
    }
    if (p.eps < MIN_ADAM_EPS) {
        return invalid_argument("adam_params.eps must be >= 1e-30 (0 divides zero by zero)");
    }
    return {};
}

}  // namespace tinkerd::engine
