# GPU benchmark (scripts/gpu-check.sh, docs/gpu.md): training and sampling tokens/s of tinkerd, served with
# --device DEVICE and driven by the official tinker SDK (the path a user's loop takes), next to transformers +
# peft on the same device, model and tokens. The model: Qwen3-1.7B's shape (28 layers, hidden 2048, vocab 151,936,
# tied embeddings) with random N(0, 0.02) bf16 weights, written once to WORK; LoRA rank 32 on q,k,v,o,gate,up,down
# on both sides (tinkerd: train_unembed=False), AdamW.
#   training: forward_backward + optim_step on 8 sequences x 512 random tokens (cross-entropy), median of 3 after
#             a warm-up; forward alone likewise.
#   sampling: 64 new tokens from 32-token prompts, 1 prompt and 32 prompts at once (tinkerd: 32 concurrent
#             sample requests of the trained adapter's sampler; transformers: generate on a batch of 32, KV cache).
# Each side runs in its own process, one holding the device at a time.
#   python bench/gpu_bench.py --build DIR --device cuda --work DIR [--tiny] [--sdk-path SITE]
#          [--jsonl FILE] [--markdown FILE] [--seconds BUDGET]
import argparse
import json
import os
import statistics
import subprocess
import sys
import time

import numpy as np

HERE = os.path.dirname(os.path.abspath(__file__))
E2E = os.path.join(HERE, "..", "tests", "e2e")
NAME = "bench/qwen3-1.7b-shape"
QWEN3_1_7B = dict(hidden_size=2048, intermediate_size=6144, num_hidden_layers=28, num_attention_heads=16,
                  num_key_value_heads=8, head_dim=128, vocab_size=151936, max_position_embeddings=40960,
                  rms_norm_eps=1e-6, tie_word_embeddings=True,
                  rope_parameters={"rope_type": "default", "rope_theta": 1000000.0})
TINY = dict(QWEN3_1_7B, hidden_size=64, intermediate_size=128, num_hidden_layers=2, num_attention_heads=4,
            num_key_value_heads=2, head_dim=16, vocab_size=512, max_position_embeddings=512)
WORKLOAD = {"full": dict(seqs=8, seq_len=512, steps=3, prompt_len=32, max_tokens=64, prompts=32),
            "tiny": dict(seqs=2, seq_len=32, steps=1, prompt_len=8, max_tokens=8, prompts=4)}
TARGETS = ["q_proj", "k_proj", "v_proj", "o_proj", "gate_proj", "up_proj", "down_proj"]
RANK = 32


def timed(fn, steps, sync=lambda: None):
    """Median wall seconds of `steps` calls after one warm-up call."""
    fn()
    sync()
    times = []
    for _ in range(steps):
        t = time.perf_counter()
        fn()
        sync()
        times.append(time.perf_counter() - t)
    return statistics.median(times)


def batch_tokens(wl, vocab):
    """The training batch (tokens, targets: [seqs, seq_len]) and the prompts, the same on both sides."""
    rng = np.random.default_rng(0)
    tokens = rng.integers(3, vocab, size=(wl["seqs"], wl["seq_len"]))
    targets = rng.integers(3, vocab, size=(wl["seqs"], wl["seq_len"]))
    prompts = rng.integers(3, vocab, size=(wl["prompts"], wl["prompt_len"]))
    return tokens, targets, prompts


def row(impl, what, tokens, seconds, **kw):
    return dict(impl=impl, row=what, tokens=int(tokens), seconds=seconds, tokens_per_s=tokens / seconds, **kw)


# ---------------------------------------------------------------- phases (each its own process)

