#!/usr/bin/python3
# Sampling replicas (issue 15 §2/§5): training and sampling of one base model at once, on `tinkerd` alone
# and on `tinkerd --sampling-replicas 1` (rank 0 trains on its share of the cores, the replica samples on
# the other), through the official SDK. For --seconds, one thread runs SFT steps (forward_backward +
# optim_step of --datums x --tokens) and --samplers threads sample --max-tokens tokens from the run's
# latest sampler weights (saved every --save-every steps, so new weights keep reaching the replica).
# Prints training tokens/s, sampled tokens/s and the adapter sync latencies rank 0 logs.
# Usage: .venv/bin/python bench/replica_bench.py --build build --model NAME=PATH [--seconds 60]
import argparse
import os
import re
import sys
import threading
import time

import numpy as np

sys.path.insert(0, os.path.join(os.path.dirname(os.path.abspath(__file__)), "..", "tests", "e2e"))
import harness  # noqa: E402
import sdk_common as sdk  # noqa: E402


class Shared:
    def __init__(self):
        self.sampler, self.stop = None, False
        self.trained, self.sampled, self.steps = 0, 0, 0
        self.lock = threading.Lock()


def trainer(tc, batch, args, shared):
    while not shared.stop:
        sdk.step(tc, batch, 1e-4)
        with shared.lock:
            shared.trained += args.datums * args.tokens
            shared.steps += 1
            save = shared.steps % args.save_every == 0
        if save:
            shared.sampler = sdk.resolved(tc.save_weights_and_get_sampling_client("s%d" % shared.steps))


def sampler(args, shared, seed):
    rng = np.random.default_rng(seed)
    while not shared.stop:
        sc = shared.sampler
        prompt = sdk.prompt(rng.integers(1, 1000, 32))
        res = sc.sample(prompt, 1, sdk.params(max_tokens=args.max_tokens, temperature=1.0)).result()
        with shared.lock:
            shared.sampled += sum(len(s.tokens) for s in res.sequences)


def measure(ctx, args, replicas):
    extra = ["--model", args.model] + (["--sampling-replicas", str(replicas)] if replicas else [])
    srv = ctx.start_server(extra=extra, name="tinkerd-r%d" % replicas)
    svc = sdk.service(srv)
    tc = sdk.resolved(sdk.new_training_client(svc, rank=32, seed=0, base_model=args.model.split("=")[0]))
    rng = np.random.default_rng(0)
    batch = [sdk.datum(rng.integers(1, 1000, args.tokens), rng.integers(1, 1000, args.tokens),
                       np.ones(args.tokens)) for _ in range(args.datums)]
    shared = Shared()
    sdk.step(tc, batch, 1e-4)  # warm-up
    shared.sampler = sdk.resolved(tc.save_weights_and_get_sampling_client("s0"))
    threads = [threading.Thread(target=trainer, args=(tc, batch, args, shared))]
    threads += [threading.Thread(target=sampler, args=(args, shared, s)) for s in range(args.samplers)]
    t0 = time.monotonic()
    for t in threads:
        t.start()
    time.sleep(args.seconds)
    shared.stop = True
    for t in threads:
        t.join()
    seconds = time.monotonic() - t0
    srv.stop()
    with open(srv.log_path) as f:
        sync = [float(ms) for ms in re.findall(r"adapter sent, [0-9.]+ MiB in ([0-9.]+) ms", f.read())]
    return shared.trained / seconds, shared.sampled / seconds, shared.steps, sync


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--build", required=True)
    ap.add_argument("--model", required=True, help="NAME=PATH as tinkerd's --model")
    ap.add_argument("--seconds", type=float, default=60)
    ap.add_argument("--datums", type=int, default=4)
    ap.add_argument("--tokens", type=int, default=128)
    ap.add_argument("--samplers", type=int, default=4)
    ap.add_argument("--max-tokens", type=int, default=32)
    ap.add_argument("--save-every", type=int, default=2)
    args = ap.parse_args()
    ctx = harness.Context(args.build)
    print("| setup | training tokens/s | sampled tokens/s | steps | adapter syncs (ms) |")
    print("|---|---|---|---|---|")
    try:
        for replicas in (0, 1):
            train, sampled, steps, sync = measure(ctx, args, replicas)
            label = "--sampling-replicas %d" % replicas if replicas else "one process"
            syncs = "n=%d, median %.0f, max %.0f" % (len(sync), np.median(sync), max(sync)) if sync else "-"
            print("| %s | %.0f | %.1f | %d | %s |" % (label, train, sampled, steps, syncs), flush=True)
    finally:
        ctx.cleanup()


if __name__ == "__main__":
    main()
