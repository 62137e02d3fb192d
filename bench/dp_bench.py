#!/usr/bin/python3
# Data-parallel training throughput (issue 15 §1/§5): one run's SFT steps (forward_backward +
# optim_step, batch of --datums sequences of --tokens tokens) on `tinkerd --dp 1` and `--dp N`, through the
# official SDK; prints tokens/s of each and the gradient all-reduce totals rank 0 logs at exit.
# Usage: .venv/bin/python bench/dp_bench.py --build build --model NAME=PATH [--dp 2] [--steps 5] [--dp1-threads 1]
import argparse
import os
import re
import sys
import time

import numpy as np

sys.path.insert(0, os.path.join(os.path.dirname(os.path.abspath(__file__)), "..", "tests", "e2e"))
import harness  # noqa: E402
import sdk_common as sdk  # noqa: E402


def measure(ctx, args, dp):
    extra = ["--model", args.model, "--dp", str(dp)]
    if dp == 1 and args.dp1_threads:
        extra += ["--threads", str(args.dp1_threads)]
    srv = ctx.start_server(extra=extra, name="tinkerd-dp%d" % dp)
    svc = sdk.service(srv)
    name = args.model.split("=")[0]
    tc = sdk.resolved(sdk.new_training_client(svc, rank=32, seed=0, base_model=name))
    rng = np.random.default_rng(0)
    batch = [sdk.datum(rng.integers(1, 1000, args.tokens), rng.integers(1, 1000, args.tokens),
                       np.ones(args.tokens)) for _ in range(args.datums)]
    sdk.step(tc, batch, 1e-4)  # warm-up
    t0 = time.monotonic()
    losses = [sdk.step(tc, batch, 1e-4)[0].metrics["loss:sum"] for _ in range(args.steps)]
    seconds = time.monotonic() - t0
    srv.stop()
    with open(srv.log_path) as f:
        reduce_line = re.findall(r"gradient all-reduces: .*", f.read())
    return args.steps * args.datums * args.tokens / seconds, losses, reduce_line


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--build", required=True)
    ap.add_argument("--model", required=True, help="NAME=PATH as tinkerd's --model")
    ap.add_argument("--dp", type=int, default=2)
    ap.add_argument("--steps", type=int, default=5)
    ap.add_argument("--datums", type=int, default=8)
    ap.add_argument("--tokens", type=int, default=128)
    ap.add_argument("--dp1-threads", type=int, default=0, help="--threads of the --dp 1 server (0: every core)")
    args = ap.parse_args()
    ctx = harness.Context(args.build)
    try:
        for dp in (1, args.dp):
            tps, losses, reduce_line = measure(ctx, args, dp)
            print("--dp %d: %.0f tokens/s, losses %s %s" % (dp, tps, np.round(losses, 3).tolist(),
                                                            reduce_line[-1] if reduce_line else ""), flush=True)
    finally:
        ctx.cleanup()


if __name__ == "__main__":
    main()
