# Issue 22 §4 through the official SDK: a gap in a run's seq_id order never wedges it. The server runs with
# a small --max-body-bytes and a short --seq-gap-timeout-seconds.
# 1. The SDK's forward_backward of 30 datums x 501 tokens (~240 KB) is refused with 413; the SDK raises it
#    and numbers its next op seq_id + 1. The server read the refused body's first bytes (protobuf: model_id
#    and seq_id lead), released that seq_id at once, and said so in the 413 and its log: the next
#    forward_backward + optim_step complete well before the gap timeout, and training goes on.
# 2. A refused body whose seq_id cannot be read (legacy JSON, its ids after the data, sent on the wire):
#    the op behind it waits for the gap timeout, then runs; the log names the missing seq_id, and that
#    seq_id arriving late is a 400.
import json
import time

import numpy as np

import harness
import sdk_common as sdk
from harness import check
from tinker_wire import ApiError

MAX_BODY = 100000
GAP_S = 8  # --seq-gap-timeout-seconds here; the default (330 s) is explained in docs/seq-order.md
LR = 1e-3


def big_sequences(n=30, length=501):
    """The report's batch: n (tokens, targets) of `length` tokens, far over MAX_BODY on the wire."""
    rng = np.random.default_rng(7)
    return [(seq[:-1], seq[1:]) for seq in (rng.integers(1, harness.TOKEN_LIMIT, size=length + 1) for _ in range(n))]


def big_batch():
    return [sdk.datum(t, y, np.ones(len(t), dtype=np.float32)) for t, y in big_sequences()]


def big_json_body(model_id, seq_id):
    """The legacy JSON form with its ids after the data (as SDK <= 0.24 orders them): a prefix names neither."""
    data = [{"model_input": {"chunks": [{"type": "encoded_text", "tokens": t.tolist()}]},
             "loss_fn_inputs": {"target_tokens": {"data": y.tolist(), "dtype": "int64"}}} for t, y in big_sequences()]
    return json.dumps({"forward_backward_input": {"data": data, "loss_fn": "cross_entropy"},
                       "model_id": model_id, "seq_id": seq_id}).encode()


def log_text(srv):
    with open(srv.log_path, "rb") as f:
        return f.read().decode(errors="replace")


def refused_then_next_step(srv, svc, tc, batch):
    first, _ = sdk.step(tc, batch, LR)  # seq_ids 1 and 2
    fb = tc.forward_backward(big_batch(), "cross_entropy")  # seq_id 3: refused unread
    t0 = time.monotonic()
    try:
        fb.result()
        raise harness.CheckFailed("the oversized forward_backward succeeded (want 413)")
    except Exception as e:  # noqa: BLE001 - the SDK's class for a 413 differs between versions
        if isinstance(e, harness.CheckFailed):
            raise
        text = str(e)
    check("413" in text and "exceeds the limit of %d bytes" % MAX_BODY in text, "not a 413: %s" % text)
    check("seq_id 3 of model" in text and "is released" in text, "the 413 does not name seq_id 3: %s" % text)
    out, _ = sdk.step(tc, batch, LR)  # seq_ids 4 and 5
    waited = time.monotonic() - t0
    check(waited < GAP_S - 2, "the step after the 413 took %.1f s (the gap timeout is %d s)" % (waited, GAP_S))
    check("seq_id 3 of model" in log_text(srv) and "released: its /api/v1/forward_backward request was refused"
          in log_text(srv), "the server log does not name the released seq_id 3")
    later, _ = sdk.step(tc, batch, LR)  # seq_ids 6 and 7
    # The refused op left no trace: the same steps on a fresh client (same seed), with no 413 between them.
    losses = [first.metrics["loss:sum"], out.metrics["loss:sum"], later.metrics["loss:sum"]]
    reference = sdk.train(sdk.resolved(sdk.new_training_client(svc, rank=8, seed=0)), batch, [LR] * 3)
    harness.check_close(losses, reference, 1e-5, "losses around the 413 vs the same steps without it")
    return "step after the 413 in %.2f s; loss:sum %s as without it" % (waited, " -> ".join("%.3f" % x for x in losses))


def unreadable_refusal_waits_for_the_timeout(srv):
    """On the wire in JSON (this process's SDK owns the protobuf descriptors): a run whose seq_id `lost` is
    refused before it could be read, then the next forward_backward + optim_step."""
    wire = srv.wire()
    tc = harness.new_client(wire)
    datums = harness.sft_batch(seed=2)
    lost = tc.next_seq()
    body = big_json_body(tc.model_id, lost)
    check(len(body) > MAX_BODY, "the JSON body is only %d bytes" % len(body))
    r = wire.request("POST", "/api/v1/forward_backward", body, {"Content-Type": "application/json"})
    check(r.status == 413 and b"released" not in r.body, "want a plain 413: %d %r" % (r.status, r.body[:200]))
    t0 = time.monotonic()
    fb = wire.forward_backward_json(tc.model_id, tc.next_seq(), datums)
    opt = wire.optim_step(tc.model_id, tc.next_seq(), LR)
    out = wire.retrieve(fb, "ForwardBackward", proto=False)
    wire.retrieve(opt, "OptimStep", proto=False)
    waited = time.monotonic() - t0
    check(GAP_S - 1 <= waited < GAP_S + 20, "the op behind the gap ran after %.1f s (gap timeout %d s)"
          % (waited, GAP_S))
    check("loss:sum" in out.metrics, "forward_backward result: %r" % (out,))
    check("for seq_id %d, which never arrived" % lost in log_text(srv), "the log does not name seq_id %d" % lost)
    try:
        wire.forward_backward_json(tc.model_id, lost, datums)
        raise harness.CheckFailed("seq_id %d arriving after it was given up was accepted" % lost)
    except ApiError as e:
        check(e.status == 400 and "given up" in str(e), "late seq_id: %s" % e)
    return "the op behind an unreadable 413 ran after %.1f s" % waited


def run(ctx):
    srv = ctx.start_server(["--max-body-bytes", str(MAX_BODY), "--seq-gap-timeout-seconds", str(GAP_S)])
    svc = sdk.service(srv)
    tc = sdk.resolved(sdk.new_training_client(svc, rank=8, seed=0))
    batch = sdk.sft_batch(seed=1)
    released = ctx.case("413'd forward_backward: its seq_id released, the next step runs at once",
                        refused_then_next_step, srv, svc, tc, batch)
    timed_out = ctx.case("413 with an unreadable seq_id: the gap is given up after the timeout",
                         unreadable_refusal_waits_for_the_timeout, srv)
    ctx.finish()
    return "%s; %s" % (released, timed_out)
