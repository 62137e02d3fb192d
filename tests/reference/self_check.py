# Self-checks of the reference that must be able to fail (plain asserts): finite-difference LoRA
# gradients for every loss, B = 0 adapters leave logprobs unchanged, an independent numpy
# recomputation of each loss from the recorded logprobs, stories260K golden outputs, BF16 rounding
# against the shared bf16 file, and that llama3 rope scaling really changes the tiny Llama.
import dataclasses
import json
import math
import os

import numpy as np
import torch

import losses
import optim_ref
import reference_model as rm
import safetensors_io


STOP_GRADIENT_LOSSES = ("cispo", "gspo", "stable_reinforce")


def _objective(model, adapter, call, frozen_weights):
    """Loss whose gradient autograd reports. cispo, gspo and stable_reinforce hold stop-gradient factors:
    their gradient is that of -sum(w * lp) with each token's weight w frozen at the current point."""
    if call["loss_fn"] not in STOP_GRADIENT_LOSSES:
        return float(losses.call_loss(model, adapter, call)[0])
    total = 0.0
    for datum, w in zip(call["datums"], frozen_weights):
        inputs = {k: losses.tensor_from_spec(s) for k, s in datum["loss_inputs"].items()}
        lp = losses.target_logprobs(model.forward(datum["tokens"], adapter), inputs["target_tokens"])
        total += float(-(w * lp).sum())
    return total


def _token_weights(loss_fn, cfg, lp, inputs):
    """d(loss)/d(lp) negated, per token, for the stop-gradient losses (independent of losses.datum_loss)."""
    adv = inputs["advantages"]
    if loss_fn == "stable_reinforce":
        ratio = torch.exp(lp - inputs["sampler_record"])
        return ratio.clamp(max=cfg["clip_high_threshold"]) * adv - cfg["kl_coeff"] * (ratio - 1)
    ratio = torch.exp(lp - inputs["logprobs"])
    if loss_fn == "cispo":
        return ratio.clamp(cfg["clip_low_threshold"], cfg["clip_high_threshold"]) * adv
    mask = inputs["sequence_ratio_mask"] != 0  # gspo: the shared ratio s, zero where the min takes the clip
    s = torch.exp((lp - inputs["logprobs"])[mask].mean())
    lo, hi = cfg["clip_low_threshold"], cfg["clip_high_threshold"]
    clipped = ((adv > 0) & (s > hi)) | ((adv < 0) & (s < lo))
    return torch.where(clipped, torch.zeros_like(adv), s * adv)


def _frozen_weights(model, adapter, call):
    cfg = losses.merged_config(call["loss_fn"], call["loss_fn_config"])
    _, lps, _ = losses.call_loss(model, adapter, call)
    out = []
    for datum, lp in zip(call["datums"], lps):
        inputs = {k: losses.tensor_from_spec(s) for k, s in datum["loss_inputs"].items()}
        out.append(_token_weights(call["loss_fn"], cfg, lp, inputs))
    return out


