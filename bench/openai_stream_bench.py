# OpenAI streaming throughput vs the engine's own decode speed (issue 13: the engine thread only computes).
# Starts build/tinkerd on the real SmolLM2-135M bench model (made by `make bench`: bench/real_model.py
# writes BUILD/bench-models/smollm135m-{bf16,f32}), then streams greedy /v1/completions with the
# official `openai` client at 1 and 16 concurrent streams (fixed max_tokens; there is no ignore_eos, so
# a long story prompt keeps greedy decoding going and the tokens actually streamed are what is counted),
# and runs bench/sample_bench (the engine alone, no HTTP) at batch 1 and 16 with the same max_tokens.
# Prints one JSON line per measurement and a table: streamed tok/s, engine tok/s, and their ratio. The
# streamed rate is over each whole request (prefill and HTTP included); sample_bench's is decode only.
# Take numbers on a quiet machine; `--quick` makes a short smoke run (a few tokens) for busy ones.
# CLI: python3 bench/openai_stream_bench.py BUILD_DIR [--weights bf16|f32] [--max-tokens 128]
#        [--concurrency 1,16] [--models DIR] [--quick]
import argparse
import concurrent.futures
import json
import os
import subprocess
import sys
import time

sys.path.insert(0, os.path.join(os.path.dirname(os.path.abspath(__file__)), "..", "tests", "e2e"))
from harness import Server  # noqa: E402  (starts the binary on a free port, waits for healthz)

PROMPT = ("Once upon a time, in a small village at the edge of a great forest, there lived an old clockmaker "
          "who told long stories to every child who came by. One evening he began the longest story of all:")


def one_stream(client, model, max_tokens, results, index):
    start = time.perf_counter()
    first, pieces, usage = None, 0, None
    stream = client.completions.create(model=model, prompt=PROMPT, max_tokens=max_tokens, temperature=0,
                                       stream=True, stream_options={"include_usage": True})
    for chunk in stream:
        if chunk.usage is not None:
            usage = chunk.usage
        if chunk.choices and chunk.choices[0].text:
            pieces += 1
            if first is None:
                first = time.perf_counter() - start
    results[index] = {"seconds": time.perf_counter() - start, "ttft": first or float("nan"), "chunks": pieces,
                      "tokens": usage.completion_tokens if usage else pieces}


def run_streams(port, model, concurrency, max_tokens):
    import openai

    client = openai.OpenAI(base_url="http://127.0.0.1:%d/v1" % port, api_key="tml-bench", max_retries=0,
                           timeout=600)
    one_stream(client, model, 4, [None], 0)  # warm-up (first prefill, allocations)
    results = [None] * concurrency
    start = time.perf_counter()
    with concurrent.futures.ThreadPoolExecutor(concurrency) as pool:
        for i in range(concurrency):
            pool.submit(one_stream, client, model, max_tokens, results, i)
    elapsed = time.perf_counter() - start
    failed = sum(r is None for r in results)
    done = [r for r in results if r is not None]
    tokens = sum(r["tokens"] for r in done)
    ttfts = sorted(r["ttft"] for r in done)
    return {"bench": "openai_stream", "streams": concurrency, "max_tokens": max_tokens, "tokens": tokens,
            "failed": failed, "seconds": elapsed, "tokens_per_s": tokens / elapsed if elapsed else 0.0,
            "per_stream_tokens_per_s": (sum(r["tokens"] / r["seconds"] for r in done) / len(done)) if done else 0.0,
            "ttft_p50_ms": 1e3 * ttfts[len(ttfts) // 2] if ttfts else float("nan")}


def run_engine(build, model_dir, batches, max_tokens):
    cmd = [os.path.join(build, "bench", "sample_bench"), model_dir, "auto", "--max-tokens", str(max_tokens),
           "--batches", ",".join(str(b) for b in batches), "--kinds", "base", "--prefill", "0", "--repeats", "1",
           "--max-foreign", "100"]
    out = subprocess.run(cmd, check=True, capture_output=True, text=True).stdout
    rows = {}
    for line in out.splitlines():
        row = json.loads(line) if line.startswith("{") else {}
        if row.get("kind") == "base":
            rows[row["batch"]] = row
    return rows


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("build")
    ap.add_argument("--weights", default="bf16", choices=["bf16", "f32"])
    ap.add_argument("--models", default="", help="the bench models' folder (default BUILD/bench-models)")
    ap.add_argument("--max-tokens", type=int, default=128)
    ap.add_argument("--concurrency", default="1,16")
    ap.add_argument("--quick", action="store_true", help="a smoke run: 32 tokens per stream")
    args = ap.parse_args()
    max_tokens = 32 if args.quick else args.max_tokens
    levels = [int(c) for c in args.concurrency.split(",")]
    model_dir = os.path.join(args.models or os.path.join(args.build, "bench-models"), "smollm135m-" + args.weights)
    if not os.path.exists(os.path.join(model_dir, "tokenizer.json")):
        print("openai_stream_bench: no bench model at %s (run `make bench` first); skipped" % model_dir,
              file=sys.stderr)
        return 0
    name = "smollm135m"
    server = Server(args.build, extra=["--model", "%s=%s" % (name, model_dir)], name="openai-stream-bench")
    server.start()
    streamed = {}
    try:
        for c in levels:
            streamed[c] = run_streams(server.port, name, c, max_tokens)
            streamed[c]["weights"] = args.weights
            print(json.dumps(streamed[c]), flush=True)
    finally:
        server.stop()
        server.cleanup()
    engine = run_engine(args.build, model_dir, levels, max_tokens)  # after the server: not competing for cores
    for c in levels:
        if c in engine:
            print(json.dumps(engine[c]), flush=True)
    print("%8s %14s %14s %8s %12s" % ("streams", "stream tok/s", "engine tok/s", "ratio", "ttft p50 ms"),
          file=sys.stderr)
    for c in levels:
        e = engine.get(c, {}).get("tokens_per_s", float("nan"))
        s = streamed[c]
        print("%8d %14.1f %14.1f %8.2f %12.1f" % (c, s["tokens_per_s"], e, s["tokens_per_s"] / e if e else float("nan"),
                                                 s["ttft_p50_ms"]), file=sys.stderr)
    print("openai_stream_bench: take numbers on a quiet machine (the engine's rows report others' CPU use)",
          file=sys.stderr)
    return 0


if __name__ == "__main__":
    sys.exit(main())
