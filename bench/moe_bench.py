# Qwen3-MoE benchmark (issue 12 §4): forward and forward_backward tokens/s of tinkerd's engine on a
# Qwen3-30B-A3B-shaped model cut to 2 layers (the real config.json, num_hidden_layers=2: 128 experts, top-8,
# moe_intermediate 768, hidden 2048, vocab 151,936), bf16 weights, against transformers eager on the same
# model directory and the same token counts in the same run.
#
#   .venv/bin/python bench/moe_bench.py build/bench-models/qwen3moe-30b-a3b-2l [--steps 2] [--threads 2]
#   .venv/bin/python bench/moe_bench.py MODEL_DIR --report build/bench/moe_results.jsonl  # re-print a run
#
# 1. MODEL_DIR is built once (random N(0, 0.02) weights, seed 0, made directly in bf16; save_pretrained
#    writes one tensor per expert as the Hub stores them; 3.7 GB, needs ~4.3 GB RAM) and reused later.
# 2. tinkerd: `BUILD/bench/train_bench MODEL_DIR auto STEPS THREADS` (LoRA rank 32 on every target, the
#    experts in the shared-outer layout and lm_head included; equal batch 4x256 and mixed batch; its JSON
#    lines carry fwd_s, step_s = forward_backward + optim_step, optim_s and the fp32/bf16 matmul ceilings
#    measured just before each batch).
# 3. transformers 5 (bf16 weights, `experts_implementation="eager"`, the per-expert Python loop; then
#    "grouped_mm", transformers' default, as a second row), SDPA attention (its default), 4 sequences x 256
#    random tokens, cross-entropy on random targets: (a) forward + loss under no_grad, (b) forward + loss +
#    backward + AdamW step with PEFT LoRA r=32, alpha=32 on q,k,v,o. PEFT cannot express the shared-outer
#    expert LoRA, so the experts carry none there; the backward still runs through every expert and the
#    lm_head for the input gradients, so the work is comparable (tinkerd also trains expert and lm_head LoRA,
#    a few % more FLOPs). The forward is also timed as body (model.model) + head (lm_head + loss).
# Each part runs in its own process (peak RSS per part); load averages are recorded before and after each,
# and each row carries the share of its threads' CPU time the process got. About 7 minutes at 2 threads on a
# quiet 2-core VM. On a busy machine the numbers are meaningless, not just noisy: every 2-thread parallel
# region waits until both threads are scheduled, and this op-heavy expert loop (thousands of small ops per
# step) slowed 2-10x, differently for each implementation; re-run when CPU share reads < 0.9.
# Prints one table and appends the rows as JSON lines to --results (default BUILD/bench/moe_results.jsonl).
# Timings are medians of STEPS after one warm-up step.
import argparse
import json
import os
import resource
import shutil
import statistics
import subprocess
import sys
import time

REPO = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
CONFIG = os.path.join(REPO, "tests", "data", "model_configs", "Qwen3-30B-A3B.json")
N_LAYERS = 2
SEED = 0
SEQS, SEQ_LEN = 4, 256  # train_bench's equal batch (bench/bench_batches.h EQUAL_LENGTHS)
MIXED_LENGTHS = [64] + [256] * 6 + [1024]  # and its mixed batch


def peak_rss_mb():
    return resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 1024.0


def loadavg():
    return [round(x, 2) for x in os.getloadavg()]


def children_cpu_s():
    r = resource.getrusage(resource.RUSAGE_CHILDREN)
    return r.ru_utime + r.ru_stime


def matmul_gflops(dtype):
    """train_bench's ceiling: x[4096, 576] @ W[1536, 576]^T in dtype, median of calls over >= 0.5 s."""
    import torch
    x, w = torch.randn(4096, 576).to(dtype), torch.randn(1536, 576).to(dtype)
    torch.matmul(x, w.t())
    times, start = [], time.perf_counter()
    while len(times) < 5 or time.perf_counter() - start < 0.5:
        t = time.perf_counter()
        torch.matmul(x, w.t())
        times.append(time.perf_counter() - t)
    return 2.0 * 4096 * 576 * 1536 / statistics.median(times) / 1e9


