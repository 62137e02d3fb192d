# Reference Tinker losses (all SUMS over tokens and datums, no normalisation) in float64.
# Owns: TensorData spec <-> torch conversion, target-token logprobs (1-D and 2-D targets),
# cross_entropy / importance_sampling / ppo / cispo / dro / gspo / stable_reinforce (docs/sdk-0.38.md), and the
# loss of a whole call. stable_reinforce reads the server's record of the sampler logprobs ("sampler_record").
import numpy as np
import torch

LOSS_DEFAULTS = {
    "cross_entropy": {},
    "importance_sampling": {},
    "ppo": {"clip_low_threshold": 0.8, "clip_high_threshold": 1.2},
    "cispo": {"clip_low_threshold": 0.0, "clip_high_threshold": 4.0},
    "dro": {"beta": 0.1},
    "gspo": {"clip_low_threshold": 0.8, "clip_high_threshold": 1.2},
    "stable_reinforce": {"clip_high_threshold": 2.0, "kl_coeff": 0.0},
}
RL_LOSSES = ("importance_sampling", "ppo", "cispo", "dro", "gspo", "stable_reinforce")


def spec_from_array(arr: np.ndarray, dtype: str) -> dict:
    """numpy array -> TensorData JSON dict; float32 data is rounded to fp32 first (exact in JSON)."""
    if dtype == "int64":
        data = [int(v) for v in np.asarray(arr, dtype=np.int64).ravel()]
    elif dtype == "float32":
        data = [float(v) for v in np.asarray(arr, dtype=np.float32).ravel()]
    else:
        raise ValueError(dtype)
    return {"dtype": dtype, "shape": list(np.shape(arr)), "data": data}


def tensor_from_spec(spec: dict) -> torch.Tensor:
    """TensorData JSON dict -> int64 tensor, or float64 tensor holding the exact fp32 values."""
    shape = tuple(spec["shape"])
    if spec["dtype"] == "int64":
        return torch.tensor(spec["data"], dtype=torch.int64).reshape(shape)
    arr = np.asarray(spec["data"], dtype=np.float64)
    if not np.array_equal(arr.astype(np.float32).astype(np.float64), arr):
        raise ValueError("float32 TensorData holds values that are not fp32-representable")
    return torch.from_numpy(arr).reshape(shape)


def target_logprobs(logits: torch.Tensor, targets: torch.Tensor) -> torch.Tensor:
    """logits [N, V], targets [N] or [N, K] -> lp with the shape of targets."""
    logp = torch.log_softmax(logits, dim=-1)  # [N, V]
    if targets.dim() == 1:
        return logp.gather(1, targets[:, None])[:, 0]
    return logp.gather(1, targets)  # [N, K], one column per target id


def merged_config(loss_fn: str, config: dict) -> dict:
    if loss_fn not in LOSS_DEFAULTS:
        raise ValueError(f"unknown loss_fn {loss_fn}")
    unknown = set(config or {}) - set(LOSS_DEFAULTS[loss_fn])
    if unknown:
        raise ValueError(f"unknown loss_fn_config keys {sorted(unknown)} for {loss_fn}")
    return {**LOSS_DEFAULTS[loss_fn], **(config or {})}


