# Issue 15 §4, first slice: a follower of `tinkerd --dp 2` killed mid-step. The first op to meet the
# dead rank fails with category "server" within the collective timeout (--dist-timeout-seconds; a dead
# peer's closed connection usually fails it at once), nothing hangs, and rank 0 goes on training alone:
# later ops succeed, and replaying only the successful ops on a `--dp 1` server gives the same losses, so
# the failed op changed nothing (no half-applied gradient sum). Re-forming the group with a restarted
# rank needs a tinkerd restart. Uses the wire-level client (the SDK retries server errors).
import os
import signal
import time

from harness import check, check_close, new_client, sft_batch
from tinker_wire import RequestFailed

LR = 2e-3
SEED = 7


def loss_of(result):
    return result.metrics["loss:sum"]


def fail_one_op_after_kill(srv, tc, batch, log):
    """Kills the follower with a large op in flight; ops until the first failure. Returns its message."""
    big = batch * 8
    in_flight = tc.forward_backward_async(big)
    os.kill(srv.child_pids()[0], signal.SIGKILL)
    for attempt in range(3):
        datums, future = (big, in_flight) if attempt == 0 else (batch, tc.forward_backward_async(batch))
        t0 = time.monotonic()
        try:
            log.append(("fb", datums, loss_of(future.result(max_wait=60))))
        except RequestFailed as e:
            check(e.category == "server", "after the kill: category %r (%s)" % (e.category, e.message))
            return e.message
        finally:
            check(time.monotonic() - t0 < 45, "an op waited %.0f s after the kill" % (time.monotonic() - t0))
    raise AssertionError("no op failed after the follower was killed")


def replay(ctx, log):
    """The successful ops on a --dp 1 server, from the same seed: the same losses."""
    ref = new_client(ctx.start_server(name="tinkerd-dp1-replay").wire(), seed=SEED)
    for op in log:
        if op[0] == "opt":
            ref.optim_step(LR)
        else:
            check_close(loss_of(ref.forward_backward(op[1])), op[2], 1e-5, "replayed loss on --dp 1")


def run(ctx):
    srv = ctx.start_server(extra=["--dp", "2", "--dist-timeout-seconds", "10"], name="tinkerd-dp-fault")
    wire = srv.wire()
    tc = new_client(wire, seed=SEED)
    batch = sft_batch(seed=5)
    log = []
    fb, _ = tc.step(batch, LR)
    log += [("fb", batch, loss_of(fb)), ("opt",)]
    message = fail_one_op_after_kill(srv, tc, batch, log)
    for _ in range(2):  # rank 0 alone
        fb, _ = tc.step(batch, LR)
        log += [("fb", batch, loss_of(fb)), ("opt",)]
    check(wire.healthz() == {"status": "ok"}, "rank 0 stopped serving")
    check(log[-2][2] < log[0][2], "losses did not fall: %s" % [op[2] for op in log if op[0] == "fb"])
    replay(ctx, log)
    return "failed op: %s; %d ops after it replayed on --dp 1 with the same losses" % (message[:80], len(log))
