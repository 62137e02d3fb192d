# OpenAI endpoint load benchmark (`make bench`): starts build/tinkerd on a model, then 1, 16 and 64
# concurrent clients (threads, one keep-alive connection each) send short /v1/completions for a fixed
# time; prints requests/s and p50/p99 latency per concurrency, and one JSON line each for the report.
# CLI: python3 bench/openai_load.py BUILD_DIR [--model NAME=DIR] [--seconds 10] [--max-tokens 8]
# The default model is ../shared's stories260K (260K parameters): the numbers measure the serving path.
import argparse
import http.client
import json
import os
import sys
import threading
import time

sys.path.insert(0, os.path.join(os.path.dirname(os.path.abspath(__file__)), "..", "tests", "e2e"))
from harness import Server, shared_dir  # noqa: E402  (starts the binary on a free port, waits for healthz)


def one_client(port, body, deadline, latencies, errors):
    conn = http.client.HTTPConnection("127.0.0.1", port, timeout=60)
    headers = {"Authorization": "Bearer tml-bench", "Content-Type": "application/json"}
    while time.time() < deadline:
        start = time.perf_counter()
        try:
            conn.request("POST", "/v1/completions", body=body, headers=headers)
            resp = conn.getresponse()
            data = resp.read()
            if resp.status != 200 or not json.loads(data).get("choices"):
                errors.append(resp.status)
                continue
        except (OSError, http.client.HTTPException) as e:
            errors.append(str(e))
            conn = http.client.HTTPConnection("127.0.0.1", port, timeout=60)
            continue
        latencies.append(time.perf_counter() - start)


def run_level(port, body, clients, seconds):
    latencies, errors = [], []
    deadline = time.time() + seconds
    threads = [threading.Thread(target=one_client, args=(port, body, deadline, latencies, errors))
               for _ in range(clients)]
    start = time.perf_counter()
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    elapsed = time.perf_counter() - start
    latencies.sort()

    def pct(p):
        return latencies[min(len(latencies) - 1, int(p * len(latencies)))] * 1000 if latencies else float("nan")

    return {"bench": "openai", "clients": clients, "requests": len(latencies), "errors": len(errors),
            "req_per_s": len(latencies) / elapsed, "p50_ms": pct(0.50), "p99_ms": pct(0.99)}


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("build")
    ap.add_argument("--model", default="", help="NAME=DIR with a tokenizer.json (default: ../shared stories260K)")
    ap.add_argument("--seconds", type=float, default=10)
    ap.add_argument("--max-tokens", type=int, default=8)
    ap.add_argument("--prompt", default="Once upon a time")
    args = ap.parse_args()
    model = args.model or "stories260K=%s/models/stories260K/hf-f32" % shared_dir()
    extra = ["--model", model]
    name = model.split("=")[0]
    server = Server(args.build, extra=extra, name="openai-bench")
    server.start()
    try:
        body = json.dumps({"model": name, "prompt": args.prompt, "max_tokens": args.max_tokens, "temperature": 0.7})
        print("%8s %10s %10s %10s %10s %8s" % ("clients", "requests", "req/s", "p50 ms", "p99 ms", "errors"),
              file=sys.stderr)
        for clients in (1, 16, 64):
            row = run_level(server.port, body, clients, args.seconds)
            row["model"], row["max_tokens"] = name, args.max_tokens
            print("%8d %10d %10.1f %10.1f %10.1f %8d" % (clients, row["requests"], row["req_per_s"],
                                                        row["p50_ms"], row["p99_ms"], row["errors"]),
                  file=sys.stderr)
            print(json.dumps(row))
    finally:
        server.stop()
        server.cleanup()


if __name__ == "__main__":
    main()
