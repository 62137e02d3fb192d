#!/usr/bin/env python3
# Writes the tinkerd numerical-reference fixtures: OUT_DIR/<case>/{case.json, tensors.safetensors}
# (+ model/ for generated cases), deterministically, then runs the self-checks (exit != 0 on failure).
# Usage: .venv/bin/python tests/reference/make_fixtures.py OUT_DIR [--shared-models DIR]
import argparse
import json
import math
import os
import sys
import time

import numpy as np
import torch

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
import case_builder as cb  # noqa: E402
import losses  # noqa: E402
import optim_ref  # noqa: E402
import reference_model as rm  # noqa: E402
import safetensors_io  # noqa: E402
import self_check  # noqa: E402

CASES = {"llama_tiny": 101, "qwen3_tiny": 202, "qwen2_tiny": 303, "stories260K": 404}  # name -> seed


def dump_json(obj, indent=0) -> str:
    """JSON with lists of scalars kept on one line (readable, exact float repr)."""
    pad, inner = "  " * indent, "  " * (indent + 1)
    if isinstance(obj, dict):
        if not obj:
            return "{}"
        items = [f"{inner}{json.dumps(k)}: {dump_json(v, indent + 1)}" for k, v in obj.items()]
        return "{\n" + ",\n".join(items) + "\n" + pad + "}"
    if isinstance(obj, list) and any(isinstance(v, (dict, list)) for v in obj):
        return "[\n" + ",\n".join(inner + dump_json(v, indent + 1) for v in obj) + "\n" + pad + "]"
    if isinstance(obj, float) and not math.isfinite(obj):
        raise ValueError("non-finite value in fixture")
    return json.dumps(obj)


def prepare_model(case, out_case_dir, shared_models, rng):
    """-> (absolute model dir, Model). Generated cases are written to <case>/model/ in F32."""
    if case == "stories260K":
        model_dir = os.path.abspath(os.path.join(shared_models, "stories260K", "hf-f32"))
        return model_dir, rm.load_model(model_dir)
    config = cb.tiny_config(case)
    cfg = rm.ModelConfig.from_dict(config)
    weights = cb.tiny_weights(cfg, rng)
    model_dir = os.path.abspath(os.path.join(out_case_dir, "model"))
    os.makedirs(model_dir, exist_ok=True)
    with open(os.path.join(model_dir, "config.json"), "w") as f:
        f.write(dump_json(config) + "\n")
    safetensors_io.save(os.path.join(model_dir, "model.safetensors"), weights, {"format": "pt"})
    model = rm.load_model(model_dir)  # read back: the reference uses exactly what was written
    return model_dir, model


def run_call(model, adapters, call, index, tensors):
    """Reference loss, logprobs, logits and (if adapted) grads of one call, into tensors."""
    adapter = adapters[call["adapter"]].clone(requires_grad=True) if call["adapter"] else None
    loss, lps, logits = losses.call_loss(model, adapter, call)
    grads = {}
    if adapter is not None:
        loss.backward()
        grads = {k: p.grad.detach().clone() for k, p in adapter.params.items()}
        for k, g in grads.items():
            tensors[f"grad/{index}/{k}"] = g
    for d, (lp, lg) in enumerate(zip(lps, logits)):
        tensors[f"logprobs/{index}/{d}"] = lp.detach().clone()
        tensors[f"logits/{index}/{d}"] = lg.detach().clone()
    call["expected_loss"] = float(loss)
    return grads, [lp.detach() for lp in lps]


def run_adams(model, adapters, calls, tensors):
    """Adam entries (fresh state from init weights) -> list of case.json adam dicts."""
    entries = []
    for i, spec in enumerate(cb.ADAM_SPECS):
        hp = dict(spec["params"])
        adapter, call = adapters[spec["adapter"]], calls[spec["call"]]
        assert call["adapter"] == spec["adapter"] and call["loss_fn"] == "cross_entropy"
        if hp["grad_clip_norm"] is None:  # 0.3 x first-step norm, 3 significant digits
            hp["grad_clip_norm"] = float(f"{0.3 * optim_ref.grad_norm_at(model, adapter, call):.3g}")
        run = optim_ref.run_dimuon if hp.get("optimizer") == "dimuon" else optim_ref.run_adam_checked
        loss_log, final, clip_log = run(model, adapter, call, hp, spec["steps"])
        for k, v in final.items():
            tensors[f"adam_final/{i}/{k}"] = v
        entries.append({"adapter": spec["adapter"], "call": spec["call"], "steps": spec["steps"],
                        "params": hp, "expected_losses": loss_log})
        clip_txt = ", ".join(f"{n:.4g}{'*' if t else ''}" for n, t in clip_log) or "off"
        print(f"    {hp.get('optimizer', 'adam')} {i} ({spec['adapter']}, call {spec['call']}): losses "
              + " ".join(f"{x:.5f}" for x in loss_log) + f"; grad norms (*=clipped): {clip_txt}")
    return entries


