#!/usr/bin/python3
# Runs tinkerd end-to-end scenarios: python3 tests/e2e/run.py --build <build dir> <scenario>...
# Each scenario (scenario_<name>.py, function run(ctx) -> summary line) starts its own servers.
# Exit 0 when all pass; otherwise prints the failure, the servers' log tails, and exits 1.
import argparse
import os
import sys
import time
import traceback

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))

import harness  # noqa: E402
import wire_codec  # noqa: E402

SCENARIOS = ["codec", "sft", "resume", "crash", "tenants", "protocol", "load", "sample", "rl", "openai"]


def run_one(build_dir, name):
    import importlib
    mod = importlib.import_module("scenario_" + name)
    ctx = harness.Context(build_dir)
    t0 = time.monotonic()
    try:
        summary = mod.run(ctx)
        print("PASS e2e_%s (%.1f s): %s" % (name, time.monotonic() - t0, summary), flush=True)
        return True
    except Exception as e:  # any failure of the scenario is reported the same way
        print("FAIL e2e_%s (%.1f s): %s: %s" % (name, time.monotonic() - t0, type(e).__name__, e),
              flush=True)
        if not isinstance(e, harness.CheckFailed):
            traceback.print_exc()
        for s in ctx.servers:
            print("----- %s log tail (%s) -----" % (s.name, s.log_path))
            print(s.tail())
        return False
    finally:
        ctx.cleanup()


def main():
    ap = argparse.ArgumentParser(description=__doc__)
    ap.add_argument("--build", required=True, help="build dir holding tinkerd (and python/)")
    ap.add_argument("scenarios", nargs="+", choices=SCENARIOS + ["all"])
    args = ap.parse_args()
    build = os.path.abspath(args.build)
    wire_codec.set_build_dir(build)
    names = SCENARIOS if "all" in args.scenarios else args.scenarios
    failed = [n for n in names if not run_one(build, n)]
    if failed:
        print("FAILED: " + " ".join(failed))
        return 1
    return 0


if __name__ == "__main__":
    sys.exit(main())
