# Several front ends on one PostgreSQL store (issue 15 §3, §4 "a front end killed: another one answers"):
# a private PostgreSQL server (scripts/pg-test-server.sh), front end A on it with a shared --data-dir trains
# a run through the SDK and saves a checkpoint; front end B starts on the same database and directory, lists
# the runs and checkpoints, answers A's finished future, loads A's checkpoint (same logprobs as A) and
# samples A's sampler weights; A's live run is A's alone (B answers 404 for training it) and B's start
# leaves A's pending ops and runs alone. PostgreSQL restarts under both: every connection drops, A's
# pending op stays pending (A's heartbeat is recent while its advisory lock is gone) and A trains on. A is
# killed: B still answers for the same runs and trains the loaded copy; A's op that was pending fails
# through B (category server) once B's sweeper sees A gone (lock free, heartbeat older than 9 s).
import os
import shutil
import subprocess
import tempfile
import time

import numpy as np

import harness
import sdk_common as sdk
from harness import CheckFailed, check, expect_status, new_client
from tinker_wire import RequestFailed

LR = 1e-2
PG_SCRIPT = os.path.join(os.path.dirname(os.path.abspath(__file__)), "..", "..", "scripts", "pg-test-server.sh")


def start_postgres(state):
    out = subprocess.run([PG_SCRIPT, "start", state], capture_output=True, text=True, timeout=120)
    check(out.returncode == 0, "pg-test-server.sh could not start PostgreSQL: %s" % out.stderr[-2000:])
    return out.stdout.strip()


def train_on_a(svc_a, wire_a, batch, wire_batch):
    tc = sdk.resolved(sdk.new_training_client(svc_a, rank=8, seed=0))
    sdk.train(tc, batch, [LR] * 2)
    state = tc.save_state("s2").result().path
    sampler = tc.save_weights_for_sampler("s2").result().path
    logprobs = sdk.all_logprobs(tc.forward(batch, "cross_entropy").result())
    # A wire-level run (legacy JSON: SDK 0.38 holds the protobuf descriptors): its request ids are visible.
    wc = new_client(wire_a, rank=8, seed=1)
    request_id = wire_a.forward_backward_json(wc.model_id, wc.next_seq(), wire_batch, forward_only=True)
    return tc, state, sampler, logprobs, wc, request_id


def check_b_sees_a(wire_b, run_id, wc, request_id, result_a):
    runs = {r["training_run_id"] for r in wire_b.list_training_runs(limit=100)["training_runs"]}
    check({run_id, wc.model_id} <= runs, "B lists runs %r, A made %r" % (runs, (run_id, wc.model_id)))
    checkpoints = {c["checkpoint_id"] for c in wire_b.list_checkpoints(run_id)["checkpoints"]}
    check(checkpoints == {"weights/s2", "sampler_weights/s2"}, "B lists A's checkpoints %r" % checkpoints)
    result_b = wire_b.retrieve(request_id, "ForwardBackward", proto=False)
    check(np.array_equal(harness.all_logprobs(result_b), harness.all_logprobs(result_a)),
          "A's finished future read through B differs from A's answer")


def leave_pending(wire_a, wc, wire_batch):
    """An op behind a seq_id gap: pending on A for as long as A lives."""
    gap = wc.next_seq(2) + 1  # the first reserved seq id is never sent
    request_id = wire_a.forward_backward_json(wc.model_id, gap, wire_batch, forward_only=True)
    check(is_pending(wire_a, request_id), "an op behind a seq gap should be pending on A")
    return request_id


def is_pending(wire, request_id):
    r = wire.poll_once(request_id, "ForwardBackward", accept="application/json", timeout=15)
    return r.status == 200 and r.json().get("type") == "try_again"


def check_failed_by_b(wire_b, request_id):
    """A's op that was pending at its death: B's sweeper fails it (category server) within seconds."""
    deadline = time.monotonic() + 30
    while time.monotonic() < deadline and is_pending(wire_b, request_id):
        time.sleep(0.2)
    try:
        wire_b.retrieve(request_id, "ForwardBackward", proto=False, max_wait=5)
    except RequestFailed as e:
        check(e.category == "server", "A's orphaned op: category %r (%s)" % (e.category, e.message))
        return
    raise CheckFailed("A's op pending at its death should fail through B, not succeed or hang")