def phase_build(args):
    import torch
    from transformers import Qwen3Config, Qwen3ForCausalLM
    torch.manual_seed(0)
    torch.set_default_dtype(torch.bfloat16)
    with torch.device(args.device):
        model = Qwen3ForCausalLM(Qwen3Config(**(TINY if args.tiny else QWEN3_1_7B)))
    with torch.no_grad():
        for p in model.parameters():
            if p.dim() > 1:
                p.normal_(0.0, 0.02)
    tmp = args.model_dir.rstrip("/") + ".tmp"
    model.save_pretrained(tmp)
    os.replace(tmp, args.model_dir)
    print(json.dumps({"phase": "build", "params": sum(p.numel() for p in model.parameters())}))


def sample_rate(sdk, sampler, prompts, max_tokens, impl):
    params = sdk.params(max_tokens=max_tokens, temperature=1.0, stop=[])
    futures = [sampler.sample(sdk.prompt(p), 1, params) for p in prompts]
    t = time.perf_counter()
    got = sum(len(s.tokens) for f in futures for s in f.result().sequences)
    return row(impl, "sample", got, time.perf_counter() - t, prompts=len(prompts))


def gpu_mib(pid):
    """The device memory nvidia-smi sees the process hold (MiB), or None (no nvidia-smi, or not on a GPU)."""
    try:
        out = subprocess.run(["nvidia-smi", "--query-compute-apps=pid,used_memory", "--format=csv,noheader,nounits"],
                             capture_output=True, text=True, timeout=20).stdout
    except (OSError, subprocess.TimeoutExpired):
        return None
    return next((float(m) for p, m in (line.split(",") for line in out.splitlines() if "," in line)
                 if int(p) == pid), None)


def phase_tinkerd(args, wl):
    sys.path.insert(0, E2E)
    import harness
    import sdk_common as sdk
    with open(os.path.join(args.model_dir, "config.json")) as f:
        vocab = json.load(f)["vocab_size"]
    tokens, targets, prompts = batch_tokens(wl, vocab)
    batch = [sdk.datum(t, y) for t, y in zip(tokens, targets)]
    srv = harness.Server(args.build, ["--device", args.device, "--model", "%s=%s" % (NAME, args.model_dir)],
                         name="tinkerd-bench")
    impl = "tinkerd (%s)" % args.device
    try:
        t = time.perf_counter()
        srv.start(timeout=300)
        print(json.dumps({"phase": "tinkerd", "startup_s": time.perf_counter() - t}), flush=True)
        svc = sdk.service(srv)
        tc = sdk.resolved(svc.create_lora_training_client(base_model=NAME, rank=RANK, seed=0, train_unembed=False))
        n = wl["seqs"] * wl["seq_len"]
        fwd = timed(lambda: tc.forward(batch, "cross_entropy").result(), wl["steps"])
        print(json.dumps(row(impl, "forward", n, fwd)), flush=True)
        step = timed(lambda: sdk.step(tc, batch, 1e-4), wl["steps"])
        print(json.dumps(row(impl, "train", n, step)), flush=True)
        sampler = sdk.resolved(tc.save_weights_and_get_sampling_client("bench"))
        for k in (1, wl["prompts"]):
            sample_rate(sdk, sampler, prompts[:k], 8, impl)  # warm-up (the first: the adapter reaches the sampler)
            print(json.dumps(sample_rate(sdk, sampler, prompts[:k], wl["max_tokens"], impl)), flush=True)
        print(json.dumps({"phase": "tinkerd", "gpu_mib": gpu_mib(srv.proc.pid)}), flush=True)
    except Exception:
        print("----- %s log tail -----\n%s" % (srv.name, srv.tail(40)), file=sys.stderr)
        raise
    finally:
        srv.cleanup()


