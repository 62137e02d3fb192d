#!/usr/bin/env python3
"""Decode proxy of the QLoRA headline (bench/qlora_headline.py) that fits next to other work in 24 GB: the
Qwen3-30B-A3B-shaped Q4_K_M file cut to L layers (headline_gguf.proxy), base-model decode at batch 1 by tinkerd
(through the SDK) and by llama-bench on the same file in the same run, alternated, medians of --rounds, each after waiting (up to --quiet-wait s) for a quiet machine, the share
other processes used meanwhile recorded (the machine is shared: read the rows with little foreign use).
tinkerd's decode rate excludes the prompt: (GEN - 1) / (time of GEN tokens - time of 1 token), same prompt.
With two or more layer counts, each side's seconds per token t(L) = a + b·L are fitted and extrapolated to the full
model's layers (48; 40 with --family qwen35moe) (a: embedding, lm_head, sampling; b: one layer) -- the full model's estimate without loading it.
--sample-activations fp32,int8 runs one server per mode (tinkerd's --sample-activations), each timed in every round.
Usage: qlora_decode_proxy.py [--family qwen3moe|qwen35moe] [--layers 4,8] [--rounds 3] [--gen 64] [--threads 2] [--skip-llamacpp]
       [--sample-activations fp32|int8|fp32,int8] [--gguf FILE --vocab N]  (any GGUF as it is, e.g. SmolLM2 Q4_1)"""
import argparse
import json
import os
import pathlib
import statistics
import subprocess
import sys
import time

import numpy as np

sys.path.insert(0, str(pathlib.Path(__file__).resolve().parent))
import headline_gguf  # noqa: E402
import headline_qwen35  # noqa: E402
import llamacpp_bench  # noqa: E402
import qlora_headline as qh  # noqa: E402

VOCAB = 151643  # token ids below Qwen3's added tokens


def log(msg):
    print(f"qlora_decode_proxy: {msg}", file=sys.stderr, flush=True)


def llama_tg(bin_dir, model, threads, gen):
    """llama-bench tg<gen>, one repetition: (tok/s, tokens per CPU-second: its rate over the cores it used on
    average during the whole invocation, load and warm-up included)."""
    cmd = [str(pathlib.Path(bin_dir) / "llama-bench"), "-m", str(model), "-t", str(threads), "-p", "0",
           "-n", str(gen), "-r", "1", "-o", "jsonl"]
    cpu0, t0 = llamacpp_bench.children_s(), time.monotonic()
    p = subprocess.run(cmd, capture_output=True, text=True, timeout=1800)
    share = (llamacpp_bench.children_s() - cpu0) / (time.monotonic() - t0)  # cores it used, on average
    rows = [json.loads(line) for line in p.stdout.splitlines() if line.startswith("{")]
    if p.returncode != 0 or not rows:
        raise RuntimeError(f"llama-bench failed ({p.returncode}): {p.stderr.strip()[-2000:]}")
    rate = float(rows[-1]["avg_ts"])
    return rate, rate / max(share, 1e-9)


def sample_s(client, prompt, n):
    from tinker import types
    start = time.monotonic()
    out = client.sample(prompt=prompt, num_samples=1,
                        sampling_params=types.SamplingParams(max_tokens=n, temperature=1.0)).result(timeout=3600)
    return time.monotonic() - start, len(out.sequences[0].tokens)


def tinkerd_tg(client, prompt, gen, pid):
    """Decode without the prompt: the time (and server CPU time) of gen tokens minus the faster of two runs of
    one token; (tok/s, tokens per CPU-second of the server)."""
    one = []
    for _ in range(2):
        c0 = cpu_s(pid)
        t, _ = sample_s(client, prompt, 1)
        one.append((t, cpu_s(pid) - c0))
    t1, c1 = min(one)
    c0 = cpu_s(pid)
    tn, n = sample_s(client, prompt, gen)
    cn = cpu_s(pid) - c0
    return (n - 1) / (tn - t1), (n - 1) / max(cn - c1, 1e-9)