def ceilings():
    import torch
    return {"fp32_gflops": round(matmul_gflops(torch.float32), 1),
            "bf16_gflops": round(matmul_gflops(torch.bfloat16), 1)}


# ---------------------------------------------------------------- FLOPs
# Per token, with C = hidden, Q = heads*head_dim, KV = kv_heads*head_dim, V = vocab, E = experts,
# k = experts per token, Fm = moe_intermediate, F = intermediate (dense layers only), L layers:
#   attention projections  2*(C*Q + 2*C*KV + Q*C)                  per layer
#   router                 2*C*E                                    per sparse layer
#   active experts         2*k*3*C*Fm  (gate, up: C->Fm; down: Fm->C) per sparse layer
#   dense MLP              2*3*C*F                                  per dense layer (none here)
#   lm_head                2*C*V
# plus attention scores and values 2*2*len*len*Q per sequence and layer (the full L x L square, as
# train_bench counts it). Forward = linear + attention. Train step with frozen base weights =
# 2*linear + 3*attention (the backward repeats every product once for the input gradient and the attention
# twice). LoRA products (<3% here), the loss and tinkerd's recomputed lm_head in the chunked logprobs
# backward are not counted: the same model FLOPs serve both implementations.
def count_flops(cfg, lengths):
    C, V = cfg["hidden_size"], cfg["vocab_size"]
    hd = cfg.get("head_dim") or C // cfg["num_attention_heads"]
    Q, KV = cfg["num_attention_heads"] * hd, cfg["num_key_value_heads"] * hd
    E, k = cfg["num_experts"], cfg["num_experts_per_tok"]
    Fm, F = cfg["moe_intermediate_size"], cfg["intermediate_size"]
    L = cfg["num_hidden_layers"]
    step = cfg.get("decoder_sparse_step", 1)
    parts = {"attn_proj": 0.0, "router": 0.0, "experts": 0.0, "dense_mlp": 0.0, "lm_head": 0.0, "attn_core": 0.0}
    for layer in range(L):
        sparse = layer not in cfg.get("mlp_only_layers", []) and E > 0 and (layer + 1) % step == 0
        parts["attn_proj"] += 2.0 * (C * Q + 2 * C * KV + Q * C)
        if sparse:
            parts["router"] += 2.0 * C * E
            parts["experts"] += 2.0 * k * 3 * C * Fm
        else:
            parts["dense_mlp"] += 2.0 * 3 * C * F
    parts["lm_head"] = 2.0 * C * V
    tokens = sum(lengths)
    per_token = {n: v for n, v in parts.items() if n != "attn_core"}
    out = {n: v * tokens for n, v in per_token.items()}
    out["attn_core"] = sum(2.0 * 2.0 * n * n * Q * L for n in lengths)
    linear = sum(v for n, v in out.items() if n != "attn_core")
    out["forward"] = linear + out["attn_core"]
    out["train"] = 2 * linear + 3 * out["attn_core"]
    return out


def model_config(model_dir=None):
    """The config to build from (Qwen3-30B-A3B, 2 layers), or the built directory's for the FLOP count."""
    path = os.path.join(model_dir, "config.json") if model_dir else CONFIG
    with open(path) as f:
        cfg = json.load(f)
    if not model_dir:
        cfg["num_hidden_layers"] = N_LAYERS
    if "num_experts" not in cfg:  # transformers 5 writes num_local_experts
        cfg["num_experts"] = cfg["num_local_experts"]
    return cfg


# ---------------------------------------------------------------- phase: build the model directory

