# Issue 15 §4: a follower of `tinkerd --dp 2` killed mid-step. The first op to meet the dead rank fails
# with category "server" within the collective timeout (--dist-timeout-seconds; a dead peer's closed
# connection usually fails it at once), nothing hangs, and rank 0 goes on training alone while `--dp`
# restarts the follower; the group then re-forms (generation 1: the log line and server_status) and later
# steps run on 2 ranks again. Replaying only the successful ops on a `--dp 1` server gives the same losses,
# so the failed op changed nothing (no half-applied gradient sum) and the re-formed group trains exactly.
# Uses the wire-level client (the SDK retries server errors).
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


def data_parallel(wire):
    return wire.get("server_status")["models"][0]["data_parallel"]


def wait_until_whole(srv, wire, old_pid):
    """--dp restarts the killed follower and the group re-forms (bounded wait; fails loudly)."""
    deadline = time.monotonic() + 90
    while time.monotonic() < deadline:
        if data_parallel(wire)["ranks"] == 2:
            break
        time.sleep(0.2)
    status = data_parallel(wire)
    check(status["ranks"] == 2 and status["generation"] >= 1, "the group did not re-form: %s" % status)
    check("data-parallel group re-formed: 2 ranks (generation %d)" % status["generation"] in srv.tail(400),
          "no re-formed log line")
    check(srv.child_pids() and srv.child_pids()[0] != old_pid, "the follower was not restarted")
    return status


def run(ctx):
    srv = ctx.start_server(extra=["--dp", "2", "--dist-timeout-seconds", "10"], name="tinkerd-dp-fault")
    wire = srv.wire()
    tc = new_client(wire, seed=SEED)
    batch = sft_batch(seed=5)
    log = []
    fb, _ = tc.step(batch, LR)
    log += [("fb", batch, loss_of(fb)), ("opt",)]
    check(data_parallel(wire) == {"ranks": 2, "world_size": 2, "generation": 0}, "at start: %s" % data_parallel(wire))
    old_pid = srv.child_pids()[0]
    message = fail_one_op_after_kill(srv, tc, batch, log)
    for _ in range(2):  # rank 0 alone (or already re-formed: either way the same losses)
        fb, _ = tc.step(batch, LR)
        log += [("fb", batch, loss_of(fb)), ("opt",)]
    check(wire.healthz() == {"status": "ok"}, "rank 0 stopped serving")
    status = wait_until_whole(srv, wire, old_pid)
    for _ in range(2):  # on 2 ranks again
        fb, _ = tc.step(batch, LR)
        log += [("fb", batch, loss_of(fb)), ("opt",)]
    check(data_parallel(wire)["ranks"] == 2, "the re-formed group failed: %s" % data_parallel(wire))
    check(log[-2][2] < log[0][2], "losses did not fall: %s" % [op[2] for op in log if op[0] == "fb"])
    replay(ctx, log)
    return ("failed op: %s; re-formed at generation %d; %d ops replayed on --dp 1 with the same losses"
            % (message[:80], status["generation"], len(log)))
