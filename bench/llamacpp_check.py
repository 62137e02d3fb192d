# Same weights, same greedy text? Runs llama.cpp's llama-simple (greedy sampler) on bench/real_model.py's
# GGUF and tinkerd's /v1/completions (temperature 0) on the HF dir made from the same dequantised weights,
# with one text prompt, and reports how far the two continuations agree (characters and words). They need
# not agree to the end: bf16 kernels round differently (llama.cpp keeps an f16 KV cache, tinkerd bf16/fp32),
# and one flipped near-tie changes everything after it. One JSON line per dtype on stdout (kind
# "text_check", read by bench/sample_report.py), both texts on stderr.
# Usage: python3 bench/llamacpp_check.py BUILD LLAMACPP_BIN MODELS_DIR [--dtypes bf16,fp32] [--tokens 32]
import argparse
import http.client
import json
import os
import subprocess
import sys

sys.path.insert(0, os.path.join(os.path.dirname(os.path.abspath(__file__)), "..", "tests", "e2e"))
from harness import Server  # noqa: E402  (starts BUILD/tinkerd on a free port, waits for healthz)

DIRS = {"bf16": ("smollm135m-bf16", "smollm135m-bf16.gguf"), "fp32": ("smollm135m-f32", "smollm135m-f32.gguf")}
PROMPTS = ["The capital of France is", "Once upon a time, in a small village,"]


def llamacpp_text(binary, gguf_path, prompt, tokens):
    p = subprocess.run([os.path.join(binary, "llama-simple"), "-m", gguf_path, "-n", str(tokens), prompt],
                       stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)
    if p.returncode != 0:
        sys.stderr.write(p.stderr[-2000:])
        raise SystemExit("llamacpp_check: llama-simple failed")
    out = p.stdout[:-1] if p.stdout.endswith("\n") else p.stdout  # prompt pieces, new pieces, then one "\n"
    if not out.startswith(prompt):
        raise SystemExit(f"llamacpp_check: llama-simple's output does not start with the prompt: {out[:80]!r}")
    return out[len(prompt):]


def tinkerd_text(port, model, prompt, tokens):
    conn = http.client.HTTPConnection("127.0.0.1", port, timeout=300)
    body = {"model": model, "prompt": prompt, "max_tokens": tokens, "temperature": 0}
    conn.request("POST", "/v1/completions", json.dumps(body),
                 {"Authorization": "Bearer tml-bench", "Content-Type": "application/json"})
    resp = conn.getresponse()
    data = resp.read()
    if resp.status != 200:
        raise SystemExit(f"llamacpp_check: tinkerd answered {resp.status}: {data[:300]!r}")
    return json.loads(data)["choices"][0]["text"]


def agreement(a, b):
    chars = next((i for i, (x, y) in enumerate(zip(a, b)) if x != y), min(len(a), len(b)))
    wa, wb = a.split(), b.split()
    words = next((i for i, (x, y) in enumerate(zip(wa, wb)) if x != y), min(len(wa), len(wb)))
    return chars, words, len(wa), len(wb)


def check(o, port, dtype, prompt):
    ours = tinkerd_text(port, f"smollm135m-{dtype}", prompt, o.tokens)
    theirs = llamacpp_text(o.bin, os.path.join(o.models, DIRS[dtype][1]), prompt, o.tokens)
    chars, words, n_ours, n_theirs = agreement(ours, theirs)
    same = ours == theirs
    print(f"llamacpp_check {dtype}: prompt {prompt!r}\n  tinkerd:   {ours!r}\n  llama.cpp: {theirs!r}\n"
          f"  {'identical' if same else f'agree on the first {chars} characters, {words} words'}",
          file=sys.stderr, flush=True)
    print(json.dumps({"bench": "sample", "impl": "llamacpp", "kind": "text_check", "dtype": dtype, "prompt": prompt,
                      "max_tokens": o.tokens, "tinkerd": ours, "llamacpp": theirs, "identical": same,
                      "agree_chars": chars, "agree_words": words, "words": [n_ours, n_theirs]}), flush=True)


def main(argv=None):
    ap = argparse.ArgumentParser(description="greedy text of llama.cpp and tinkerd on the same weights")
    ap.add_argument("build")
    ap.add_argument("bin")
    ap.add_argument("models")
    ap.add_argument("--dtypes", default="bf16,fp32")
    ap.add_argument("--tokens", type=int, default=48)
    ap.add_argument("--prompt", action="append", help=f"repeatable (default: {PROMPTS})")
    o = ap.parse_args(argv)
    dtypes, prompts = o.dtypes.split(","), o.prompt or PROMPTS
    extra = ["--threads", "2"]
    for d in dtypes:
        extra += ["--model", f"smollm135m-{d}={os.path.join(o.models, DIRS[d][0])}"]
    server = Server(o.build, extra=extra, name="llamacpp-check")
    server.start()
    try:
        for d in dtypes:
            for prompt in prompts:
                check(o, server.port, d, prompt)
    finally:
        server.stop()
        server.cleanup()
    return 0


if __name__ == "__main__":
    sys.exit(main())
