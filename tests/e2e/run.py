#!/usr/bin/python3
# Runs tinkerd end-to-end scenarios: .venv/bin/python tests/e2e/run.py --build <build dir> <scenario>...
# Each scenario (scenario_<name>.py, function run(ctx) -> summary line) starts its own servers. The
# sdk_* scenarios drive the server with the official `tinker` SDK of the running interpreter (.venv:
# 0.38.0, .venv-sdk025: 0.25.0; --expect-sdk makes a wrong one fail), openai with the official
# `openai` client; codec, protocol, crash, load and hostile with the wire-level client (what the SDKs cannot send).
# Exit 0 when all pass; otherwise prints the failure, the servers' log tails, and exits 1.
import argparse
import os
import signal
import subprocess
import sys
import time
import traceback

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))

import harness  # noqa: E402
import wire_codec  # noqa: E402

WIRE_SCENARIOS = ["codec", "protocol", "crash", "load", "hostile", "disk_full", "dp", "dp_fault", "replicas"]
SDK_SCENARIOS = ["sdk_sft", "sdk_resume", "sdk_sample", "sdk_rl", "sdk_tenants", "sdk_dpo", "sdk_rest",
                 "sdk_snapshots", "sdk_moe", "sdk_qwen35", "sdk_seqgap", "sdk_meta", "sdk_vision"]
SCENARIOS = WIRE_SCENARIOS + SDK_SCENARIOS + ["openai", "metrics", "console", "openapi", "postgres"]
SCENARIO_TIMEOUT = 280  # seconds; the SDK retries some failures for minutes: fail before ctest kills us


class ScenarioTimeout(Exception):
    pass


def _timed_out(signum, frame):
    raise ScenarioTimeout("scenario ran past %d s" % SCENARIO_TIMEOUT)


def check_sdk(expected):
    """The interpreter must carry the official SDK of the expected version (never a silent skip)."""
    try:
        import tinker
    except ImportError as e:
        sys.exit("FAIL: %s cannot import the official tinker SDK: %s" % (sys.executable, e))
    if expected and tinker.__version__ != expected:
        sys.exit("FAIL: %s has tinker %s, expected %s" % (sys.executable, tinker.__version__, expected))
    return tinker.__version__


def run_one(build_dir, name):
    import importlib
    mod = importlib.import_module("scenario_" + name)
    ctx = harness.Context(build_dir)
    if name.startswith("sdk_"):
        import sdk_common
        sdk_common.mark_known(ctx)
    t0 = time.monotonic()
    signal.signal(signal.SIGALRM, _timed_out)
    signal.alarm(SCENARIO_TIMEOUT)
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
        signal.alarm(0)
        if ctx.known_hits:
            print("KNOWN FAILURES in e2e_%s (server bugs, see above): %s" % (name, ", ".join(ctx.known_hits)))
        ctx.cleanup()


def main():
    ap = argparse.ArgumentParser(description=__doc__)
    ap.add_argument("--build", required=True, help="build dir holding tinkerd (and python/)")
    ap.add_argument("--expect-sdk", help="the tinker SDK version the interpreter must have (e.g. 0.38.0)")
    ap.add_argument("scenarios", nargs="+", choices=SCENARIOS + ["all"])
    args = ap.parse_args()
    names = SCENARIOS if "all" in args.scenarios else args.scenarios
    if args.expect_sdk or any(n.startswith("sdk_") for n in names):
        print("tinker SDK %s (%s)" % (check_sdk(args.expect_sdk), sys.executable), flush=True)
    build = os.path.abspath(args.build)
    if len(names) > 1:  # one process per scenario: SDK 0.38 and the wire codec each register tinker_public.proto
        extra = ["--expect-sdk", args.expect_sdk] if args.expect_sdk else []
        failed = [n for n in names
                  if subprocess.call([sys.executable, os.path.abspath(__file__), "--build", build] + extra + [n])]
        if failed:
            print("FAILED: " + " ".join(failed))
        return 1 if failed else 0
    wire_codec.set_build_dir(build)
    failed = [n for n in names if not run_one(build, n)]
    if failed:
        print("FAILED: " + " ".join(failed))
        return 1
    return 0


if __name__ == "__main__":
    code = main()
    sys.stdout.flush()
    sys.stderr.flush()
    os._exit(code)  # the SDKs' background threads must not keep a finished (or failed) run alive
