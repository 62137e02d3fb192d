# Qwen3.5 benchmark (issue 12 §4): forward and forward_backward tokens/s of tinkerd's engine on a Qwen3.5-shaped
# model cut to 4 layers (3 Gated DeltaNet + 1 gated full attention; the real Qwen3.5-4B or 27B text_config),
# bf16 weights, against transformers eager on the same model directory and token counts in the same run; and the
# Gated DeltaNet layer's time against the sequence length (256..4096), which must grow linearly.
#
#   .venv/bin/python bench/qwen35_bench.py build/bench-models/qwen35-4b-4l [--config 4B|27B] [--steps 2]
#   .venv/bin/python bench/qwen35_bench.py /tmp/q35-tiny --tiny --steps 1   # smoke run at toy sizes
#
# 1. MODEL_DIR is built once (Qwen3_5ForCausalLM, random N(0, 0.02) weights, seed 0, made in bf16; 4B: ~2.1 GB,
#    most of it the 248k-token embedding and lm_head) and reused. --tiny shrinks every size (a few MB).
# 2. tinkerd: `BUILD/bench/train_bench MODEL_DIR auto STEPS THREADS` (LoRA r32 on every target: in_proj_q/k/v/z,
#    out_proj, q/k/v/o, gate/up/down, lm_head; equal batch 4x256 and a mixed batch), as moe_bench.py reads it.
# 3. transformers (bf16, SDPA attention, its torch Gated DeltaNet: the chunked rule, no fla kernels), 4 x 256
#    random tokens, cross-entropy: (a) forward + loss under no_grad, (b) forward + loss + backward + AdamW with
#    PEFT LoRA r32 on q,k,v,o, gate,up,down, in_proj_qkv (one LoRA where Tinker trains three), in_proj_z, out_proj.
# 4. Scaling: `BUILD/bench/delta_rule_bench` (the engine's deltanet_mix, fp32, one sequence, no projections, and
#    its gated_delta_rule alone on the same inputs as transformers' rule) at
#    each length, forward and forward + backward, beside transformers' torch_chunk_gated_delta_rule on the same
#    shapes; "x per doubling" near 2.0 is linear growth (a quadratic layer would show 4.0).
# Each part runs in its own process. On a busy machine the numbers mean little: run it in a quiet window.
# Prints the tables and appends the rows as JSON lines to --results (default BUILD/bench/qwen35_results.jsonl).
import argparse
import json
import os
import statistics
import subprocess
import sys
import time

REPO = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
CONFIGS = {"4B": "Qwen3.5-4B.json", "27B": "Qwen3.5-27B.json"}
LAYER_TYPES = ["linear_attention"] * 3 + ["full_attention"]
SEQS, SEQ_LEN = 4, 256  # train_bench's equal batch (bench/bench_batches.h)
LENGTHS = [256, 512, 1024, 2048, 4096]
TINY = dict(hidden_size=64, intermediate_size=128, num_attention_heads=4, num_key_value_heads=2, head_dim=16,
            linear_num_key_heads=2, linear_num_value_heads=4, linear_key_head_dim=16, linear_value_head_dim=16,
            vocab_size=512)
TINY_LENGTHS = [64, 128, 256, 512]


def text_config(name, tiny):
    """The real text_config cut to 4 layers (3 linear + 1 full), or its toy-sized version."""
    with open(os.path.join(REPO, "tests", "data", "model_configs", CONFIGS[name])) as f:
        cfg = dict(json.load(f)["text_config"])
    for key in ("model_type", "transformers_version", "dtype", "torch_dtype", "mtp_num_hidden_layers",
                "mtp_use_dedicated_embeddings", "full_attention_interval"):
        cfg.pop(key, None)
    cfg.update(num_hidden_layers=len(LAYER_TYPES), layer_types=LAYER_TYPES, tie_word_embeddings=False)
    if tiny:
        cfg.update(TINY)
    return cfg


def timed(fn, steps):
    """Median wall seconds of `steps` calls after a warm-up."""
    fn()
    times = []
    for _ in range(steps):
        t = time.perf_counter()
        fn()
        times.append(time.perf_counter() - t)
    return statistics.median(times)


def phase_build(model_dir, name, tiny):
    import torch
    from transformers import Qwen3_5ForCausalLM, Qwen3_5TextConfig
    torch.manual_seed(0)
    torch.set_default_dtype(torch.bfloat16)
    model = Qwen3_5ForCausalLM(Qwen3_5TextConfig(**text_config(name, tiny)))
    tmp = model_dir.rstrip("/") + ".tmp"
    model.save_pretrained(tmp)
    os.replace(tmp, model_dir)
    print(json.dumps({"phase": "build", "params": sum(p.numel() for p in model.parameters())}))


