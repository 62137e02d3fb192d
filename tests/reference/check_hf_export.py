#!/usr/bin/env python3
# Export round trip, second half (the first is hf_export_tool): loads each engine-exported adapter
# (<fixtures>/hf/<case>/export) with PeftModel.from_pretrained on the transformers model, checks that
# every tensor in the file was loaded, and that PEFT's logits equal ours within 1e-5 + 1e-6·|x| (exit 1 otherwise).
# Usage: .venv/bin/python check_hf_export.py FIXTURES_DIR
import json
import os
import sys

import torch
from peft.utils import get_peft_model_state_dict
from safetensors.torch import load_file

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
import hf_models as hm  # noqa: E402

# hf_qwen3_5_tiny: Tinker's in_proj_q/k/v LoRAs (no such PEFT modules) are exported as one LoRA of rank 3R on the
# fused in_proj_qkv (store::peft_loadable_adapter: A stacked, B block-diagonal, rank_pattern / alpha_pattern).
# Not hf_qwen3_5_moe_tiny: its adapter trains the routed experts, which PEFT cannot load (hf_reference_test).
CASES = ["hf_llama_tiny", "hf_qwen2_tiny", "hf_qwen3_tiny", "hf_qwen3_moe_tiny", "hf_qwen3_5_tiny", "hf_stories260K"]
TOL = 1e-5  # absolute, plus RTOL x |reference| (fp32 rounding of logits near 20 alone is 1e-6 each)
RTOL = 1e-6
# stories260K is a real model with logits near 20: the plain-PyTorch reference re-run in fp32 differs from
# its own float64 result by 3.6e-5 there (reference_test.cpp), so no fp32 engine meets 1e-5; it gets 4e-5.
TOL_REAL_MODEL = 4e-5
# Qwen3.5: transformers computes its norms, RoPE and delta rule in float32 even in a float64 model, so it gets
# hf_reference_test's 3e-5 (measured here: 1.4e-5).
TOL_QWEN3_5 = 3e-5


def check_case(case_dir):
    """-> list of failure strings; prints the measured errors."""
    with open(os.path.join(case_dir, "case.json")) as f:
        case = json.load(f)
    export = os.path.join(case_dir, "export")
    ours = load_file(os.path.join(case_dir, "export_ours.safetensors"))
    base = hm.load_model(case["model_dir"])  # as saved: transformers reads its own config
    model = hm.load_peft(base, export).double()
    failures = []
    saved = load_file(os.path.join(export, "adapter_model.safetensors"))
    loaded = get_peft_model_state_dict(model)
    missing = sorted(k for k in saved if k not in loaded)
    if missing:
        failures.append(f"{len(missing)} adapter tensors not loaded by PEFT, e.g. {missing[0]}")
    for k, v in saved.items():
        if k in loaded and not torch.equal(loaded[k].float(), v.float()):
            failures.append(f"{k}: PEFT holds different values than the file")
    init = load_file(os.path.join(case_dir, "tensors.safetensors"))
    moved = max(float((saved[k] - init["init/" + k]).abs().max()) for k in saved if "init/" + k in init)
    if not moved > 1e-4:
        failures.append(f"the exported adapter equals the imported one (max change {moved:.1e}): no training")
    with torch.no_grad():
        lp, logits = hm.full_logprobs(model, case["probe"])
        with model.disable_adapter():
            base_lp, _ = hm.full_logprobs(model, case["probe"])
    lp_err = float((ours["logprobs"].double() - lp).abs().max())
    logit_err = float((ours["last_logits"].double() - logits[-1]).abs().max())
    lp_excess = float(((ours["logprobs"].double() - lp).abs() - RTOL * lp.abs()).max())
    logit_excess = float(((ours["last_logits"].double() - logits[-1]).abs() - RTOL * logits[-1].abs()).max())
    adapter_effect = float((lp - base_lp).abs().max())
    name = os.path.basename(case_dir)
    tol = TOL_REAL_MODEL if name == "hf_stories260K" else TOL_QWEN3_5 if name.startswith("hf_qwen3_5") else TOL
    print(f"[{name}] PeftModel.from_pretrained(engine export): {len(saved)} tensors loaded; vs our fp32: "
          f"full log-softmax max abs {lp_err:.2e}, last logits max abs {logit_err:.2e} "
          f"(adapter moves logprobs by up to {adapter_effect:.2f})")
    if lp_excess > tol:
        failures.append(f"log-softmax differs by {lp_err:.2e} (> {tol} + {RTOL} x |reference|)")
    if logit_excess > tol:
        failures.append(f"last-position logits differ by {logit_err:.2e} (> {tol} + {RTOL} x |reference|)")
    if adapter_effect < 1e-3:
        failures.append("the adapter does not change PEFT's outputs: it was not applied")
    with open(os.path.join(export, "adapter_config.json")) as f:
        targets = sorted(json.load(f)["target_modules"])
    merged_qkv = name.startswith("hf_qwen3_5")  # the in_proj_q/k/v hooks' LoRAs, merged
    want = sorted(case["targets"] + (["in_proj_qkv"] if merged_qkv else []))
    if targets != want:
        failures.append(f"adapter_config target_modules {targets} != {want}")
    if merged_qkv and not any(k.endswith("in_proj_qkv.lora_B.weight") for k in loaded):
        failures.append("no in_proj_qkv LoRA loaded by PEFT")
    return [f"{name}: {m}" for m in failures]


def main():
    if len(sys.argv) != 2:
        sys.exit("usage: check_hf_export.py FIXTURES_DIR")
    torch.set_num_threads(min(2, torch.get_num_threads()))
    root = os.path.join(sys.argv[1], "hf")
    failures = []
    for case in CASES:
        case_dir = os.path.join(root, case)
        if not os.path.isfile(os.path.join(case_dir, "export_ours.safetensors")):
            failures.append(f"{case}: no export in {case_dir} (run `make fixtures`, then hf_export_tool)")
            continue
        failures += check_case(case_dir)
    for f in failures:
        print("FAIL " + f)
    sys.exit(1 if failures else 0)


if __name__ == "__main__":
    main()
