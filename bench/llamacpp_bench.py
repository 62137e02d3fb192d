# llama.cpp's side of the sampling benchmark, run in the same `make bench` as tinkerd's sample_bench on the
# same weights (bench/real_model.py's smollm135m-{bf16,f32}.gguf), with llama.cpp's own benchmark tools
# built by scripts/build-llamacpp.sh from PyPI's llama-cpp-python sdist. One JSON line per measurement on
# stdout, in sample_bench's style (impl "llamacpp"; bench/sample_report.py reads them), progress on stderr:
#   decode, batch B in 1/8/32: llama-batched-bench -npp PROMPT -ntg MAX_TOKENS -npl 1,8,32 (random prompts,
#     not shared, one sequence per batch row), aggregate S_TG tok/s = B x MAX_TOKENS / decode time, which
#     excludes the prompt as sample_bench's decode rate does; median of REPEATS invocations (kind "base")
#   batch 1 also as llama-bench tg128 (kind "tg"), the number llamacpp-anchor.md quotes
#   prefill: llama-bench -p 256,512 -n 0, median of its REPEATS samples (kind "prefill"; its time is the
#     time to first token minus sampling, and like sample_bench's GFLOP/s it leaves lm_head out)
# Every invocation: 2 threads (--threads), llama.cpp's defaults otherwise (flash attention auto, f16 KV
# cache, mmap), after waiting (up to --quiet-wait 60 s) for a quiet machine; re-run once (--retries) when
# other processes used more than --max-foreign % of the cores meanwhile (the quieter try is kept; its share
# is in foreign_cpu_pct).
# Usage: python3 bench/llamacpp_bench.py LLAMACPP_BIN MODELS_DIR [--dtypes bf16,fp32] [--repeats 3] ...
import argparse
import json
import os
import resource
import statistics
import subprocess
import sys
import time

GGUF_NAME = {"bf16": "smollm135m-bf16.gguf", "fp32": "smollm135m-f32.gguf"}


def log(msg):
    print(f"llamacpp_bench: {msg}", file=sys.stderr, flush=True)


def machine_busy_s():
    with open("/proc/stat") as f:
        v = [int(x) for x in f.readline().split()[1:9]]
    return (v[0] + v[1] + v[2] + v[5] + v[6] + v[7]) / os.sysconf("SC_CLK_TCK")


def children_s():
    u = resource.getrusage(resource.RUSAGE_CHILDREN)
    return u.ru_utime + u.ru_stime


class ForeignCpu:
    """Share of all cores used by processes other than this one and its children (bench/foreign_cpu.h)."""

    def __init__(self):
        self.wall0, self.busy0, self.own0 = time.monotonic(), machine_busy_s(), children_s() + time.process_time()

    def percent(self):
        wall = time.monotonic() - self.wall0
        foreign = (machine_busy_s() - self.busy0) - (children_s() + time.process_time() - self.own0)
        return max(0.0, 100.0 * foreign / (wall * (os.cpu_count() or 1))) if wall > 0 else 0.0


def wait_for_quiet(max_pct, timeout_s=60):
    for _ in range(int(timeout_s)):
        window = ForeignCpu()
        time.sleep(1)
        if window.percent() <= max_pct:
            return True
    return False


def run_tool(cmd, o):
    """(JSON objects printed by cmd, foreign CPU %) of the quietest of up to retries+1 runs."""
    best, max_foreign, retries = None, o.max_foreign, o.retries
    for attempt in range(retries + 1):
        wait_for_quiet(max_foreign, o.quiet_wait)
        noise = ForeignCpu()
        p = subprocess.run(cmd, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)
        pct = noise.percent()
        if p.returncode != 0:
            sys.stderr.write(p.stderr[-3000:])
            raise SystemExit(f"llamacpp_bench: {' '.join(cmd)} failed ({p.returncode})")
        # llama-batched-bench logs its JSON lines to stderr, llama-bench prints them to stdout.
        objs = [json.loads(line) for line in (p.stdout + "\n" + p.stderr).splitlines() if line.startswith("{")]
        if best is None or pct < best[1]:
            best = (objs, pct)
        if pct <= max_foreign:
            break
        then = "measuring again" if attempt < retries else "keeping the quietest try"
        log(f"  (others used {pct:.0f}% of the CPU; {then})")
    return best


def emit(row):
    print(json.dumps(row), flush=True)