def phase_hf(model_dir, steps, threads):
    import torch
    import torch.nn.functional as F
    from peft import LoraConfig, get_peft_model
    from transformers import AutoModelForCausalLM
    torch.set_num_threads(threads)
    model = AutoModelForCausalLM.from_pretrained(model_dir, dtype=torch.bfloat16).eval()
    V = model.config.vocab_size
    g = torch.Generator().manual_seed(42)
    ids, targets = torch.randint(3, V, (SEQS, SEQ_LEN), generator=g), torch.randint(3, V, (SEQS, SEQ_LEN), generator=g)

    def loss_of(logits):
        return F.cross_entropy(logits.float().reshape(-1, V), targets.reshape(-1))

    with torch.no_grad():
        fwd_s = timed(lambda: loss_of(model(input_ids=ids, use_cache=False).logits).item(), steps)
    targets_lora = ["q_proj", "k_proj", "v_proj", "o_proj", "gate_proj", "up_proj", "down_proj", "in_proj_qkv",
                    "in_proj_z", "out_proj"]
    peft_model = get_peft_model(model, LoraConfig(r=32, lora_alpha=32, lora_dropout=0.0, target_modules=targets_lora))
    peft_model.train()
    opt = torch.optim.AdamW([p for p in peft_model.parameters() if p.requires_grad], lr=1e-4)

    def train_step():
        loss_of(peft_model(input_ids=ids, use_cache=False).logits).backward()
        opt.step()
        opt.zero_grad(set_to_none=True)

    step_s = timed(train_step, steps)
    print(json.dumps({"phase": "hf", "fwd_s": fwd_s, "step_s": step_s, "tokens": SEQS * SEQ_LEN}))


def phase_hf_rule(model_dir, steps, threads, lengths):
    """transformers' torch_chunk_gated_delta_rule (fp32, one sequence) at each length: forward and fwd + bwd."""
    import torch
    from transformers.models.qwen3_5.modeling_qwen3_5 import torch_chunk_gated_delta_rule
    torch.set_num_threads(threads)
    with open(os.path.join(model_dir, "config.json")) as f:
        cfg = json.load(f)
    HV, Dk, Dv = cfg["linear_num_value_heads"], cfg["linear_key_head_dim"], cfg["linear_value_head_dim"]
    for T in lengths:
        def inputs(grad):
            torch.manual_seed(0)
            q, k = (torch.randn(1, T, HV, Dk, requires_grad=grad) for _ in range(2))
            v = torch.randn(1, T, HV, Dv, requires_grad=grad)
            g = -torch.rand(1, T, HV).requires_grad_(grad)
            beta = torch.rand(1, T, HV).requires_grad_(grad)
            return q, k, v, g, beta

        fwd_in, bwd_in = inputs(False), inputs(True)
        with torch.no_grad():
            fwd_s = timed(lambda: torch_chunk_gated_delta_rule(*fwd_in, use_qk_l2norm_in_kernel=True), steps)
        bwd_s = timed(lambda: torch_chunk_gated_delta_rule(*bwd_in, use_qk_l2norm_in_kernel=True)[0].sum().backward(),
                      steps)
        print(json.dumps({"impl": "transformers", "layer": "torch_chunk_gated_delta_rule", "tokens": T,
                          "fwd_s": fwd_s, "fwd_bwd_s": bwd_s}))


def run_child(cmd, what):
    print(f"qwen35_bench: {what} (load average {[round(x, 2) for x in os.getloadavg()]})", file=sys.stderr, flush=True)
    proc = subprocess.run(cmd, stdout=subprocess.PIPE, text=True)
    if proc.returncode != 0:
        sys.exit(f"qwen35_bench: {what} exited with {proc.returncode}")
    return [json.loads(line) for line in proc.stdout.splitlines() if line.startswith("{")]


def throughput_rows(tinkerd_lines, hf_line):
    rows = [{"impl": "tinkerd", "batch": l["batch"], "tokens": l["real_tokens"], "fwd_s": l["fwd_s"],
             "step_s": l["step_s"]} for l in tinkerd_lines if l.get("impl") == "tinkerd"]
    rows.append({"impl": "transformers eager", "batch": f"{SEQS}x{SEQ_LEN}", "tokens": hf_line["tokens"],
                 "fwd_s": hf_line["fwd_s"], "step_s": hf_line["step_s"]})
    return rows