def phase_hf(args, wl):
    import torch
    import torch.nn.functional as F
    from peft import LoraConfig, get_peft_model
    from transformers import AutoModelForCausalLM
    dev = torch.device(args.device)
    sync = torch.cuda.synchronize if dev.type == "cuda" else (lambda: None)
    model = AutoModelForCausalLM.from_pretrained(args.model_dir, dtype=torch.bfloat16).to(dev)
    V = model.config.vocab_size
    tokens, targets, prompts = (torch.from_numpy(a).to(dev) for a in batch_tokens(wl, V))
    n, impl = tokens.numel(), "transformers+peft (%s)" % args.device
    peft_model = get_peft_model(model, LoraConfig(r=RANK, lora_alpha=RANK, lora_dropout=0.0,
                                                  target_modules=TARGETS))

    def loss():
        logits = peft_model(input_ids=tokens, use_cache=False).logits  # [B, T, V]
        return F.cross_entropy(logits.float().reshape(-1, V), targets.reshape(-1), reduction="sum")

    with torch.no_grad():
        print(json.dumps(row(impl, "forward", n, timed(lambda: loss().item(), wl["steps"], sync))), flush=True)
    opt = torch.optim.AdamW([p for p in peft_model.parameters() if p.requires_grad], lr=1e-4)

    def train_step():
        loss().backward()
        opt.step()
        opt.zero_grad(set_to_none=True)

    peft_model.train()
    print(json.dumps(row(impl, "train", n, timed(train_step, wl["steps"], sync),
                         peak_gib=torch.cuda.max_memory_allocated() / 2**30 if dev.type == "cuda" else None)),
          flush=True)
    peft_model.eval()
    for k in (1, wl["prompts"]):
        gen = dict(max_new_tokens=wl["max_tokens"], do_sample=True, top_k=0, eos_token_id=None, pad_token_id=0)
        with torch.no_grad():
            peft_model.generate(input_ids=prompts[:k], **dict(gen, max_new_tokens=8))  # warm-up
            sync()
            t = time.perf_counter()
            out = peft_model.generate(input_ids=prompts[:k], **gen)
            sync()
        got = (out.shape[1] - prompts.shape[1]) * k
        print(json.dumps(row(impl, "sample", got, time.perf_counter() - t, prompts=k)), flush=True)


# ---------------------------------------------------------------- orchestration and the table

def run_child(args, phase, timeout, sdk_path=None):
    cmd = [sys.executable, os.path.abspath(__file__), "--phase", phase, "--build", args.build, "--device",
           args.device, "--work", args.work] + (["--tiny"] if args.tiny else [])
    env = dict(os.environ)
    if sdk_path:
        env["PYTHONPATH"] = sdk_path + (os.pathsep + env["PYTHONPATH"] if env.get("PYTHONPATH") else "")
    print("gpu_bench: %s (at most %d s)" % (phase, timeout), file=sys.stderr, flush=True)
    try:
        proc = subprocess.run(cmd, stdout=subprocess.PIPE, text=True, env=env, timeout=max(timeout, 1))
        out, error = proc.stdout, None if proc.returncode == 0 else "exit %d" % proc.returncode
    except subprocess.TimeoutExpired as e:
        out, error = e.stdout or "", "timed out after %d s" % timeout
        out = out.decode() if isinstance(out, bytes) else out
    rows = [json.loads(line) for line in out.splitlines() if line.startswith("{")]
    if error:
        print("gpu_bench: %s failed: %s" % (phase, error), file=sys.stderr, flush=True)
    return rows, error


