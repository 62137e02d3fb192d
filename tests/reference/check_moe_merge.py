#!/usr/bin/env python3
# Expert LoRA semantics against an independent reference: tinker-cookbook's own merge code
# (tinker_cookbook.weights.merge_adapter_weights, which reads Tinker's adapter files: experts.w1/w3/w2 with
# the shared-outer 3-D shapes) merges the engine's exported Qwen3-MoE adapter (hf_export_tool:
# <fixtures>/hf/hf_qwen3_moe_tiny/export_experts) into the transformers model; its float64 log-softmax on
# the probe must equal the engine's (LoRA applied unmerged, fp32) within 1e-5 + 1e-6·|x|. Exit 1 otherwise.
# Usage: .venv/bin/python check_moe_merge.py FIXTURES_DIR
import json
import os
import sys

import torch
from safetensors.torch import load_file
from tinker_cookbook.weights import _merge as cookbook_merge

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
import hf_models as hm  # noqa: E402

CASE = "hf_qwen3_moe_tiny"
TOL, RTOL = 1e-5, 1e-6


def main():
    if len(sys.argv) != 2:
        sys.exit("usage: check_moe_merge.py FIXTURES_DIR")
    torch.set_num_threads(min(2, torch.get_num_threads()))
    case_dir = os.path.join(sys.argv[1], "hf", CASE)
    export = os.path.join(case_dir, "export_experts")
    ours_path = os.path.join(case_dir, "export_experts_ours.safetensors")
    if not os.path.isfile(ours_path):
        sys.exit(f"FAIL {CASE}: no expert export in {case_dir} (run `make fixtures`, then hf_export_tool)")
    with open(os.path.join(case_dir, "case.json")) as f:
        case = json.load(f)
    with open(os.path.join(export, "adapter_config.json")) as f:
        adapter_config = json.load(f)
    adapter = load_file(os.path.join(export, "adapter_model.safetensors"))
    expert_keys = [k for k in adapter if ".mlp.experts." in k]
    failures = []
    if len(expert_keys) != 6:
        failures.append(f"expected the 6 expert factors of layer 0, found {sorted(expert_keys)}")
    model = hm.load_model(case["model_dir"]).double()
    with torch.no_grad():
        base_lp, _ = hm.full_logprobs(model, case["probe"])
        cookbook_merge.merge_adapter_weights(model, {k: v.double() for k, v in adapter.items()}, adapter_config)
        lp, _ = hm.full_logprobs(model, case["probe"])
    ours = load_file(ours_path)["logprobs"].double()
    err = float((ours - lp).abs().max())
    excess = float(((ours - lp).abs() - RTOL * lp.abs()).max())
    effect = float((lp - base_lp).abs().max())
    print(f"[{CASE}] tinker-cookbook merge of the engine's {len(adapter)} LoRA tensors ({len(expert_keys)} expert "
          f"factors): float64 log-softmax vs ours max abs {err:.2e} (the adapter moves logprobs by {effect:.2f})")
    if excess > TOL:
        failures.append(f"log-softmax differs by {err:.2e} (> {TOL} + {RTOL} x |reference|)")
    if effect < 1e-3:
        failures.append("the merged adapter does not change the model: nothing was merged")
    for f in failures:
        print(f"FAIL {CASE}: {f}")
    sys.exit(1 if failures else 0)


if __name__ == "__main__":
    main()