def cpu_s(pid):
    """utime + stime of a running process (the server: not yet in RUSAGE_CHILDREN) in seconds."""
    if pid is None:
        return 0.0
    with open(f"/proc/{pid}/stat") as f:
        fields = f.read().rsplit(")", 1)[1].split()
    return (int(fields[11]) + int(fields[12])) / os.sysconf("SC_CLK_TCK")


def quiet(args, what, fn, pid=None):
    """fn() -> (tok/s, tok/s per CPU-second) after waiting (up to --quiet-wait s) for other processes to use
    <= --max-foreign % of the cores, retried up to --retries times while they used more; the quietest try:
    (tok/s, per CPU-second, foreign %). pid: a running process of ours (the server), not foreign."""
    best = None
    for _ in range(args.retries + 1):
        llamacpp_bench.wait_for_quiet(args.max_foreign, args.quiet_wait)
        noise, own0, t0 = llamacpp_bench.ForeignCpu(), cpu_s(pid), time.monotonic()
        rate, per_cpu = fn()
        own = (cpu_s(pid) - own0) / ((time.monotonic() - t0) * (os.cpu_count() or 1)) * 100
        pct = max(0.0, noise.percent() - own)
        log(f"{what}: {rate:.2f} tok/s ({per_cpu:.2f} per CPU-second of its {args.threads} threads), others used "
            f"{pct:.0f} % of the cores meanwhile")
        if best is None or pct < best[2]:
            best = (rate, per_cpu, pct)
        if pct <= args.max_foreign:
            break
    return best


def proxy_shape(family, layers):
    """(shape, mix) of the proxy cut to `layers`: Qwen3-30B-A3B's Q4_K_M-like mix, or the Qwen3.5-35B-A3B shape
    all Q4_K as its headline file (its layers alternate 3 Gated DeltaNet, 1 attention: give multiples of 4)."""
    if family == headline_qwen35.ARCH:
        return dict(headline_qwen35.FULL, layers=int(layers)), "q4_k"
    return headline_gguf.proxy(layers), "q4_k_m"


def measure(args, layers):
    """Per round: llama-bench, then each --sample-activations mode's server (all started up front, one idle
    while another is timed). Row keys: tinkerd / tinkerd_cpu for the first mode, tinkerd_<mode> for each."""
    if args.gguf:
        model = pathlib.Path(args.gguf)
    else:
        shape, mix = proxy_shape(args.family, layers)
        model = pathlib.Path(args.out_dir) / headline_gguf.file_name(shape, mix)
        headline_gguf.write(model, shape, args.tokenizer, mix=mix)
    import tinker
    from tinker import types
    modes = args.sample_activations.split(",")
    servers = {m: qh.Server(args.build, model, args.threads,
                            [qh.BASE_QUANT_FLAG, qh.BASE_QUANT_VALUE, "--sample-activations", m]) for m in modes}
    ours, theirs = {m: [] for m in modes}, []
    try:
        clients = {}
        for m, srv in servers.items():
            srv.start()
            svc = tinker.ServiceClient(base_url=f"http://127.0.0.1:{srv.port}", api_key="tml-proxy")
            clients[m] = qh.resolved(svc.create_sampling_client(base_model=qh.MODEL_NAME))
        rng = np.random.default_rng(0)
        prompt = types.ModelInput.from_ints([int(t) for t in rng.integers(0, args.vocab, size=16)])
        for c in clients.values():
            sample_s(c, prompt, 4)  # warm: pages in, scratch allocated
        for r in range(args.rounds):
            if not args.skip_llamacpp:
                theirs.append(quiet(args, f"L={layers} round {r} llama.cpp",
                                    lambda: llama_tg(args.llamacpp_bin, model, args.threads, args.gen)))
            for m, c in clients.items():
                pid = servers[m].proc.pid
                ours[m].append(quiet(args, f"L={layers} round {r} tinkerd ({m})",
                                     lambda: tinkerd_tg(c, prompt, args.gen, pid), pid))
    finally:
        for srv in servers.values():
            srv.stop()
    med = lambda rows, i: statistics.median(r[i] for r in rows) if rows else float("nan")  # noqa: E731
    row = {"layers": layers, "tinkerd": med(ours[modes[0]], 0), "llamacpp": med(theirs, 0),
           "tinkerd_cpu": med(ours[modes[0]], 1), "llamacpp_cpu": med(theirs, 1), "tinkerd_all": ours[modes[0]],
           "llamacpp_all": theirs, "modes": modes}
    for m in modes:
        row[f"tinkerd_{m}"], row[f"tinkerd_{m}_cpu"] = med(ours[m], 0), med(ours[m], 1)
        row[f"tinkerd_{m}_all"] = ours[m]
    return row