def phase_build(model_dir):
    import torch
    from transformers import Qwen3MoeConfig, Qwen3MoeForCausalLM

    parent = os.path.dirname(os.path.abspath(model_dir))
    os.makedirs(parent, exist_ok=True)
    free_gb = shutil.disk_usage(parent).free / 1e9
    if free_gb < 10:
        sys.exit(f"moe_bench: only {free_gb:.1f} GB free in {parent}; the model needs 3.7 GB (+ a temporary copy)")
    cfg = model_config()
    cfg.pop("transformers_version", None)
    config = Qwen3MoeConfig(**{k: v for k, v in cfg.items() if k not in ("architectures", "torch_dtype")})
    config.architectures = ["Qwen3MoeForCausalLM"]
    torch.manual_seed(SEED)
    torch.set_default_dtype(torch.bfloat16)  # initialised in bf16: no fp32 copy of the 1.9 B parameters
    t0 = time.time()
    model = Qwen3MoeForCausalLM(config)  # _init_weights: N(0, initializer_range=0.02), router included
    assert model.dtype == torch.bfloat16
    tmp = model_dir.rstrip("/") + ".tmp"
    shutil.rmtree(tmp, ignore_errors=True)
    model.save_pretrained(tmp)  # per-expert tensors (transformers 5 reverts its fused in-memory layout)
    with open(os.path.join(tmp, "moe_bench.json"), "w") as f:
        json.dump({"config": os.path.relpath(CONFIG, REPO), "num_hidden_layers": N_LAYERS, "seed": SEED,
                   "init": "N(0, 0.02), norms 1", "dtype": "bfloat16"}, f)
    os.replace(tmp, model_dir)
    size = sum(os.path.getsize(os.path.join(model_dir, n)) for n in os.listdir(model_dir))
    print(json.dumps({"phase": "build", "seconds": round(time.time() - t0, 1), "bytes": size,
                      "params": sum(p.numel() for p in model.parameters()), "peak_rss_mb": round(peak_rss_mb())}))


# ---------------------------------------------------------------- phase: transformers

def phase_hf(model_dir, experts, steps, threads, seqs):
    import torch
    import torch.nn.functional as F
    from transformers import AutoModelForCausalLM

    torch.set_num_threads(threads)
    t0 = time.time()
    model = AutoModelForCausalLM.from_pretrained(model_dir, dtype=torch.bfloat16, experts_implementation=experts)
    model.config._experts_implementation = experts  # as the issue asks; from_pretrained already set it
    assert model.config._experts_implementation == experts, model.config._experts_implementation
    load_s = time.time() - t0
    model.eval()
    V = model.config.vocab_size
    g = torch.Generator().manual_seed(42)
    ids = torch.randint(3, V, (seqs, SEQ_LEN), generator=g)
    targets = torch.randint(3, V, (seqs, SEQ_LEN), generator=g)

    def loss_of(logits):
        return F.cross_entropy(logits.float().reshape(-1, V), targets.reshape(-1))

    cpu_share = {}

    def timed(fn, name):
        """Median wall time of steps calls after a warm-up; also the share of `threads` cores the process got."""
        times, cpu, wall = [], 0.0, 0.0
        for i in range(steps + 1):  # iteration 0 warms up
            t, c = time.perf_counter(), time.process_time()
            fn()
            if i > 0:
                times.append(time.perf_counter() - t)
                cpu += time.process_time() - c
                wall += times[-1]
        cpu_share[name] = round(cpu / wall / threads, 2)
        return statistics.median(times), times

    peaks_fwd = ceilings()  # measured next to each timing, as train_bench does: the VM's speed drifts
    with torch.no_grad():
        fwd_s, fwd_times = timed(lambda: loss_of(model(input_ids=ids, use_cache=False).logits).item(), "fwd")
        hidden = {}

        def body():
            hidden["h"] = model.model(input_ids=ids, use_cache=False).last_hidden_state

        body_s, _ = timed(body, "body")
        head_s, _ = timed(lambda: loss_of(model.lm_head(hidden["h"])).item(), "head")
        del hidden
    from peft import LoraConfig, get_peft_model

    peft_model = get_peft_model(model, LoraConfig(r=32, lora_alpha=32, lora_dropout=0.0,
                                                  target_modules=["q_proj", "k_proj", "v_proj", "o_proj"]))
    peft_model.train()
    params = [p for p in peft_model.parameters() if p.requires_grad]
    opt = torch.optim.AdamW(params, lr=1e-4)

    def train_step():
        loss = loss_of(peft_model(input_ids=ids, use_cache=False).logits)
        loss.backward()
        opt.step()
        opt.zero_grad(set_to_none=True)

    peaks_train = ceilings()
    step_s, step_times = timed(train_step, "train")
    print(json.dumps({"phase": "hf", "experts": experts, "attn": model.config._attn_implementation,
                      "load_s": round(load_s, 1), "fwd_s": fwd_s, "fwd_times": fwd_times, "body_fwd_s": body_s,
                      "head_fwd_s": head_s, "step_s": step_s, "step_times": step_times,
                      "lora_params": sum(p.numel() for p in params), "tokens": seqs * SEQ_LEN,
                      "peaks_fwd": peaks_fwd, "peaks_train": peaks_train, "cpu_share": cpu_share,
                      "peak_rss_mb": round(peak_rss_mb())}))


