#!/usr/bin/env python3
# Writes the Hugging Face second-reference fixtures into OUT_DIR/hf/: per model case (tiny random Llama,
# Qwen2, Qwen3, Qwen3-MoE, Qwen3.5, Qwen3.5-MoE from transformers configs; stories260K) case.json + tensors.safetensors with transformers'
# float64 logprobs and PEFT LoRA gradients; tokenizer_ids.json (ids by `tokenizers`) and chat_renders.json
# (apply_chat_template on the real Qwen3 tokenizer). Usage: .venv/bin/python make_hf_fixtures.py OUT_DIR
import argparse
import copy
import hashlib
import json
import os
import sys
import time

import peft
import torch
import transformers
from safetensors.torch import save_file

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
import hf_models as hm  # noqa: E402
import hf_text_cases as tc  # noqa: E402


def default_shared_models():
    return os.path.abspath(os.path.join(os.path.dirname(os.path.abspath(__file__)), "..", "..", "..",
                                        "shared", "models"))


def make_model_case(case, out_dir, shared):
    t0 = time.time()
    seed, _, _, _, rank, targets = hm.CASES[case]
    case_dir = os.path.join(out_dir, case)
    os.makedirs(case_dir, exist_ok=True)
    if case == "hf_stories260K":
        model_dir = os.path.join(shared, "stories260K", "hf-f32")
        if not os.path.isfile(os.path.join(model_dir, "model.safetensors")):
            raise SystemExit(f"make_hf_fixtures: stories260K not found at {model_dir}")
        model, compat_dir = hm.load_model(model_dir), model_dir
    else:
        model, model_dir = hm.build_tiny_model(case, case_dir)
        compat_dir = os.path.join(case_dir, "model_compat")
    model64 = copy.deepcopy(model).double()
    peft64, init = hm.add_seeded_lora(model64, rank, targets, seed + 1)
    extra, hooks = hm.add_split_qkv_lora(peft64, rank, seed + 4)  # Qwen3.5's in_proj_q/k/v; else none
    if "gate_proj" in targets:  # train_mlp: the routed experts' shared-outer LoRA too (MoE cases; else none)
        extra.update(hm.add_expert_lora(peft64, rank, seed + 5, hooks))
    init.update({k: t.detach().float().clone() for k, t in extra.items()})
    datums = hm.random_datums(model.config.vocab_size, seed + 2)
    loss, lps, grads = hm.ce_sum_and_grads(peft64, datums, extra)
    tensors = {f"init/{k}": v.contiguous() for k, v in init.items()}
    tensors.update({f"grad/{k}": v.contiguous() for k, v in grads.items()})
    max_abs_logit = 0.0  # the logits' scale, for the tests' derived fp32 bound (fixture.cpp)
    with torch.no_grad():
        for d, datum in enumerate(datums):
            tensors[f"logprobs/{d}"] = lps[d]
            _, adapted_logits = hm.full_logprobs(peft64, datum["tokens"])
            hooks["on"] = False
            with peft64.disable_adapter():
                lp, base_logits = hm.full_logprobs(peft64, datum["tokens"])
            hooks["on"] = True
            max_abs_logit = max(max_abs_logit, float(adapted_logits.abs().max()), float(base_logits.abs().max()))
            tensors[f"base_logprobs/{d}"] = lp.gather(1, torch.tensor(datum["targets"])[:, None])[:, 0].clone()
    save_file(tensors, os.path.join(case_dir, "tensors.safetensors"))
    case_json = {"model_dir": os.path.abspath(model_dir), "model_compat_dir": os.path.abspath(compat_dir),
                 "rank": rank, "alpha": 32, "targets": targets, "datums": datums, "expected_loss": loss,
                 "max_abs_logit": max_abs_logit,
                 "probe": hm.random_datums(model.config.vocab_size, seed + 3, lengths=(11,))[0]["tokens"],
                 "reference": f"transformers {transformers.__version__}, peft {peft.__version__}, float64"}
    with open(os.path.join(case_dir, "case.json"), "w") as f:
        json.dump(case_json, f, indent=1)
    gnorm = sum(float((g * g).sum()) for g in grads.values()) ** 0.5
    print(f"[{case}] {len(grads)} LoRA tensors (r={rank}), loss {loss:.6f}, |grad| {gnorm:.4f}, "
          f"{time.time() - t0:.1f}s")