def fd_check(model, adapter, call, grads, rng, n_entries=6, h=1e-5, tol=1e-6):
    """Central differences on random A and B entries vs the analytic grads; -> worst rel err."""
    ad = adapter.clone(requires_grad=False)
    with torch.no_grad():
        frozen = _frozen_weights(model, ad, call) if call["loss_fn"] in STOP_GRADIENT_LOSSES else None
        keys = sorted(ad.params)
        a_keys = [k for k in keys if k.endswith("lora_A.weight")]
        b_keys = [k for k in keys if k.endswith("lora_B.weight")]
        picks = [a_keys[i] for i in rng.choice(len(a_keys), n_entries // 2)]
        picks += [b_keys[i] for i in rng.choice(len(b_keys), n_entries - n_entries // 2)]
        gmax = max(float(g.abs().max()) for g in grads.values())
        worst = 0.0
        for key in picks:
            p = ad.params[key].view(-1)
            idx = int(rng.integers(0, p.numel()))
            orig = float(p[idx])
            p[idx] = orig + h
            up = _objective(model, ad, call, frozen)
            p[idx] = orig - h
            down = _objective(model, ad, call, frozen)
            p[idx] = orig
            fd, an = (up - down) / (2 * h), float(grads[key].view(-1)[idx])
            rel = abs(fd - an) / max(abs(fd), abs(an), 1e-3 * gmax)
            worst = max(worst, rel)
            assert rel < tol, f"FD mismatch {call['loss_fn']} {key}[{idx}]: fd {fd} analytic {an}"
    return worst


def zero_b_check(model, adapter, tokens):
    """A fresh adapter (B = 0) must give exactly the base model's logits."""
    fresh = adapter.clone(requires_grad=False)
    for k in fresh.params:
        if k.endswith("lora_B.weight"):
            fresh.params[k].zero_()
    with torch.no_grad():
        base, lora = model.forward(tokens), model.forward(tokens, fresh)
        lp_base = torch.log_softmax(base, -1)
        lp_lora = torch.log_softmax(lora, -1)
    assert torch.equal(lp_base, lp_lora), "B = 0 adapter changed the logprobs"


def numpy_loss(call, lps) -> float:
    """Per-token loop over the recorded logprobs; independent of losses.datum_loss."""
    cfg = losses.merged_config(call["loss_fn"], call["loss_fn_config"])
    total = 0.0
    for datum, lp in zip(call["datums"], lps):
        li, lp = datum["loss_inputs"], np.asarray(lp, dtype=np.float64).ravel()
        if call["loss_fn"] in ("gspo", "stable_reinforce"):
            total += _numpy_new_loss(call["loss_fn"], cfg, li, lp)
            continue
        w = li.get("weights", {"data": [1.0] * lp.size})["data"]
        q = li.get("logprobs", {"data": [0.0] * lp.size})["data"]
        a = li.get("advantages", {"data": [0.0] * lp.size})["data"]
        for t in range(lp.size):
            r = math.exp(lp[t] - q[t])
            lo, hi = cfg.get("clip_low_threshold"), cfg.get("clip_high_threshold")
            total -= {
                "cross_entropy": lambda: w[t] * lp[t],
                "importance_sampling": lambda: r * a[t],
                "ppo": lambda: min(r * a[t], min(max(r, lo), hi) * a[t]),
                "cispo": lambda: min(max(r, lo), hi) * lp[t] * a[t],
                "dro": lambda: lp[t] * a[t] - 0.5 * cfg.get("beta", 0) * (lp[t] - q[t]) ** 2,
            }[call["loss_fn"]]()
    return total


def _numpy_new_loss(loss_fn, cfg, li, lp) -> float:
    """gspo and stable_reinforce values, token by token (their gradients are checked by finite differences
    against weighted cross_entropy in the engine's gradcheck test)."""
    a = li["advantages"]["data"]
    total = 0.0
    if loss_fn == "gspo":
        q, m = li["logprobs"]["data"], li["sequence_ratio_mask"]["data"]
        marked = [t for t in range(lp.size) if m[t] != 0]
        s = math.exp(sum(lp[t] - q[t] for t in marked) / len(marked))
        lo, hi = cfg["clip_low_threshold"], cfg["clip_high_threshold"]
        for t in range(lp.size):
            total -= min(s * a[t], min(max(s, lo), hi) * a[t])
        return total
    q = li["sampler_record"]["data"]
    for t in range(lp.size):
        r = math.exp(lp[t] - q[t])
        total -= min(r, cfg["clip_high_threshold"]) * a[t] * lp[t]
        total += cfg["kl_coeff"] * (r - 1 - (lp[t] - q[t]))
    return total


def stories_check(model_dir, expected_json):
    """Greedy 8 tokens from [1] == the golden ids, and every golden prompt's first-8 logits and
    logsumexp at the last prompt position within 1e-4 (multi-token prompts exercise RoPE)."""
    model = rm.load_model(model_dir)
    with open(expected_json) as f:
        gold = json.load(f)["generation"]
    toks = list(gold["<empty prompt>"]["prompt_ids"])
    assert toks == [1], toks
    want_ids = [403, 407, 261, 378, 432, 383, 286, 261]
    assert want_ids == gold["<empty prompt>"]["greedy_48_ids"][:8], "expected.json changed?"
    with torch.no_grad():
        for _ in range(8):
            toks.append(int(model.forward(toks)[-1].argmax()))
        assert toks[1:] == want_ids, f"stories260K greedy {toks[1:]} != {want_ids}"
        worst = 0.0
        for name, g in gold.items():
            last = model.forward(g["prompt_ids"])[-1]
            ref = g["logits_at_last_prompt_position"]
            want = torch.tensor(ref["first8"], dtype=torch.float64)
            err = max(float((last[:8] - want).abs().max()),
                      abs(float(torch.logsumexp(last, 0)) - ref["logsumexp"]))
            assert err < 1e-4 and int(last.argmax()) == ref["argmax"], f"stories260K {name}: {err}"
            worst = max(worst, err)
    return worst


def bf16_check(f32_dir, bf16_dir):
    """Our RNE rounding of the f32 weights must reproduce the shared BF16 file bit for bit."""
    a, _ = safetensors_io.load(os.path.join(f32_dir, "model.safetensors"))
    b, _ = safetensors_io.load(os.path.join(bf16_dir, "model.safetensors"))
    assert sorted(a) == sorted(b)
    for k in a:
        mine = safetensors_io.round_to_bf16(a[k]).view(torch.int16)
        assert torch.equal(mine, b[k].view(torch.int16)), f"BF16 rounding differs on {k}"


def rope_scaling_effect(model, tokens):
    """-> (max |inv_freq change| / inv_freq, max |logit change|) of llama3 scaling vs none."""
    plain = rm.Model(dataclasses.replace(model.cfg, rope_scaling=None), model.w)
    inv_s, inv_p = rm.rope_inv_freq(model.cfg), rm.rope_inv_freq(plain.cfg)
    with torch.no_grad():
        dlog = float((model.forward(tokens) - plain.forward(tokens)).abs().max())
    dfreq = float(((inv_s - inv_p).abs() / inv_p).max())
    assert dfreq > 0.1 and dlog > 1e-3, "llama3 rope scaling has no visible effect"
    return dfreq, dlog


def fp32_replay(model, adapters, calls, adam, tensors):
    """Diagnostic, not a pass/fail: rerun everything in float32 (as an fp32 engine would) and
    report how far it lands from the float64 fixtures -> dict of worst relative differences."""
    m32 = rm.Model(model.cfg, model.w, dtype=torch.float32)
    out = {"loss": 0.0, "logprobs": 0.0, "grad": 0.0, "adam_loss": 0.0, "adam_final_lr": 0.0}
    for c, call in enumerate(calls):
        ad = adapters[call["adapter"]].clone(True, torch.float32) if call["adapter"] else None
        loss, lps, _ = losses.call_loss(m32, ad, call)
        out["loss"] = max(out["loss"], abs(float(loss) - call["expected_loss"])
                          / max(1.0, abs(call["expected_loss"])))
        for d, lp in enumerate(lps):
            ref = tensors[f"logprobs/{c}/{d}"]
            out["logprobs"] = max(out["logprobs"], float((lp.double() - ref).abs().max()))
        if ad is not None:
            loss.backward()
            refs = {k: tensors[f"grad/{c}/{k}"] for k in ad.params}
            scale = max(float(r.abs().max()) for r in refs.values())
            diff = max(float((p.grad.double() - refs[k]).abs().max()) for k, p in ad.params.items())
            out["grad"] = max(out["grad"], diff / scale)
    for i, entry in enumerate(adam):
        ls, final, _ = optim_ref.run_torch_adam(m32, adapters[entry["adapter"]], calls[entry["call"]],
                                                entry["params"], entry["steps"], torch.float32)
        for a, b in zip(ls, entry["expected_losses"]):
            out["adam_loss"] = max(out["adam_loss"], abs(a - b) / max(1.0, abs(b)))
        lr = entry["params"]["learning_rate"]
        for k, v in final.items():
            d = float((v.double() - tensors[f"adam_final/{i}/{k}"]).abs().max()) / lr
            out["adam_final_lr"] = max(out["adam_final_lr"], d)
    return out