# ---------------------------------------------------------------- driver and report

def add_derived(rows):
    """tokens/s, GFLOP/s, fractions of the ceilings and the ratio to transformers eager (same kind, same tokens)."""
    base = {(r["kind"], r["tokens"]): r["tokens"] / r["s"] for r in rows
            if r["impl"] == "transformers eager" and "s" in r}
    for r in rows:
        if "s" not in r:
            continue
        r["tokens_per_s"] = r["tokens"] / r["s"]
        r["gflops"] = r["gflop"] / r["s"]
        r["vs_hf_eager"] = r["tokens_per_s"] / base[(r["kind"], r["tokens"])] if (r["kind"], r["tokens"]) in base \
            else None
        for p in ("bf16", "fp32"):
            r[p + "_peak_frac"] = r["gflops"] / r[p + "_peak"] if r.get(p + "_peak") else None


def report(rows, run_info, cfg):
    fl = count_flops(cfg, [SEQ_LEN] * SEQS)
    label = {"fwd": "fwd", "train": "fwd+bwd+optim"}
    out = []
    out.append(f"{run_info.get('model_dir', 'model')}: {cfg['num_hidden_layers']} layers, bf16 weights, "
               f"{run_info['threads']} threads, median of {run_info['steps']} steps after a warm-up; "
               f"{run_info['date']}")
    share = {n: fl[n] / fl["forward"] for n in ("lm_head", "experts", "attn_proj", "attn_core", "router")}
    out.append(f"model FLOPs per 4x256 forward: {fl['forward'] / 1e9:.0f} GFLOP (lm_head {share['lm_head']:.0%}, "
               f"active experts {share['experts']:.0%}, attention projections {share['attn_proj']:.0%}, attention "
               f"core {share['attn_core']:.0%}, router {share['router']:.1%}); "
               f"train step {fl['train'] / 1e9:.0f} GFLOP")
    out.append("ceilings: fp32/bf16 GFLOP/s of a 4096x576x1536 matmul measured just before the row's timing (tinkerd: "
               "by train_bench before each batch); CPU share: the process's CPU time / wall / threads (tinkerd: "
               "the whole train_bench run, load included); below ~0.9 other processes took cores")
    out.append("")
    out.append("| row | batch | s/step | tokens/s | vs transformers eager | GFLOP/s | % bf16 peak | % fp32 peak "
               "| ceilings fp32/bf16 | CPU share | peak RSS MB |")
    out.append("|---|---|---:|---:|---:|---:|---:|---:|---:|---:|---:|")
    for r in rows:
        if "s" not in r:
            out.append(f"| {r['impl']} | failed (exit {r['rc']}) | | | | | | | | | |")
            continue
        ratio = f"{r['vs_hf_eager']:.2f}x" if r["vs_hf_eager"] is not None else "—"
        pct = {p: f"{100 * r[p + '_peak_frac']:.0f}%" if r[p + "_peak_frac"] else "—" for p in ("bf16", "fp32")}
        out.append(f"| {r['impl']} {label[r['kind']]} | {r['batch']} | {fmt_s(r['s'])} | {r['tokens_per_s']:.0f} | "
                   f"{ratio} | {r['gflops']:.0f} | {pct['bf16']} | {pct['fp32']} | "
                   f"{r.get('fp32_peak') or 0:.0f}/{r.get('bf16_peak') or 0:.0f} | {r.get('cpu_share', 0):.2f} | "
                   f"{r['peak_rss_mb']:,.0f} |")
    out.append("")
    for r in rows:
        if r.get("body_fwd_s") is not None:
            out.append(f"{r['impl']} forward split: body ({cfg['num_hidden_layers']} layers) {r['body_fwd_s']:.2f} s, "
                       f"lm_head + loss {r['head_fwd_s']:.2f} s")
    out.append("tinkerd: LoRA r32 on every target (attention, experts in the shared-outer layout, lm_head); "
               "fwd+bwd+optim = forward_backward + optim_step. transformers: PEFT LoRA r32 on q,k,v,o only (PEFT "
               "cannot express shared-outer expert LoRA), fwd+bwd+optim = forward + loss + backward + AdamW.")
    out.append("load average (1/5/15 min): start " + str(run_info["load_start"]) + "; " + "; ".join(
        f"{name}: {p['load_before']} -> {p['load_after']}" for name, p in run_info["phases"].items()))
    return "\n".join(out)