def sha256(path):
    with open(path, "rb") as f:
        return hashlib.sha256(f.read()).hexdigest()


def make_tokenizer_ids(out_dir, shared):
    from tokenizers import Tokenizer
    corpus = tc.unicode_corpus(seed=2024)
    entries = []
    for name, rel in (("qwen3", "tokenizers/qwen3"), ("stories260K", "stories260K/hf-f32")):
        path = os.path.join(shared, rel, "tokenizer.json")
        if not os.path.isfile(path):
            raise SystemExit(f"make_hf_fixtures: {path} is missing (shared models not available)")
        tok = Tokenizer.from_file(path)
        cases = [{"text": t, "ids": tok.encode(t, add_special_tokens=False).ids,
                  "ids_special": tok.encode(t, add_special_tokens=True).ids} for t in corpus]
        entries.append({"name": name, "dir": os.path.join(shared, rel), "sha256": sha256(path), "cases": cases})
        n_ids = sum(len(c["ids"]) for c in cases)
        print(f"[tokenizer {name}] {len(cases)} texts, {n_ids} ids")
    with open(os.path.join(out_dir, "tokenizer_ids.json"), "w") as f:
        json.dump({"tokenizers_version": __import__("tokenizers").__version__, "tokenizers": entries}, f,
                  ensure_ascii=False)


def make_chat_renders(out_dir, shared):
    from transformers import AutoTokenizer
    qwen = os.path.join(shared, "tokenizers", "qwen3")
    if not os.path.isfile(os.path.join(qwen, "tokenizer_config.json")):
        raise SystemExit(f"make_hf_fixtures: {qwen}/tokenizer_config.json is missing")
    tok = AutoTokenizer.from_pretrained(qwen, local_files_only=True)
    rows = []
    for case in tc.chat_cases():
        kwargs = dict(case["extra"])
        text = tok.apply_chat_template(case["messages"], tools=case["tools"], tokenize=False,
                                       add_generation_prompt=case["add_generation_prompt"], **kwargs)
        rows.append({**case, "expected": text})
    with open(os.path.join(out_dir, "chat_renders.json"), "w") as f:
        json.dump({"tokenizer_dir": qwen, "transformers_version": transformers.__version__,
                   "bos_token": tok.bos_token or "", "eos_token": tok.eos_token or "", "cases": rows}, f,
                  ensure_ascii=False, indent=1)
    print(f"[chat qwen3] {len(rows)} conversations rendered by apply_chat_template")


def main(argv=None):
    ap = argparse.ArgumentParser(description="Write the Hugging Face reference fixtures.")
    ap.add_argument("out_dir", help="the fixtures directory; files go to OUT_DIR/hf")
    ap.add_argument("--shared-models", default=default_shared_models())
    ap.add_argument("--only", choices=["models", "text"], help="write only one half")
    args = ap.parse_args(argv)
    torch.set_num_threads(min(2, torch.get_num_threads()))
    t0 = time.time()
    out_dir = os.path.join(args.out_dir, "hf")
    os.makedirs(out_dir, exist_ok=True)
    shared = os.path.abspath(args.shared_models)
    if args.only != "text":
        for case in hm.CASES:
            make_model_case(case, out_dir, shared)
    if args.only != "models":
        make_tokenizer_ids(out_dir, shared)
        make_chat_renders(out_dir, shared)
    print(f"HF fixtures written to {out_dir} in {time.time() - t0:.1f}s")


if __name__ == "__main__":
    main()
