// AdamW and gradient clipping over an adapter's parameters (see optimizer.h).
#include "engine/optimizer.h"

#include <cmath>

namespace tinkerd::engine {

Result<void> validate_adam_params(const AdamParams & p) {
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
    if (p.beta1 >= 1 || p.beta2 >= 1) {
        return invalid_argument("adam_params.beta1 and beta2 must be < 1");
    }
    return {};
}

// Global L2 norm of all gradients, then scale them by min(1, max_norm / (norm + 1e-6)) when clipping.
static double clip_gradients(std::vector<torch::Tensor> & grads, double max_norm) {
    if (grads.empty()) {
        return 0.0;
    }
    std::vector<torch::Tensor> norms;
    norms.reserve(grads.size());
    for (const auto & g : grads) {
        norms.push_back(torch::norm(g, 2));
    }
    torch::Tensor total = torch::norm(torch::stack(norms), 2);
    if (max_norm > 0) {
        torch::Tensor coef = torch::clamp_max(max_norm / (total + 1e-6), 1.0);
        for (auto & g : grads) {
            g.mul_(coef);
        }
    }
    return total.item<double>();
}

double adamw_step(Adapter & a, const AdamParams & p) {
    torch::NoGradGuard no_grad;
    const double norm = clip_gradients(a.grads, p.grad_clip_norm);
    a.step += 1;
    const double step = static_cast<double>(a.step);
    const double bias_correction1 = 1.0 - std::pow(p.beta1, step);
    const double bias_correction2_sqrt = std::sqrt(1.0 - std::pow(p.beta2, step));
    const double step_size = p.learning_rate / bias_correction1;
    for (size_t i = 0; i < a.params.size(); ++i) {
        torch::Tensor & param = a.params[i];
        const torch::Tensor & grad = a.grads[i];
        param.mul_(1.0 - p.learning_rate * p.weight_decay);
        a.exp_avg[i].mul_(p.beta1).add_(grad, 1.0 - p.beta1);
        a.exp_avg_sq[i].mul_(p.beta2).addcmul_(grad, grad, 1.0 - p.beta2);
        torch::Tensor denom = (a.exp_avg_sq[i].sqrt() / bias_correction2_sqrt).add_(p.eps);
        param.addcdiv_(a.exp_avg[i], denom, -step_size);
    }
    for (auto & g : a.grads) {
        g.zero_();
    }
    return norm;
}

}  // namespace tinkerd::engine