def markdown(rows, errors, wl, tiny, device):
    shape = "tiny Qwen3 (2 layers, hidden 64)" if tiny else "Qwen3-1.7B-shaped (28 layers, hidden 2048, vocab 151,936)"
    out = ["Random bf16 %s, LoRA rank %d on q,k,v,o,gate,up,down, device %s. Training: %d x %d tokens, median of %d "
           "after a warm-up. Sampling: %d new tokens per %d-token prompt (tokens/s over all prompts)."
           % (shape, RANK, device, wl["seqs"], wl["seq_len"], wl["steps"], wl["max_tokens"], wl["prompt_len"]), "",
           "| row | tinkerd (SDK, served) | transformers+peft | tinkerd / transformers |", "|---|---:|---:|---:|"]
    labels = [("forward", None, "forward, tokens/s"), ("train", None, "forward_backward + optim_step, tokens/s"),
              ("sample", 1, "sampling, 1 prompt, tokens/s"),
              ("sample", wl["prompts"], "sampling, %d prompts at once, tokens/s" % wl["prompts"])]
    for what, prompts, label in labels:
        got = {}
        for r in rows:
            if r.get("row") == what and r.get("prompts") == prompts:
                got[r["impl"].split(" ")[0]] = r["tokens_per_s"]
        a, b = got.get("tinkerd"), got.get("transformers+peft")
        fmt = (lambda v: "%.0f" % v if v is not None else "—")
        out.append("| %s | %s | %s | %s |" % (label, fmt(a), fmt(b), "%.2f" % (a / b) if a and b else "—"))
    notes = ["tinkerd's start-up with the model: %.1f s" % r["startup_s"] for r in rows if r.get("startup_s")]
    notes += ["tinkerd's device memory after sampling (nvidia-smi): %.0f MiB" % r["gpu_mib"]
              for r in rows if r.get("gpu_mib")]
    notes += ["transformers+peft peak memory in training: %.1f GiB" % r["peak_gib"] for r in rows if r.get("peak_gib")]
    if notes:
        out += [""] + ["- %s." % n for n in notes]
    for phase, error in errors.items():
        out += ["", "**%s failed: %s** (see the bench log)." % (phase, error)]
    return "\n".join(out) + "\n"


def main():
    ap = argparse.ArgumentParser(description="tinkerd vs transformers+peft on one device (docs/gpu.md)")
    ap.add_argument("--build", required=True, help="the dir holding tinkerd")
    ap.add_argument("--device", default="cuda")
    ap.add_argument("--work", required=True, help="where the model is written (and reused)")
    ap.add_argument("--tiny", action="store_true", help="toy shapes, for a CPU dry run")
    ap.add_argument("--sdk-path", default="", help="PYTHONPATH entry holding the tinker SDK (tinkerd phase only)")
    ap.add_argument("--seconds", type=float, default=400, help="budget for the whole benchmark")
    ap.add_argument("--jsonl", help="append the rows here")
    ap.add_argument("--markdown", help="write the table here")
    ap.add_argument("--phase", choices=["build", "tinkerd", "hf"], help=argparse.SUPPRESS)
    args = ap.parse_args()
    args.build = os.path.abspath(args.build)
    args.model_dir = os.path.join(args.work, "tiny-qwen3" if args.tiny else "qwen3-1.7b-shape")
    wl = WORKLOAD["tiny" if args.tiny else "full"]
    if args.phase:
        return {"build": phase_build, "tinkerd": lambda a: phase_tinkerd(a, wl), "hf": lambda a: phase_hf(a, wl)}[
            args.phase](args)
    deadline = time.monotonic() + args.seconds
    left = (lambda reserve=0: deadline - time.monotonic() - reserve)
    os.makedirs(args.work, exist_ok=True)
    rows, errors = [], {}
    if not os.path.exists(os.path.join(args.model_dir, "config.json")):
        _, err = run_child(args, "build", left(120))
        if err:
            errors["build"] = err
    if "build" not in errors:
        for phase, share, path in (("tinkerd", 0.6, args.sdk_path), ("hf", 1.0, None)):
            got, err = run_child(args, phase, left() * share, path)
            rows += got
            if err:
                errors[phase] = err
    table = markdown(rows, errors, wl, args.tiny, args.device)
    print(table)
    train = {r["impl"].split(" ")[0]: r["tokens_per_s"] for r in rows if r.get("row") == "train"}
    print("bench: training tokens/s: %s%s" % (", ".join("%s %.0f" % kv for kv in train.items()) or "none",
                                             "; failed: " + ", ".join(errors) if errors else ""))
    if args.markdown:
        with open(args.markdown, "w") as f:
            f.write(table)
    if args.jsonl:
        with open(args.jsonl, "a") as f:
            for r in rows:
                f.write(json.dumps(r) + "\n")
    return 1 if errors else 0


if __name__ == "__main__":
    sys.exit(main())
