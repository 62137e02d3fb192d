#!/usr/bin/env python3
# The Gated DeltaNet blocks (engine/arch/delta_rule.h, run by delta_rule_tool) against transformers' own torch
# code in models/qwen3_5/modeling_qwen3_5.py: torch_chunk_gated_delta_rule (+ final states),
# torch_recurrent_gated_delta_rule, the module's full conv and torch_causal_conv1d_update, Qwen3_5RMSNormGated
# and Qwen3_5GatedDeltaNet.forward, on random fp64 inputs (packed sequences of 1..130 rows, HV = 2·HK).
# transformers computes these in fp32 even for fp64 inputs (.to(torch.float32) / .float()), so each function is
# also run from its own source with those casts removed (nothing else changed): that copy must match ours to
# 1e-10; the functions as shipped must match to 1e-4 (fp32 accuracy). Exit 1 otherwise.
# Usage: .venv/bin/python check_delta_rule.py DELTA_RULE_TOOL WORK_DIR
import inspect
import os
import subprocess
import sys
import textwrap
import types

import torch
import torch.nn.functional as F
import transformers.models.qwen3_5.modeling_qwen3_5 as hf
from safetensors.torch import load_file, save_file

TOL_FP64, TOL_AS_SHIPPED = 1e-10, 1e-4
LENGTHS = [1, 63, 64, 65, 130]


def without_fp32_casts(fn):
    """fn recompiled from its own source with the fp32 casts removed, in the module's globals."""
    src = textwrap.dedent(inspect.getsource(fn))
    patched = src.replace(".to(torch.float32)", "").replace(".float()", "")
    assert patched != src, fn.__qualname__
    scope = {}
    exec(compile(patched, f"<{fn.__qualname__} without fp32 casts>", "exec"), vars(hf), scope)
    return scope[fn.__name__]


def split(x, lengths):
    return list(torch.split(x, lengths))


def rule_case(inp, fns):
    """HF's chunked rule per sequence (batch 1) -> packed outputs [T, H, Dv], final states [S, H, Dk, Dv]."""
    outs, states = [], []
    for q, k, v, g, b in zip(*(split(inp[n], LENGTHS) for n in ("q", "k", "v", "g", "beta"))):
        o, s = fns["chunk"](q[None], k[None], v[None], g[None], b[None], output_final_state=True,
                            use_qk_l2norm_in_kernel=True)
        outs.append(o[0])
        states.append(s[0])
    return {"rule_out": torch.cat(outs), "rule_state": torch.stack(states)}


def recurrent_case(inp, fns):
    o, s = fns["recurrent"](inp["rec_q"], inp["rec_k"], inp["rec_v"], inp["rec_g"], inp["rec_beta"],
                            initial_state=None, output_final_state=True, use_qk_l2norm_in_kernel=True)
    return {"rec_out": o, "rec_state": s}


def conv_case(inp):
    """The module's full conv (padding K-1, cut to L, SiLU), then torch_causal_conv1d_update from its state."""
    w = inp["conv_w"]
    cc, kernel = w.shape
    lengths = inp["conv_lengths"].tolist()
    outs, states = [], []
    for x in split(inp["conv_x"], lengths):
        xs = x.t()[None]  # [1, Cc, L]
        outs.append(F.silu(F.conv1d(xs, w[:, None, :], padding=kernel - 1, groups=cc)[..., : x.shape[0]])[0].t())
        states.append(F.pad(xs, (kernel - xs.shape[-1], 0)))  # what the module caches: the last K inputs
    state = torch.cat(states)  # [S, Cc, K]
    steps = [hf.torch_causal_conv1d_update(step[..., None], state, w)[..., 0] for step in inp["conv_step_x"]]
    return {"conv_out": torch.cat(outs), "conv_step_out": torch.stack(steps)}


def norm_case(inp, fns):
    norm = hf.Qwen3_5RMSNormGated(inp["norm_w"].shape[0], eps=float(inp["norm_eps"][0])).double()
    norm.weight.data.copy_(inp["norm_w"])
    norm.forward = types.MethodType(fns["norm_forward"], norm)
    return {"norm_out": norm(inp["norm_x"], gate=inp["norm_z"])}


def mixer_case(inp, module, fns):
    module.chunk_gated_delta_rule = fns["chunk"]
    module.forward = types.MethodType(fns["module_forward"], module)
    module.norm.forward = types.MethodType(fns["norm_forward"], module.norm)
    lengths = inp["dn_lengths"].tolist()
    with torch.no_grad():
        return {"dn_out": torch.cat([module(x[None])[0] for x in split(inp["dn_x"], lengths)])}


