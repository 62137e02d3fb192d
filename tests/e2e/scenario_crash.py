# Crash recovery: train 3 steps, save_state, leave forward_backward requests pending, kill -9 the
# server and restart it on the same data dir. Runs and checkpoints must survive, the pending futures
# must fail with category "server" (never hang), and resuming with the optimizer must reproduce an
# uninterrupted run's next losses.
import time

from harness import check, check_close, new_client, sft_batch
from tinker_wire import RequestFailed

LR = 1e-2


def snapshot(wire):
    runs = sorted(r["training_run_id"] for r in wire.list_training_runs(limit=100)["training_runs"])
    cks = {}
    for run in runs:
        cks[run] = sorted((c["checkpoint_id"], c["tinker_path"], c["checkpoint_type"])
                          for c in wire.list_checkpoints(run)["checkpoints"])
    return runs, cks


def leave_pending(wire, tc, batch):
    """Submits a few real ops plus ops behind a seq_id gap (pending until the crash)."""
    ids = []
    big = sft_batch(seed=9, n=16, length=32)
    ids.append(tc.forward_backward_async(big).request_id)
    ids.append(tc.forward_backward_async(big).request_id)
    gap = tc.next_seq(2) + 1  # seq ids reserved; the first is never sent
    ids.append(wire.forward_backward(tc.model_id, gap, batch))
    gapped = ids[-1]
    r = wire.poll_once(gapped, "ForwardBackward", accept="application/json", timeout=10)
    check(r.status == 200 and r.json().get("type") == "try_again",
          "op behind a seq gap should still be pending: %d %r" % (r.status, r.body[:200]))
    return ids, gapped


def check_pending_failed(wire, request_ids):
    """Every request id from before the crash answers (result or error); the gapped one must be a
    server-category error. Returns how many were finished results."""
    done = 0
    for rid in request_ids:
        t0 = time.monotonic()
        try:
            wire.retrieve(rid, "ForwardBackward", max_wait=30)
            done += 1
        except RequestFailed as e:
            check(e.category == "server", "pending request %s after restart: category %r (%s)"
                  % (rid, e.category, e.message))
        except TimeoutError:
            raise AssertionError("retrieve_future %s hangs after the restart (%.0f s)"
                                 % (rid, time.monotonic() - t0))
    return done


def run(ctx):
    srv = ctx.start_server(extra=["--poll-timeout-seconds", "5"])
    wire = srv.wire()
    wire.client_config()
    batch = sft_batch(seed=3)

    ref = new_client(wire, rank=8, seed=0)
    ref_losses = ref.train(batch, [LR] * 6)

    tc = new_client(wire, rank=8, seed=0)
    first = tc.train(batch, [LR] * 3)
    check_close(first, ref_losses[:3], 1e-5, "same seed, same data: steps 1-3")
    sp = tc.save_state("s3")
    before = snapshot(wire)
    ids, gapped = leave_pending(wire, tc, batch)

    srv.kill9()
    t0 = time.monotonic()
    srv.start()
    restart_s = time.monotonic() - t0
    wire.client_config()  # same wire and port: the stale keep-alive connection is replaced
    after = snapshot(wire)
    check(after[0] == before[0], "training runs after restart %r, before %r" % (after[0], before[0]))
    check(after[1] == before[1], "checkpoints after restart %r, before %r" % (after[1], before[1]))

    finished = check_pending_failed(wire, ids)
    try:
        wire.retrieve(gapped, "ForwardBackward", max_wait=30)
        raise AssertionError("the op behind the seq gap completed after restart")
    except RequestFailed as e:
        check(e.category == "server", "gapped op: category %r" % e.category)

    info = wire.weights_info(sp)
    resumed = new_client(wire, base_model=info["base_model"], rank=info["lora_rank"])
    resumed.load_state(sp, optimizer=True)
    after_losses = resumed.train(batch, [LR] * 3)
    check_close(after_losses, ref_losses[3:], 1e-5, "resumed after crash vs uninterrupted steps 4-6")
    return "restart %.1f s; %d runs, checkpoints intact; %d/%d pre-crash ops finished, rest failed " \
           "with category server; resumed losses == uninterrupted" % (
               restart_s, len(after[0]), finished, len(ids))