def extrapolate(rows, side, layers):
    """Seconds per token a + b·L fitted over the rows, at `layers`: tok/s."""
    L = np.array([r["layers"] for r in rows], dtype=float)
    t = np.array([1.0 / r[side] for r in rows])
    b, a = np.polyfit(L, t, 1)
    return 1.0 / (a + b * layers), a, b


def main():
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--layers", default="8")
    ap.add_argument("--family", choices=["qwen3moe", headline_qwen35.ARCH], default="qwen3moe",
                    help="which headline's shape the proxy cuts (qwen35moe: Qwen3.5-35B-A3B, all Q4_K)")
    ap.add_argument("--rounds", type=int, default=3)
    ap.add_argument("--gen", type=int, default=64)
    ap.add_argument("--threads", type=int, default=2)
    ap.add_argument("--out-dir", default=str(qh.CACHE / "bench"))
    ap.add_argument("--build", default=str(qh.ROOT / "build"))
    ap.add_argument("--llamacpp-bin", default=str(qh.CACHE / "llamacpp-0.3.36" / "bin"))
    ap.add_argument("--tokenizer", default=str(qh.TOKENIZER))
    ap.add_argument("--skip-llamacpp", action="store_true")
    ap.add_argument("--gguf", help="time this GGUF as it is instead of the proxy cuts (then give one --layers)")
    ap.add_argument("--vocab", type=int, default=VOCAB, help="prompt token ids are drawn below this")
    ap.add_argument("--sample-activations", default="fp32", help="tinkerd's modes, comma-separated: fp32,int8")
    ap.add_argument("--max-foreign", type=float, default=10, help="%% of the cores others may use (waited for)")
    ap.add_argument("--quiet-wait", type=float, default=60)
    ap.add_argument("--retries", type=int, default=2, help="re-measure while others used more than --max-foreign")
    args = ap.parse_args()
    rows = [measure(args, int(L)) for L in args.layers.split(",")]
    modes = args.sample_activations.split(",")
    print("| layers | activations | tinkerd tok/s | llama.cpp tok/s | ratio | tinkerd / CPU-s | llama.cpp / CPU-s "
          "| ratio |\n| --- | --- | --- | --- | --- | --- | --- | --- |")
    for r in rows:
        for m in modes:
            o, oc = r[f"tinkerd_{m}"], r[f"tinkerd_{m}_cpu"]
            print(f"| {r['layers']} | {m} | {o:.2f} | {r['llamacpp']:.2f} | {o / r['llamacpp']:.2f}x | "
                  f"{oc:.2f} | {r['llamacpp_cpu']:.2f} | {oc / r['llamacpp_cpu']:.2f}x |")
    full = (headline_qwen35 if args.family == headline_qwen35.ARCH else headline_gguf).FULL["layers"]
    if len(rows) >= 2 and not args.skip_llamacpp:
        for m in modes:
            cells = []
            for ours, theirs in ((f"tinkerd_{m}", "llamacpp"), (f"tinkerd_{m}_cpu", "llamacpp_cpu")):
                (o, a0, b0), (t, a1, b1) = extrapolate(rows, ours, full), extrapolate(rows, theirs, full)
                cells += [f"{o:.2f}", f"{t:.2f}", f"{o / t:.2f}x"]
                log(f"fit s/token ({ours}): tinkerd {a0 * 1e3:.1f} + {b0 * 1e3:.2f}·L ms, llama.cpp {a1 * 1e3:.1f} + "
                    f"{b1 * 1e3:.2f}·L ms")
            print(f"| {full} (fit) | {m} | " + " | ".join(cells) + " |")
    print(json.dumps({"bench": "qlora_decode_proxy", "rows": rows}))


if __name__ == "__main__":
    sys.exit(main())
