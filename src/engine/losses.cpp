// Tinker loss functions and their input validation (see losses.h and design.md §3).
#include "engine/losses.h"

#include <cmath>
#include <set>

#include "engine/weights.h"

namespace tinkerd::engine {

static const std::map<std::string, LossKind> & loss_names() {
    static const std::map<std::string, LossKind> names = {{"cross_entropy", LossKind::CROSS_ENTROPY},
                                                          {"importance_sampling", LossKind::IMPORTANCE_SAMPLING},
                                                          {"ppo", LossKind::PPO},
                                                          {"cispo", LossKind::CISPO},
                                                          {"dro", LossKind::DRO}};
    return names;
}

static std::set<std::string> allowed_config_keys(LossKind kind) {
    switch (kind) {
        case LossKind::PPO:
        case LossKind::CISPO:
            return {"clip_low_threshold", "clip_high_threshold"};
        case LossKind::DRO:
            return {"beta"};
        default:
            return {};
    }
}

Result<LossConfig> parse_loss(const std::string & name, const std::map<std::string, double> & config) {
    auto it = loss_names().find(name);
    if (it == loss_names().end()) {
        return invalid_argument("unknown loss_fn '" + name +
                                "' (supported: cross_entropy, importance_sampling, ppo, cispo, dro)");
    }
    LossConfig loss;
    loss.kind = it->second;
    loss.clip_low = loss.kind == LossKind::PPO ? 0.8 : 0.0;
    loss.clip_high = loss.kind == LossKind::PPO ? 1.2 : 4.0;
    const auto allowed = allowed_config_keys(loss.kind);
    for (const auto & [key, value] : config) {
        if (!allowed.count(key)) {
            return invalid_argument("loss_fn_config key '" + key + "' is not accepted by loss_fn '" + name + "'");
        }
        if (!std::isfinite(value)) {
            return invalid_argument("loss_fn_config key '" + key + "' must be finite");
        }
        if (key == "clip_low_threshold")
            loss.clip_low = value;
        if (key == "clip_high_threshold")
            loss.clip_high = value;
        if (key == "beta")
            loss.beta = value;
    }
    if (loss.clip_low > loss.clip_high) {
        return invalid_argument("loss_fn_config: clip_low_threshold must not exceed clip_high_threshold");
    }
    return loss;
}

static Result<void> check_float_input(const std::string & key, const HostTensor & t,
                                      const std::vector<int64_t> & expected_shape) {
    if (t.dtype != model::DType::F32 && t.dtype != model::DType::F64) {
        return invalid_argument("loss_fn_inputs['" + key + "'] must be float32, got " + model::dtype_name(t.dtype));
    }
    if (t.shape != expected_shape) {
        return invalid_argument("loss_fn_inputs['" + key + "'] has shape " + shape_string(t.shape) + ", expected " +
                                shape_string(expected_shape) + " (the shape of target_tokens)");
    }
    for (double x : host_tensor_values(t)) {
        if (!std::isfinite(x)) {
            return invalid_argument("loss_fn_inputs['" + key + "'] contains a non-finite value");
        }
    }
    return {};
}

static Result<void> check_targets(const HostTensor & t, int64_t n_tokens, bool allow_2d, int64_t vocab_size) {
    if (t.dtype != model::DType::I64 && t.dtype != model::DType::I32) {
        return invalid_argument(std::string("loss_fn_inputs['target_tokens'] must be int64, got ") +
                                model::dtype_name(t.dtype));
    }
    const bool shape_ok = (t.shape.size() == 1 || (allow_2d && t.shape.size() == 2)) && t.shape[0] == n_tokens;
    if (!shape_ok) {
        return invalid_argument("loss_fn_inputs['target_tokens'] has shape " + shape_string(t.shape) + ", expected [" +
                                std::to_string(n_tokens) + "]" +
                                (allow_2d ? " or [" + std::to_string(n_tokens) + ",K]" : "") +
                                " (one row per input token)");
    }
    for (double id : host_tensor_values(t)) {
        if (id < 0 || id >= static_cast<double>(vocab_size)) {
            return invalid_argument("loss_fn_inputs['target_tokens'] holds token id " +
                                    std::to_string(static_cast<int64_t>(id)) + " outside the vocabulary [0, " +
                                    std::to_string(vocab_size) + ")");
        }
    }
    return {};
}

Result<void> validate_loss_inputs(const LossConfig & loss, const Datum & datum, int64_t vocab_size) {
    const bool is_ce = loss.kind == LossKind::CROSS_ENTROPY;
    const std::set<std::string> allowed = is_ce ? std::set<std::string>{"target_tokens", "weights"}
                                                : std::set<std::string>{"target_tokens", "logprobs", "advantages"};
    for (const auto & [key, value] : datum.loss_inputs) {
        if (!allowed.count(key)) {
            return invalid_argument("loss_fn_inputs key '" + key + "' is not used by this loss_fn");
        }
    }
    for (const std::string & key : allowed) {
        if (!datum.loss_inputs.count(key) && !(is_ce && key == "weights")) {
            return invalid_argument("loss_fn_inputs is missing '" + key + "'");
        }
    }
    const HostTensor & targets = datum.loss_inputs.at("target_tokens");
    TRY_STATUS(check_targets(targets, static_cast<int64_t>(datum.tokens.size()), is_ce, vocab_size));
    for (const auto & [key, value] : datum.loss_inputs) {
        if (key != "target_tokens") {
            TRY_STATUS(check_float_input(key, value, targets.shape));
        }
    }
    return {};
}

torch::Tensor datum_loss(const LossConfig & loss, const torch::Tensor & lp,
                         const std::map<std::string, torch::Tensor> & in) {
    if (loss.kind == LossKind::CROSS_ENTROPY) {
        auto w = in.find("weights");
        return w == in.end() ? -lp.sum() : -(lp * w->second).sum();
    }
    const torch::Tensor & q = in.at("logprobs");      // sampler logprobs [N]
    const torch::Tensor & adv = in.at("advantages");  // [N]
    torch::Tensor ratio = torch::exp(lp - q);
    switch (loss.kind) {
        case LossKind::IMPORTANCE_SAMPLING:
            return -(ratio * adv).sum();
        case LossKind::PPO: {
            torch::Tensor clipped = torch::clamp(ratio, loss.clip_low, loss.clip_high);
            return -torch::min(ratio * adv, clipped * adv).sum();
        }
        case LossKind::CISPO: {
            torch::Tensor weight = torch::clamp(ratio, loss.clip_low, loss.clip_high).detach();
            return -(weight * lp * adv).sum();
        }
        case LossKind::DRO:
            return -(lp * adv - 0.5 * loss.beta * (lp - q).pow(2)).sum();
        default:
            break;
    }
    return lp.sum() * 0;
}

}  // namespace tinkerd::engine