def print_stored(path, model_dir):
    """Re-prints the table of the last run stored in a results file."""
    runs = []
    with open(path) as f:
        for line in f:
            r = json.loads(line)
            if r.get("impl") == "moe_bench_run":
                runs.append((r, []))
            elif runs:
                runs[-1][1].append(r)
    run_info, rows = runs[-1]
    add_derived(rows)
    print(report(rows, {"model_dir": model_dir, **run_info}, model_config(run_info.get("model_dir", model_dir))))



def run_phase(args_list, what):
    """Runs this script (or train_bench) as a child; returns (its JSON lines, load before, load after, s)."""
    before = loadavg()
    t0, c0 = time.time(), children_cpu_s()
    print(f"moe_bench: {what} (load average {before})", file=sys.stderr, flush=True)
    proc = subprocess.run(args_list, stdout=subprocess.PIPE, text=True)
    after = loadavg()
    lines = [json.loads(l) for l in proc.stdout.splitlines() if l.startswith("{")]
    return proc.returncode, lines, before, after, time.time() - t0, children_cpu_s() - c0


def fmt_s(x):
    return f"{x:.2f}" if x is not None else "—"


def main():
    ap = argparse.ArgumentParser(description=__doc__)
    ap.add_argument("model_dir")
    ap.add_argument("--steps", type=int, default=2)
    ap.add_argument("--threads", type=int, default=2)
    ap.add_argument("--build", default=os.path.join(REPO, "build"), help="tinkerd build dir (bench/train_bench)")
    ap.add_argument("--results", default=None, help="JSON lines out (default BUILD/bench/moe_results.jsonl)")
    ap.add_argument("--experts", default="eager,grouped_mm", help="transformers experts implementations to time")
    ap.add_argument("--seqs", type=int, default=SEQS, help="transformers batch: sequences of 256 tokens")
    ap.add_argument("--skip-tinkerd", action="store_true")
    ap.add_argument("--report", metavar="RESULTS", help="only re-print the table of the last run stored in RESULTS")
    ap.add_argument("--phase", choices=["build", "hf"], help=argparse.SUPPRESS)
    ap.add_argument("--impl", help=argparse.SUPPRESS)
    args = ap.parse_args()

    if args.phase == "build":
        return phase_build(args.model_dir)
    if args.phase == "hf":
        return phase_hf(args.model_dir, args.impl, args.steps, args.threads, args.seqs)
    if args.report:
        return print_stored(args.report, args.model_dir)

    results = args.results or os.path.join(args.build, "bench", "moe_results.jsonl")
    os.makedirs(os.path.dirname(results), exist_ok=True)
    self_cmd = [sys.executable, os.path.abspath(__file__), args.model_dir, "--steps", str(args.steps),
                "--threads", str(args.threads), "--seqs", str(args.seqs)]
    run_info = {"date": time.strftime("%Y-%m-%d %H:%M:%S"), "model_dir": args.model_dir, "steps": args.steps,
                "threads": args.threads,
                "load_start": loadavg(), "phases": {}}

    if not os.path.exists(os.path.join(args.model_dir, "config.json")):
        rc, lines, b, a, s, _ = run_phase(self_cmd + ["--phase", "build"], f"building {args.model_dir}")
        if rc != 0:
            sys.exit("moe_bench: building the model failed")
        run_info["phases"]["build"] = {"load_before": b, "load_after": a, "seconds": round(s, 1), **lines[-1]}

    cfg = model_config(args.model_dir)
    rows = []
    peaks_eq = {}
    if not args.skip_tinkerd:
        tb = os.path.join(args.build, "bench", "train_bench")
        rc, lines, b, a, s, cpu = run_phase([tb, args.model_dir, "auto", str(args.steps), str(args.threads)],
                                            "tinkerd train_bench (equal 4x256, then mixed 2,624 tokens)")
        if rc != 0:
            sys.exit(f"moe_bench: train_bench exited with {rc}")
        run_info["phases"]["tinkerd"] = {"load_before": b, "load_after": a, "seconds": round(s, 1),
                                         "cpu_share": round(cpu / s / args.threads, 2)}
        peaks = {}
        for line in lines:
            if line.get("impl") == "gemm":
                peaks = line
                continue
            if line.get("impl") != "tinkerd":
                continue
            batch = line["batch"]
            lengths = [SEQ_LEN] * SEQS if batch == "equal" else MIXED_LENGTHS
            if batch == "equal":
                peaks_eq = peaks
            fl = count_flops(cfg, lengths)
            common = {"impl": "tinkerd", "weights": line["mode"], "batch": batch, "tokens": sum(lengths),
                      "cpu_share": run_info["phases"]["tinkerd"]["cpu_share"],
                      "fp32_peak": peaks.get("fp32_gflops"), "bf16_peak": peaks.get("bf16_gflops"),
                      "peak_rss_mb": line["peak_rss_mb"], "lora": "r32 all targets (experts shared-outer, lm_head)"}
            rows.append({**common, "kind": "fwd", "s": line["fwd_s"], "gflop": fl["forward"] / 1e9})
            rows.append({**common, "kind": "train", "s": line["step_s"], "optim_s": line["optim_s"],
                         "gflop": fl["train"] / 1e9})
    for impl in [x for x in args.experts.split(",") if x]:
        rc, lines, b, a, s, cpu = run_phase(self_cmd + ["--phase", "hf", "--impl", impl],
                                            f"transformers, experts_implementation={impl}, {args.seqs}x{SEQ_LEN}")
        run_info["phases"]["hf_" + impl] = {"load_before": b, "load_after": a, "seconds": round(s, 1), "rc": rc,
                                            "cpu_share": round(cpu / s / args.threads, 2)}
        if rc != 0 or not lines:
            rows.append({"impl": "transformers " + impl, "kind": "failed", "rc": rc})
            continue
        r = lines[-1]
        fl = count_flops(cfg, [SEQ_LEN] * args.seqs)
        common = {"impl": "transformers " + impl, "weights": "bf16", "batch": f"{args.seqs}x{SEQ_LEN}",
                  "tokens": r["tokens"], "peak_rss_mb": r["peak_rss_mb"], "attn": r["attn"]}
        rows.append({**common, "kind": "fwd", "s": r["fwd_s"], "times": r["fwd_times"], "gflop": fl["forward"] / 1e9,
                     "fp32_peak": r["peaks_fwd"]["fp32_gflops"], "bf16_peak": r["peaks_fwd"]["bf16_gflops"],
                     "cpu_share": r["cpu_share"]["fwd"], "body_fwd_s": r["body_fwd_s"], "head_fwd_s": r["head_fwd_s"]})
        rows.append({**common, "kind": "train", "s": r["step_s"], "times": r["step_times"],
                     "fp32_peak": r["peaks_train"]["fp32_gflops"], "bf16_peak": r["peaks_train"]["bf16_gflops"],
                     "cpu_share": r["cpu_share"]["train"],
                     "gflop": fl["train"] / 1e9, "lora": f"PEFT r32 q,k,v,o ({r['lora_params']:,} params); PEFT "
                     "cannot express shared-outer expert LoRA, so none on the experts (backward still runs through "
                     "them for the input gradients)"})
    run_info["load_end"] = loadavg()

    add_derived(rows)
    print(report(rows, run_info, cfg))
    with open(results, "a") as f:
        f.write(json.dumps({"impl": "moe_bench_run", **run_info}) + "\n")
        for r in rows:
            f.write(json.dumps(r) + "\n")
    print(f"moe_bench: rows appended to {results}", file=sys.stderr)


if __name__ == "__main__":
    main()