def report(rows, scaling, info):
    out = [f"{info['model_dir']}: Qwen3.5-{info['config']} text config cut to 4 layers (3 Gated DeltaNet + 1 gated "
           f"attention){' TINY' if info['tiny'] else ''}, bf16, {info['threads']} threads, median of "
           f"{info['steps']} steps after a warm-up; {info['date']}", "",
           "| row | batch | fwd tokens/s | fwd+bwd+optim tokens/s |", "|---|---|---:|---:|"]
    for r in rows:
        out.append(f"| {r['impl']} | {r['batch']} | {r['tokens'] / r['fwd_s']:.0f} | "
                       f"{r['tokens'] / r['step_s']:.0f} |")
    out += ["", "Gated DeltaNet layer vs sequence length (one sequence, fp32; x = time ratio to the previous length)",
            "", "| impl | tokens | fwd ms | x | fwd+bwd ms | x | µs/token fwd+bwd |", "|---|---:|---:|---:|---:|---:|---:|"]
    # one run of rows per (impl, layer): tinkerd's whole mixer, tinkerd's rule alone, transformers' rule
    for impl, layer in dict.fromkeys((s["impl"], s["layer"]) for s in scaling):
        prev = None
        for r in [s for s in scaling if s["impl"] == impl and s["layer"] == layer]:
            ratio = (lambda key: f"{r[key] / prev[key]:.2f}" if prev else "—")
            out.append(f"| {r['layer']} | {r['tokens']} | {1e3 * r['fwd_s']:.1f} | {ratio('fwd_s')} | "
                       f"{1e3 * r['fwd_bwd_s']:.1f} | {ratio('fwd_bwd_s')} | {1e6 * r['fwd_bwd_s'] / r['tokens']:.1f} |")
            prev = r
    return "\n".join(out)


def main():
    ap = argparse.ArgumentParser(description="Qwen3.5 (4 layers) tinkerd vs transformers, and delta-rule scaling")
    ap.add_argument("model_dir")
    ap.add_argument("--config", choices=sorted(CONFIGS), default="4B")
    ap.add_argument("--tiny", action="store_true", help="toy sizes, for a smoke run")
    ap.add_argument("--steps", type=int, default=2)
    ap.add_argument("--threads", type=int, default=2)
    ap.add_argument("--build", default=os.path.join(REPO, "build"))
    ap.add_argument("--results", default=None)
    ap.add_argument("--phase", choices=["build", "hf", "hf_rule"], help=argparse.SUPPRESS)
    args = ap.parse_args()
    lengths = TINY_LENGTHS if args.tiny else LENGTHS
    if args.phase == "build":
        return phase_build(args.model_dir, args.config, args.tiny)
    if args.phase == "hf":
        return phase_hf(args.model_dir, args.steps, args.threads)
    if args.phase == "hf_rule":
        return phase_hf_rule(args.model_dir, args.steps, args.threads, lengths)

    me = [sys.executable, os.path.abspath(__file__), args.model_dir, "--config", args.config, "--steps",
          str(args.steps), "--threads", str(args.threads)] + (["--tiny"] if args.tiny else [])
    if not os.path.exists(os.path.join(args.model_dir, "config.json")):
        run_child(me + ["--phase", "build"], f"building {args.model_dir}")
    tinkerd = run_child([os.path.join(args.build, "bench", "train_bench"), args.model_dir, "auto", str(args.steps),
                         str(args.threads)], "tinkerd train_bench")
    hf = run_child(me + ["--phase", "hf"], "transformers eager")[-1]
    with open(os.path.join(args.model_dir, "config.json")) as f:
        cfg = json.load(f)
    dims = [str(cfg[k]) for k in ("linear_num_key_heads", "linear_num_value_heads", "linear_key_head_dim",
                                  "linear_value_head_dim", "linear_conv_kernel_dim")]
    scaling = run_child([os.path.join(args.build, "bench", "delta_rule_bench")] + dims +
                        [str(args.steps), str(args.threads)] + [str(n) for n in lengths], "tinkerd deltanet_mix")
    scaling += run_child(me + ["--phase", "hf_rule"], "transformers torch_chunk_gated_delta_rule")
    info = {"date": time.strftime("%Y-%m-%d %H:%M:%S"), "model_dir": args.model_dir, "config": args.config,
            "tiny": args.tiny, "steps": args.steps, "threads": args.threads}
    rows = throughput_rows(tinkerd, hf)
    print(report(rows, scaling, info))
    results = args.results or os.path.join(args.build, "bench", "qwen35_results.jsonl")
    os.makedirs(os.path.dirname(results), exist_ok=True)
    with open(results, "a") as f:
        for r in [{"impl": "qwen35_bench_run", **info}] + rows + scaling:
            f.write(json.dumps(r) + "\n")
    print(f"qwen35_bench: rows appended to {results}", file=sys.stderr)


if __name__ == "__main__":
    main()
