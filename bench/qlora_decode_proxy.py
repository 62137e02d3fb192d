#!/usr/bin/env python3
"""Decode proxy of the QLoRA headline (bench/qlora_headline.py) that fits next to other work in 24 GB: the
Qwen3-30B-A3B-shaped Q4_K_M file cut to L layers (headline_gguf.proxy), base-model decode at batch 1 by tinkerd
(through the SDK) and by llama-bench on the same file in the same run, alternated, medians of --rounds, each after waiting (up to --quiet-wait s) for a quiet machine, the share
other processes used meanwhile recorded (the machine is shared: read the rows with little foreign use).
tinkerd's decode rate excludes the prompt: (GEN - 1) / (time of GEN tokens - time of 1 token), same prompt.
With two or more layer counts, each side's seconds per token t(L) = a + b·L are fitted and extrapolated to 48
layers (a: embedding, lm_head, sampling; b: one layer) -- the full model's estimate without loading it.
Usage: qlora_decode_proxy.py [--layers 4,8] [--rounds 3] [--gen 64] [--threads 2] [--skip-llamacpp]"""
import argparse
import json
import pathlib
import statistics
import subprocess
import sys
import time

import numpy as np

sys.path.insert(0, str(pathlib.Path(__file__).resolve().parent))
import headline_gguf  # noqa: E402
import llamacpp_bench  # noqa: E402
import qlora_headline as qh  # noqa: E402

VOCAB = 151643  # token ids below Qwen3's added tokens


def log(msg):
    print(f"qlora_decode_proxy: {msg}", file=sys.stderr, flush=True)


def llama_tg(bin_dir, model, threads, gen):
    """llama-bench tg<gen>, one repetition: tok/s."""
    cmd = [str(pathlib.Path(bin_dir) / "llama-bench"), "-m", str(model), "-t", str(threads), "-p", "0",
           "-n", str(gen), "-r", "1", "-o", "jsonl"]
    p = subprocess.run(cmd, capture_output=True, text=True, timeout=1800)
    rows = [json.loads(line) for line in p.stdout.splitlines() if line.startswith("{")]
    if p.returncode != 0 or not rows:
        raise RuntimeError(f"llama-bench failed ({p.returncode}): {p.stderr.strip()[-2000:]}")
    return float(rows[-1]["avg_ts"])


def sample_s(client, prompt, n):
    from tinker import types
    start = time.monotonic()
    out = client.sample(prompt=prompt, num_samples=1,
                        sampling_params=types.SamplingParams(max_tokens=n, temperature=1.0)).result(timeout=3600)
    return time.monotonic() - start, len(out.sequences[0].tokens)


def tinkerd_tg(client, prompt, gen):
    """Decode tok/s without the prompt: the time of gen tokens minus the faster of two of one token."""
    t1 = min(sample_s(client, prompt, 1)[0] for _ in range(2))
    tn, n = sample_s(client, prompt, gen)
    return (n - 1) / (tn - t1)


def quiet(args, what, fn):
    """fn() after waiting (up to --quiet-wait s) for other processes to use <= --max-foreign % of the cores;
    the value and the foreign share measured while it ran."""
    llamacpp_bench.wait_for_quiet(args.max_foreign, args.quiet_wait)
    noise = llamacpp_bench.ForeignCpu()
    value = fn()
    pct = noise.percent()
    log(f"{what}: {value:.2f} tok/s, others used {pct:.0f} % of the cores meanwhile")
    return value, pct


def measure(args, layers):
    shape = headline_gguf.proxy(layers)
    model = pathlib.Path(args.out_dir) / headline_gguf.file_name(shape)
    headline_gguf.write(model, shape, args.tokenizer)
    import tinker
    from tinker import types
    srv = qh.Server(args.build, model, args.threads, [qh.BASE_QUANT_FLAG, qh.BASE_QUANT_VALUE])
    ours, theirs = [], []
    try:
        srv.start()
        svc = tinker.ServiceClient(base_url=f"http://127.0.0.1:{srv.port}", api_key="tml-proxy")
        client = qh.resolved(svc.create_sampling_client(base_model=qh.MODEL_NAME))
        rng = np.random.default_rng(0)
        prompt = types.ModelInput.from_ints([int(t) for t in rng.integers(0, VOCAB, size=16)])
        sample_s(client, prompt, 4)  # warm: pages in, scratch allocated
        for r in range(args.rounds):
            if not args.skip_llamacpp:
                theirs.append(quiet(args, f"L={layers} round {r} llama.cpp",
                                    lambda: llama_tg(args.llamacpp_bin, model, args.threads, args.gen)))
            ours.append(quiet(args, f"L={layers} round {r} tinkerd", lambda: tinkerd_tg(client, prompt, args.gen)))
    finally:
        srv.stop()
    return {"layers": layers, "tinkerd": statistics.median(v for v, _ in ours),
            "llamacpp": statistics.median(v for v, _ in theirs) if theirs else float("nan"),
            "tinkerd_all": ours, "llamacpp_all": theirs}


def extrapolate(rows, side, layers=48):
    """Seconds per token a + b·L fitted over the rows, at `layers`: tok/s."""
    L = np.array([r["layers"] for r in rows], dtype=float)
    t = np.array([1.0 / r[side] for r in rows])
    b, a = np.polyfit(L, t, 1)
    return 1.0 / (a + b * layers), a, b


def main():
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--layers", default="8")
    ap.add_argument("--rounds", type=int, default=3)
    ap.add_argument("--gen", type=int, default=64)
    ap.add_argument("--threads", type=int, default=2)
    ap.add_argument("--out-dir", default=str(qh.CACHE / "bench"))
    ap.add_argument("--build", default=str(qh.ROOT / "build"))
    ap.add_argument("--llamacpp-bin", default=str(qh.CACHE / "llamacpp-0.3.36" / "bin"))
    ap.add_argument("--tokenizer", default=str(qh.TOKENIZER))
    ap.add_argument("--skip-llamacpp", action="store_true")
    ap.add_argument("--max-foreign", type=float, default=10, help="%% of the cores others may use (waited for)")
    ap.add_argument("--quiet-wait", type=float, default=30)
    args = ap.parse_args()
    rows = [measure(args, int(L)) for L in args.layers.split(",")]
    print("| layers | tinkerd tok/s | llama.cpp tok/s | ratio |\n| --- | --- | --- | --- |")
    for r in rows:
        print(f"| {r['layers']} | {r['tinkerd']:.2f} | {r['llamacpp']:.2f} | {r['tinkerd'] / r['llamacpp']:.2f}x |")
    if len(rows) >= 2:
        ours, a0, b0 = extrapolate(rows, "tinkerd")
        line = f"| 48 (fit) | {ours:.2f} | "
        if not args.skip_llamacpp:
            theirs, a1, b1 = extrapolate(rows, "llamacpp")
            line += f"{theirs:.2f} | {ours / theirs:.2f}x |"
            log(f"fit s/token: tinkerd {a0 * 1e3:.1f} + {b0 * 1e3:.2f}·L ms, llama.cpp {a1 * 1e3:.1f} + "
                f"{b1 * 1e3:.2f}·L ms")
        print(line)
    print(json.dumps({"bench": "qlora_decode_proxy", "rows": rows}))


if __name__ == "__main__":
    sys.exit(main())