def make_module():
    config = hf.Qwen3_5TextConfig(hidden_size=32, linear_num_key_heads=2, linear_num_value_heads=4,
                                  linear_key_head_dim=8, linear_value_head_dim=6, linear_conv_kernel_dim=4,
                                  rms_norm_eps=1e-6, hidden_act="silu")
    module = hf.Qwen3_5GatedDeltaNet(config, layer_idx=0).double()
    with torch.no_grad():
        for name, p in module.named_parameters():
            p.copy_(torch.randn_like(p) * (0.3 if "proj" in name or "conv" in name else 1.0))
        module.A_log.copy_(torch.rand_like(module.A_log).mul(8).log())
        module.norm.weight.add_(1.0)
    return module


def make_inputs(module):
    T, H, Dk, Dv = sum(LENGTHS), 4, 16, 8
    inp = {"lengths": torch.tensor(LENGTHS), "q": torch.randn(T, H, Dk), "k": torch.randn(T, H, Dk),
           "v": torch.randn(T, H, Dv), "g": -0.5 * F.softplus(torch.randn(T, H)), "beta": torch.rand(T, H)}
    B, L = 3, 20
    inp |= {"rec_q": torch.randn(B, L, H, Dk), "rec_k": torch.randn(B, L, H, Dk), "rec_v": torch.randn(B, L, H, Dv),
            "rec_g": -0.5 * F.softplus(torch.randn(B, L, H)), "rec_beta": torch.rand(B, L, H)}
    inp |= {"conv_lengths": torch.tensor([1, 3, 9]), "conv_x": torch.randn(13, 12), "conv_w": torch.randn(12, 4),
            "conv_step_x": torch.randn(3, 3, 12)}
    inp |= {"norm_x": torch.randn(10, Dv), "norm_z": torch.randn(10, Dv), "norm_w": torch.randn(Dv) + 1,
            "norm_eps": torch.tensor([1e-6])}
    inp |= {"dn_lengths": torch.tensor([5, 70]), "dn_x": torch.randn(75, 32), "dn_eps": torch.tensor([1e-6]),
            "dn_dims": torch.tensor([module.num_k_heads, module.num_v_heads, module.head_k_dim, module.head_v_dim,
                                     module.conv_kernel_size])}
    inp |= {name: p.detach().clone() for name, p in module.named_parameters()}
    return inp


def reference(inp, module, fns):
    ref = rule_case(inp, fns) | recurrent_case(inp, fns) | conv_case(inp) | norm_case(inp, fns)
    return ref | mixer_case(inp, module, fns)


def compare(ours, ref, tol, label):
    failures = []
    for name, r in sorted(ref.items()):
        err = (ours[name] - r.to(torch.float64)).abs().max().item()
        print(f"{label:>26} {name:>14}: max |ours - transformers| = {err:.3g}")
        if not err <= tol:
            failures.append(f"{label} {name}: {err:.3g} > {tol:g}")
    return failures


def main():
    if len(sys.argv) != 3:
        sys.exit("usage: check_delta_rule.py DELTA_RULE_TOOL WORK_DIR")
    torch.set_num_threads(min(2, torch.get_num_threads()))
    torch.manual_seed(0)
    torch.set_default_dtype(torch.float64)
    module = make_module()
    inp = {n: t.contiguous() for n, t in make_inputs(module).items()}
    os.makedirs(sys.argv[2], exist_ok=True)
    in_path = os.path.join(sys.argv[2], "delta_rule_in.safetensors")
    out_path = os.path.join(sys.argv[2], "delta_rule_out.safetensors")
    save_file(inp, in_path)
    subprocess.run([sys.argv[1], in_path, out_path], check=True)
    ours = load_file(out_path)
    shipped = {"chunk": hf.torch_chunk_gated_delta_rule, "recurrent": hf.torch_recurrent_gated_delta_rule,
               "norm_forward": hf.Qwen3_5RMSNormGated.forward, "module_forward": hf.Qwen3_5GatedDeltaNet.forward}
    fp64 = {name: without_fp32_casts(fn) for name, fn in shipped.items()}
    failures = compare(ours, reference(inp, module, fp64), TOL_FP64, "fp64 (casts removed)")
    failures += compare(ours, reference(inp, module, shipped), TOL_AS_SHIPPED, "as shipped (fp32 inside)")
    for f in failures:
        print("FAIL", f)
    sys.exit(1 if failures else 0)


if __name__ == "__main__":
    main()
