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
                                                          {"dro", LossKind::DRO},
                                                          {"gspo", LossKind::GSPO},
                                                          {"stable_reinforce", LossKind::STABLE_REINFORCE}};
    return names;
}

static std::set<std::string> allowed_config_keys(LossKind kind) {
    switch (kind) {
        case LossKind::PPO:
        case LossKind::CISPO:
        case LossKind::GSPO:
            return {"clip_low_threshold", "clip_high_threshold"};
        case LossKind::STABLE_REINFORCE:
            return {"clip_high_threshold", "kl_coeff"};
        case LossKind::DRO:
            return {"beta"};
        default:
            return {};
    }
}

Result<LossConfig> parse_loss(const std::string & name, const std::map<std::string, double> & config) {
    auto it = loss_names().find(name);
    if (it == loss_names().end()) {
        return invalid_argument(
            "unknown loss_fn '" + name +
            "' (supported: cross_entropy, importance_sampling, ppo, cispo, dro, gspo, stable_reinforce)");
    }
    LossConfig loss;
    loss.kind = it->second;
    const bool ppo_like = loss.kind == LossKind::PPO || loss.kind == LossKind::GSPO;
    loss.clip_low = ppo_like ? 0.8 : 0.0;
    loss.clip_high = ppo_like ? 1.2 : loss.kind == LossKind::STABLE_REINFORCE ? 2.0 : 4.0;
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
        if (key == "kl_coeff")
            loss.kl_coeff = value;
    }
    if (loss.kl_coeff < 0) {
        return invalid_argument("loss_fn_config: kl_coeff must be >= 0");
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

// The loss_fn_inputs keys a loss takes: required, then optional.
static std::pair<std::set<std::string>, std::set<std::string>> loss_input_keys(LossKind kind) {
    switch (kind) {
        case LossKind::CROSS_ENTROPY:
            return {{"target_tokens"}, {"weights"}};
        case LossKind::GSPO:
            return {{"target_tokens", "logprobs", "advantages", "sequence_ratio_mask"}, {}};
        case LossKind::STABLE_REINFORCE:  // the client's logprobs copy is accepted, the server's record is used
            return {{"target_tokens", "advantages", SAMPLER_RECORD_KEY}, {"logprobs"}};
        default:
            return {{"target_tokens", "logprobs", "advantages"}, {}};
    }
}

// gspo: the sequence ratio needs at least one marked token.
static Result<void> check_ratio_mask(const HostTensor & mask) {
    for (double x : host_tensor_values(mask)) {
        if (x != 0) {
            return {};
        }
    }
    return invalid_argument(
        "loss_fn_inputs['sequence_ratio_mask'] marks no tokens (gspo's sequence ratio is a "
        "mean over the marked tokens)");
}

// stable_reinforce: a target without a recorded sampler logprob (a prompt token) cannot carry an advantage.
static Result<void> check_sampler_record(const HostTensor & record, const HostTensor & advantages) {
    if (record.shape != advantages.shape) {
        return invalid_argument("the sampler record has shape " + shape_string(record.shape) +
                                ", expected the shape of target_tokens " + shape_string(advantages.shape));
    }
    const auto q = host_tensor_values(record);
    const auto a = host_tensor_values(advantages);
    for (size_t t = 0; t < q.size() && t < a.size(); ++t) {
        if (std::isnan(q[t]) && a[t] != 0) {
            return invalid_argument("loss_fn_inputs['advantages'][" + std::to_string(t) +
                                    "] is nonzero on a target that is not a sampled token (its provenance is a "
                                    "prompt span): stable_reinforce trains sampled tokens only");
        }
    }
    return {};
}

Result<void> validate_loss_inputs(const LossConfig & loss, const Datum & datum, int64_t vocab_size) {
    const auto [required, optional] = loss_input_keys(loss.kind);
    for (const auto & [key, value] : datum.loss_inputs) {
        if (!required.count(key) && !optional.count(key)) {
            return invalid_argument("loss_fn_inputs key '" + key + "' is not used by this loss_fn");
        }
    }
    for (const std::string & key : required) {
        if (key == SAMPLER_RECORD_KEY && !datum.loss_inputs.count(key)) {
            return invalid_argument(
                "stable_reinforce needs the datum's provenance: build it with Datum.with_provenance from "
                "sequences sampled with record_stability_info=True in this session");
        }
        if (!datum.loss_inputs.count(key)) {
            return invalid_argument("loss_fn_inputs is missing '" + key + "'");
        }
    }
    const HostTensor & targets = datum.loss_inputs.at("target_tokens");
    const bool is_ce = loss.kind == LossKind::CROSS_ENTROPY;
    TRY_STATUS(check_targets(targets, static_cast<int64_t>(datum.tokens.size()), is_ce, vocab_size));
    for (const auto & [key, value] : datum.loss_inputs) {
        if (key != "target_tokens" && key != SAMPLER_RECORD_KEY) {
            TRY_STATUS(check_float_input(key, value, targets.shape));
        }
    }
    if (loss.kind == LossKind::GSPO) {
        TRY_STATUS(check_ratio_mask(datum.loss_inputs.at("sequence_ratio_mask")));
    }
    if (loss.kind == LossKind::STABLE_REINFORCE) {
        TRY_STATUS(check_sampler_record(datum.loss_inputs.at(SAMPLER_RECORD_KEY), datum.loss_inputs.at("advantages")));
    }
    return {};
}

// gspo (GSPO-token): every token carries the sequence ratio s = exp(mean over the mask of sg(lp) - q) as its
// value and the gradient of its own logprob; PPO's clipped objective on it. lp, q, adv, mask [N].
static torch::Tensor gspo_loss(const LossConfig & loss, const torch::Tensor & lp,
                               const std::map<std::string, torch::Tensor> & in) {
    const torch::Tensor & q = in.at("logprobs");
    const torch::Tensor & adv = in.at("advantages");
    const torch::Tensor marked = (in.at("sequence_ratio_mask") != 0).to(lp.scalar_type());  // [N]
    const torch::Tensor frozen = lp.detach();
    const torch::Tensor log_ratio = ((frozen - q) * marked).sum() / marked.sum();  // 0-dim, no gradient
    const torch::Tensor ratio = torch::exp(log_ratio + lp - frozen);               // [N], value s
    const torch::Tensor clipped = torch::clamp(ratio, loss.clip_low, loss.clip_high);
    return -torch::min(ratio * adv, clipped * adv).sum();
}

// stable_reinforce (tinkerd's objective, docs/sdk-0.38.md): REINFORCE with the truncated importance weight
// sg(min(p/q, C)) against the server's recorded sampler logprobs q, plus kl_coeff times the k3 estimate of
// KL(q || p) on the sampled tokens. Targets without a record (NaN) add nothing.
static torch::Tensor stable_reinforce_loss(const LossConfig & loss, const torch::Tensor & lp,
                                           const std::map<std::string, torch::Tensor> & in) {
    const torch::Tensor & record = in.at(SAMPLER_RECORD_KEY);  // [N], NaN = not a sampled token
    const torch::Tensor sampled = torch::logical_not(torch::isnan(record));
    const torch::Tensor q = torch::where(sampled, record, lp.detach());  // ratio 1 where nothing was sampled
    const torch::Tensor log_ratio = lp - q;
    const torch::Tensor weight = torch::clamp_max(torch::exp(log_ratio), loss.clip_high).detach();
    const torch::Tensor adv = in.at("advantages");
    torch::Tensor total = -(weight * adv * lp).sum();
    if (loss.kl_coeff != 0) {
        const torch::Tensor k3 = torch::exp(log_ratio) - 1 - log_ratio;  // 0 where not sampled
        total = total + loss.kl_coeff * (k3 * sampled.to(lp.scalar_type())).sum();
    }
    return total;
}

torch::Tensor datum_loss(const LossConfig & loss, const torch::Tensor & lp,
                         const std::map<std::string, torch::Tensor> & in) {
    if (loss.kind == LossKind::CROSS_ENTROPY) {
        auto w = in.find("weights");
        return w == in.end() ? -lp.sum() : -(lp * w->second).sum();
    }
    if (loss.kind == LossKind::GSPO) {
        return gspo_loss(loss, lp, in);
    }
    if (loss.kind == LossKind::STABLE_REINFORCE) {
        return stable_reinforce_loss(loss, lp, in);
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