def run_self_checks(case, model, adapters, calls, grads, lps, rng):
    for c, call in enumerate(calls):
        got = self_check.numpy_loss(call, lps[c])
        assert abs(got - call["expected_loss"]) <= 1e-9 * max(1.0, abs(got)), (case, c, got)
    self_check.zero_b_check(model, adapters["a"], calls[0]["datums"][1]["tokens"])
    if case == "stories260K":
        return "numpy losses ok, B=0 ok"
    worst = 0.0
    for c, call in enumerate(calls):
        if call["adapter"]:
            worst = max(worst, self_check.fd_check(model, adapters[call["adapter"]], call, grads[c], rng))
    return f"numpy losses ok, B=0 ok, FD worst rel err {worst:.2e}"


def clip_stats(call, lps) -> str:
    """ppo/cispo: how many ratios fall below/above the clip range, by advantage sign."""
    if call["loss_fn"] not in ("ppo", "cispo"):
        return ""
    cfg = losses.merged_config(call["loss_fn"], call["loss_fn_config"])
    lo, hi = cfg["clip_low_threshold"], cfg["clip_high_threshold"]
    r = np.concatenate([np.exp(lp.numpy() - losses.tensor_from_spec(d["loss_inputs"]["logprobs"]).numpy())
                        for d, lp in zip(call["datums"], lps)])
    a = np.concatenate([d["loss_inputs"]["advantages"]["data"] for d in call["datums"]])
    n = lambda m: int(m.sum())  # noqa: E731
    return (f" r<{lo}: {n((r < lo) & (a > 0))}A+/{n((r < lo) & (a < 0))}A-,"
            f" r>{hi}: {n((r > hi) & (a > 0))}A+/{n((r > hi) & (a < 0))}A- of {r.size}")


def make_case(case, out_dir, shared_models):
    t0 = time.time()
    rng = np.random.default_rng(CASES[case])
    case_dir = os.path.join(out_dir, case)
    os.makedirs(case_dir, exist_ok=True)
    model_dir, model = prepare_model(case, case_dir, shared_models, rng)
    adapters, inits = cb.make_adapters(model.cfg, rng)
    calls = cb.build_calls(rng, model, adapters)
    tensors = {f"init/{n}/{k}": v for n, p in inits.items() for k, v in p.items()}
    grads, lps = zip(*(run_call(model, adapters, call, i, tensors) for i, call in enumerate(calls)))
    c = model.cfg
    print(f"[{case}] {c.arch} V={c.vocab} H={c.hidden} L={c.layers} heads={c.heads}/{c.kv_heads} "
          f"hd={c.head_dim} tie={c.tie}")
    for i, call in enumerate(calls):
        gn = math.sqrt(sum(float((g * g).sum()) for g in grads[i].values())) if grads[i] else 0.0
        print(f"    call {i} {call['loss_fn']:<19} adapter={call['adapter']!s:<4} "
              f"loss={call['expected_loss']:+.6f} |grad|={gn:.4f}" + clip_stats(call, lps[i]))
    adam = run_adams(model, adapters, calls, tensors)
    checks = run_self_checks(case, model, adapters, calls, grads, lps, np.random.default_rng(7))
    case_json = {"model_dir": model_dir, "model_dir_relative": os.path.relpath(model_dir, case_dir),
                 "adapters": cb.ADAPTER_SPECS, "calls": calls, "adam": adam}
    with open(os.path.join(case_dir, "case.json"), "w") as f:
        f.write(dump_json(case_json) + "\n")
    safetensors_io.save(os.path.join(case_dir, "tensors.safetensors"), tensors)
    p = self_check.fp32_replay(model, adapters, calls, adam, tensors)
    print("    fp32 replay (diagnostic): " + ", ".join(f"{k} {v:.1e}" for k, v in p.items())
          + "  [loss/adam_loss rel, logprobs abs, grad rel-to-max, adam_final in units of lr]")
    print(f"    self-checks: {checks}; {len(tensors)} tensors; {time.time() - t0:.1f}s")
    return model


def global_checks(shared_models, llama_tiny):
    s = os.path.join(shared_models, "stories260K")
    err = self_check.stories_check(os.path.join(s, "hf-f32"), os.path.join(s, "expected.json"))
    print(f"[stories260K] greedy 8 ok, first8 logits max err {err:.2e}")
    self_check.bf16_check(os.path.join(s, "hf-f32"), os.path.join(s, "hf-bf16"))
    print("[stories260K] our BF16 RNE of hf-f32 == hf-bf16 bit for bit")
    dfreq, dlog = self_check.rope_scaling_effect(llama_tiny, list(range(1, 14)))
    print(f"[llama_tiny] llama3 rope scaling: max rel inv_freq change {dfreq:.3f}, "
          f"max logit change over 13 tokens {dlog:.4f}")


def main(argv=None):
    ap = argparse.ArgumentParser(description="Write tinkerd reference fixtures and self-check them.")
    ap.add_argument("out_dir")
    default_shared = os.path.join(os.path.dirname(os.path.abspath(__file__)), "..", "..", "..",
                                  "shared", "models")
    ap.add_argument("--shared-models", default=default_shared)
    args = ap.parse_args(argv)
    torch.set_num_threads(min(2, torch.get_num_threads()))
    t0 = time.time()
    shared = os.path.abspath(args.shared_models)
    models = {case: make_case(case, args.out_dir, shared) for case in CASES}
    global_checks(shared, models["llama_tiny"])
    print(f"all fixtures written to {os.path.abspath(args.out_dir)} in {time.time() - t0:.1f}s")


if __name__ == "__main__":
    main()