def restart_postgres_under_both(state, wire_a, wire_b, pending, tc_a, batch):
    """A PostgreSQL restart drops every connection: A (idle but for its heartbeat) is without its lock
    until it reconnects, and B's sweeper (every second) must not take it for dead meanwhile."""
    out = subprocess.run([PG_SCRIPT, "restart", state], capture_output=True, text=True, timeout=120)
    check(out.returncode == 0, "pg-test-server.sh could not restart PostgreSQL: %s" % out.stderr[-2000:])
    time.sleep(4)  # several of B's sweeps, and A's next heartbeat (3 s) reconnects it
    check(is_pending(wire_b, pending) and is_pending(wire_a, pending),
          "A's pending op must stay pending across a PostgreSQL restart (A is alive)")
    check(len(sdk.train(tc_a, batch, [LR])) == 1, "A keeps training after PostgreSQL restarted")


def check_b_loads(svc_b, state, sampler, batch, logprobs_a):
    tc_b = sdk.resolved(svc_b.create_training_client_from_state_with_optimizer(state))
    got = sdk.all_logprobs(tc_b.forward(batch, "cross_entropy").result())
    check(np.array_equal(got, logprobs_a), "A's checkpoint loaded on B: logprobs differ from A's")
    sc = sdk.resolved(svc_b.create_sampling_client(model_path=sampler))
    res = sc.sample(sdk.prompt([1, 2, 3]), 1, sdk.params(max_tokens=4, seed=7)).result()
    check(len(res.sequences[0].tokens) == 4, "B sampling A's sampler weights: %r" % res.sequences[0].tokens)
    return tc_b


def run(ctx):
    scratch = ctx.scratch_dir()
    state, shared_data = os.path.join(scratch, "pg"), tempfile.mkdtemp(prefix="tinkerd-e2e-shared-")
    url = start_postgres(state)
    try:
        flags = ["--database", url, "--poll-timeout-seconds", "2"]
        a = ctx.start_server(extra=flags, name="front-end-A", data_dir=shared_data)
        batch, wire_batch = sdk.sft_batch(seed=3), harness.sft_batch(seed=3)
        wire_a = a.wire()
        tc_a, state_path, sampler, logprobs_a, wc, request_id = train_on_a(sdk.service(a), wire_a, batch,
                                                                           wire_batch)
        run_id = tc_a.get_info().model_id
        result_a = wire_a.retrieve(request_id, "ForwardBackward", proto=False)
        pending = leave_pending(wire_a, wc, wire_batch)
        b = ctx.start_server(extra=flags, name="front-end-B", data_dir=shared_data)
        wire_b, svc_b = b.wire(), sdk.service(b)
        check_b_sees_a(wire_b, run_id, wc, request_id, result_a)
        check(len(sdk.train(tc_a, batch, [LR])) == 1, "A keeps training once B has started")
        check(is_pending(wire_b, pending) and is_pending(wire_a, pending),
              "B's start must leave A's pending op pending (no restart recovery on a shared database)")
        restart_postgres_under_both(state, wire_a, wire_b, pending, tc_a, batch)
        tc_b = check_b_loads(svc_b, state_path, sampler, batch, logprobs_a)
        expect_status(lambda: wire_b.forward_backward_json(wc.model_id, wc.next_seq(), wire_batch), (404,),
                      "training A's live run through B")
        a.kill9()
        check_b_sees_a(wire_b, run_id, wc, request_id, result_a)
        losses = sdk.train(tc_b, batch, [LR] * 2)
        check(losses[1] < losses[0], "B keeps training A's checkpoint after A died: losses %r" % losses)
        check_failed_by_b(wire_b, pending)
        return ("A trained + saved on PostgreSQL; B listed 2 runs, 2 checkpoints, read A's future; PostgreSQL "
                "restarted: A's pending op stayed pending, A trained on; B loaded A's checkpoint (identical "
                "logprobs), sampled it; after kill -9 of A, B still answers and trains, A's pending op failed "
                "(server)")
    finally:
        for server in ctx.servers:
            server.stop()
        subprocess.run([PG_SCRIPT, "stop", state], capture_output=True, timeout=60)
        shutil.rmtree(shared_data, ignore_errors=True)
