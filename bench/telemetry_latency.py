# Training-op latency as a client sees it (submit -> result), to show what recording telemetry costs the
# engine thread: ROUNDS rounds of forward_backward + optim_step on the built-in tiny model, one op at a
# time, against the tinkerd binary of BUILD_DIR (run it on two builds to compare). With the default
# --max-metric-points (2000) the forward_backward points are thinned at op 2001 (1000 rows merged in one
# transaction), which is the stall the telemetry writer takes off the engine thread.
#   .venv/bin/python bench/telemetry_latency.py BUILD_DIR [ROUNDS] [extra tinkerd flags...]
import os
import sys
import time

import numpy as np

sys.path.insert(0, os.path.join(os.path.dirname(os.path.abspath(__file__)), "..", "tests", "e2e"))
import harness  # noqa: E402


THINNING_OP = 2000  # 0-based: the 2001st point passes --max-metric-points 2000


def timed(fn):
    t0 = time.perf_counter()
    fn()
    return time.perf_counter() - t0


def summary(name, seconds):
    ms = np.asarray(seconds) * 1e3
    return "%-16s n=%d p50=%.2f ms p99=%.2f ms max=%.1f ms mean=%.2f ms" % (
        name, len(ms), np.percentile(ms, 50), np.percentile(ms, 99), ms.max(), ms.mean())


def main():
    build_dir = sys.argv[1]
    rounds = int(sys.argv[2]) if len(sys.argv) > 2 else 2200
    server = harness.Server(build_dir, sys.argv[3:], name="telemetry-bench").start()
    try:
        wire = server.wire()
        client = harness.new_client(wire, rank=8, seed=0)
        batch = harness.sft_batch(seed=3)
        fb, optim = [], []
        for _ in range(rounds):
            fb.append(timed(lambda: wire.retrieve(
                wire.forward_backward(client.model_id, client.next_seq(), batch), "ForwardBackward")))
            optim.append(timed(lambda: wire.retrieve(
                wire.optim_step(client.model_id, client.next_seq(), lr=1e-4), "OptimStep", proto=False)))
        print(summary("forward_backward", fb))
        print(summary("optim_step", optim))
        worst = int(np.argmax(fb))
        print("slowest forward_backward: op %d of %d" % (worst + 1, rounds))
        if rounds > THINNING_OP:  # the op whose point took forward_backward past the default bound
            print("forward_backward op %d (first thinning): %.1f ms; median of ops %d-%d: %.1f ms" % (
                THINNING_OP + 1, fb[THINNING_OP] * 1e3, THINNING_OP - 49, THINNING_OP,
                np.median(fb[THINNING_OP - 50:THINNING_OP]) * 1e3))
    finally:
        server.stop()
        server.cleanup()


if __name__ == "__main__":
    main()