def datum_loss(loss_fn: str, lp: torch.Tensor, inputs: dict, cfg: dict) -> torch.Tensor:
    """lp: target logprobs [N] or [N,K]; inputs: key -> float64/int64 tensor; -> scalar loss (sum)."""
    if loss_fn == "cross_entropy":
        w = inputs.get("weights")
        w = torch.ones_like(lp) if w is None else w
        return -(w * lp).sum()
    if loss_fn == "stable_reinforce":
        return stable_reinforce_loss(lp, inputs, cfg)
    q, adv = inputs["logprobs"], inputs["advantages"]  # sampler logprobs, advantages, both [N]
    if loss_fn == "gspo":
        return gspo_loss(lp, q, adv, inputs["sequence_ratio_mask"], cfg)
    ratio = torch.exp(lp - q)
    if loss_fn == "importance_sampling":
        return -(ratio * adv).sum()
    if loss_fn == "ppo":
        lo, hi = cfg["clip_low_threshold"], cfg["clip_high_threshold"]
        unclipped, clipped = ratio * adv, ratio.clamp(lo, hi) * adv
        return -torch.minimum(unclipped, clipped).sum()
    if loss_fn == "cispo":
        lo, hi = cfg["clip_low_threshold"], cfg["clip_high_threshold"]
        return -(ratio.clamp(lo, hi).detach() * lp * adv).sum()
    if loss_fn == "dro":
        return -(lp * adv - 0.5 * cfg["beta"] * (lp - q) ** 2).sum()
    raise ValueError(loss_fn)


def gspo_loss(lp, q, adv, mask, cfg):
    """GSPO-token: value s = exp(mean over the mask of lp - q) on every token, gradient of its own lp."""
    marked = mask != 0
    log_s = (lp.detach() - q)[marked].mean()
    ratio = torch.exp(log_s + lp - lp.detach())
    clipped = ratio.clamp(cfg["clip_low_threshold"], cfg["clip_high_threshold"])
    return -torch.minimum(ratio * adv, clipped * adv).sum()


def stable_reinforce_loss(lp, inputs, cfg):
    """Truncated-IS REINFORCE against the recorded sampler logprobs, plus kl_coeff * k3(KL(q || p))."""
    q, adv = inputs["sampler_record"], inputs["advantages"]
    sampled = ~torch.isnan(q)
    log_ratio = torch.where(sampled, lp - torch.nan_to_num(q), torch.zeros_like(lp))
    weight = torch.exp(log_ratio).clamp(max=cfg["clip_high_threshold"]).detach()
    k3 = torch.exp(log_ratio) - 1 - log_ratio
    return -(weight * adv * lp).sum() + cfg["kl_coeff"] * k3.sum()


def check_datum(loss_fn: str, tokens, inputs: dict):
    """Shape checks that the engine must also enforce (mis-shaped inputs are user errors)."""
    tgt = inputs["target_tokens"]
    if tgt.shape[0] != len(tokens) or tgt.dim() not in (1, 2):
        raise ValueError(f"target_tokens shape {tuple(tgt.shape)} vs {len(tokens)} tokens")
    needed = {"gspo": ("logprobs", "advantages", "sequence_ratio_mask"),
              "stable_reinforce": ("sampler_record", "advantages")}.get(
                  loss_fn, ("logprobs", "advantages") if loss_fn in RL_LOSSES else ())
    for key in needed:
        if key not in inputs:
            raise ValueError(f"{loss_fn} needs {key}")
    if loss_fn in RL_LOSSES and tgt.dim() != 1:
        raise ValueError("RL losses take 1-D target_tokens in this reference")
    for key, t in inputs.items():
        if key != "target_tokens" and t.shape != tgt.shape:
            raise ValueError(f"{key} shape {tuple(t.shape)} != target_tokens {tuple(tgt.shape)}")


def call_loss(model, adapter, call: dict):
    """Run a call dict (case.json format) -> (loss scalar, [lp per datum], [logits per datum])."""
    cfg = merged_config(call["loss_fn"], call.get("loss_fn_config") or {})
    total = torch.zeros((), dtype=torch.float64)
    lps, all_logits = [], []
    for datum in call["datums"]:
        inputs = {k: tensor_from_spec(v) for k, v in datum["loss_inputs"].items()}
        check_datum(call["loss_fn"], datum["tokens"], inputs)
        logits = model.forward(datum["tokens"], adapter)  # [N, V]
        lp = target_logprobs(logits, inputs["target_tokens"])
        total = total + datum_loss(call["loss_fn"], lp, inputs, cfg)
        lps.append(lp)
        all_logits.append(logits)
    return total, lps, all_logits