def decode_rows(o, binary, model, dtype):
    """llama-batched-bench, REPEATS invocations; per batch the median aggregate S_TG."""
    n_ctx = max(o.batches) * (o.prompt + o.max_tokens)
    cmd = [os.path.join(binary, "llama-batched-bench"), "-m", model, "-t", str(o.threads), "-tb", str(o.threads),
           "-c", str(max(n_ctx, 2048)), "-b", "2048", "-ub", "512", "-npp", str(o.prompt),
           "-ntg", str(o.max_tokens), "-npl", ",".join(map(str, o.batches)), "--output-format", "jsonl"]
    log(f"{dtype} decode: {' '.join(cmd[1:])}")
    speeds, foreign = {b: [] for b in o.batches}, {b: [] for b in o.batches}
    for _ in range(o.repeats):
        objs, pct = run_tool(cmd, o)
        for r in objs:
            if r.get("pl") in speeds:
                speeds[r["pl"]].append(r["speed_tg"])
                foreign[r["pl"]].append(pct)
    for b in o.batches:
        if not speeds[b]:
            raise SystemExit(f"llamacpp_bench: no batched-bench result for batch {b}")
        tps = statistics.median(speeds[b])
        log(f"  {dtype} base b={b:<3d} decode {tps:7.1f} tok/s  {1e3 * b / tps:6.1f} ms/step  "
            f"runs {', '.join(f'{s:.1f}' for s in speeds[b])}  (others used {max(foreign[b]):.0f}% CPU)")
        emit({"bench": "sample", "impl": "llamacpp", "tool": "llama-batched-bench", "dtype": dtype, "kind": "base",
              "batch": b, "prompt_tokens": o.prompt, "max_tokens": o.max_tokens, "tokens_per_s": round(tps, 2),
              "runs_tokens_per_s": [round(s, 2) for s in speeds[b]], "ms_per_step": round(1e3 * b / tps, 2),
              "threads": o.threads, "foreign_cpu_pct": round(max(foreign[b]), 1)})


def bench_rows(o, binary, model, dtype):
    """llama-bench: prefill pp256/pp512 and tg128 (batch 1), REPEATS samples each, medians."""
    cmd = [os.path.join(binary, "llama-bench"), "-m", model, "-t", str(o.threads), "-r", str(o.repeats),
           "-p", ",".join(map(str, o.prefill)) or "0", "-n", str(o.max_tokens), "-o", "jsonl"]
    log(f"{dtype} prefill and tg: {' '.join(cmd[1:])}")
    objs, pct = run_tool(cmd, o)
    for r in objs:
        samples = r.get("samples_ts") or [r["avg_ts"]]
        tps = statistics.median(samples)
        n_prompt, n_gen = r["n_prompt"], r["n_gen"]
        common = {"bench": "sample", "impl": "llamacpp", "tool": "llama-bench", "dtype": dtype, "threads": o.threads,
                  "runs_tokens_per_s": [round(s, 2) for s in samples], "foreign_cpu_pct": round(pct, 1),
                  "build": r.get("build_commit"), "flash_attn": r.get("flash_attn"), "type_k": r.get("type_k")}
        if n_prompt and not n_gen:
            log(f"  {dtype} prefill {n_prompt} tokens: {tps:.0f} tok/s ({1e3 * n_prompt / tps:.0f} ms)  "
                f"(others used {pct:.0f}% CPU)")
            emit(dict(common, kind="prefill", batch=1, prompt_tokens=n_prompt, tokens_per_s=round(tps, 1),
                      ttft_ms=round(1e3 * n_prompt / tps, 1)))
        elif n_gen and not n_prompt:
            log(f"  {dtype} tg{n_gen} (batch 1): {tps:.1f} tok/s  (others used {pct:.0f}% CPU)")
            emit(dict(common, kind="tg", batch=1, max_tokens=n_gen, tokens_per_s=round(tps, 2),
                      ms_per_step=round(1e3 / tps, 2)))


def main(argv=None):
    ap = argparse.ArgumentParser(description="llama.cpp decode and prefill on the benchmark GGUFs")
    ap.add_argument("bin", help="directory with llama-bench and llama-batched-bench")
    ap.add_argument("models", help="directory with smollm135m-bf16.gguf / smollm135m-f32.gguf")
    ap.add_argument("--dtypes", default="bf16,fp32")
    ap.add_argument("--threads", type=int, default=2)
    ap.add_argument("--batches", default="1,8,32")
    ap.add_argument("--prompt", type=int, default=32)
    ap.add_argument("--max-tokens", type=int, default=128)
    ap.add_argument("--prefill", default="256,512")
    ap.add_argument("--repeats", type=int, default=3)
    ap.add_argument("--max-foreign", type=float, default=5)
    ap.add_argument("--retries", type=int, default=1)
    ap.add_argument("--quiet-wait", type=float, default=60, help="seconds to wait for a quiet machine per run")
    o = ap.parse_args(argv)
    o.batches = [int(x) for x in o.batches.split(",") if int(x) > 0]
    o.prefill = [int(x) for x in o.prefill.split(",") if int(x) > 0]
    for dtype in o.dtypes.split(","):
        model = os.path.join(o.models, GGUF_NAME[dtype])
        if not os.path.isfile(model):
            raise SystemExit(f"llamacpp_bench: {model} not found (bench/real_model.py writes it)")
        if o.batches:
            decode_rows(o, o.bin, model, dtype)
        if o.prefill or o.max_tokens:
            bench_rows(o, o.bin, model, dtype)
    return 0


if __name__ == "__main__":
    sys.exit(main())
