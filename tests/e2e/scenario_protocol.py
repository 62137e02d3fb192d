# Protocol cases of server-anchors §10 (5-8, 11-13): idempotent resends, seq_id conflicts, early
# arrivals, the fb/optim barrier, futures (unknown, failed, pending, encodings), lr-0 steps, unload,
# session expiry, error bodies (404/413/400), literals, REST routing, loss formulas, and sampling requests
# the SDK never sends (huge seq_ids of pickled clients, invalid bodies). Server: --poll-timeout 1.
import threading
import time

import numpy as np

import wire_codec as wc
import protocol_checks as pc
from harness import (all_logprobs, check, check_close, expect_status, expect_user_error, new_client,
                     sft_batch)
from sampling_client import SamplingClient, sample_body
from tinker_wire import ApiError

LR = 1e-2
MAX_BODY = 100000
P = [5, 6, 7, 8]
VOCAB = 260  # the built-in model's vocabulary


def resend_run(wire, batch, resend):
    """3 steps (fb + optim); with resend, every request is sent twice (identical bytes) and must map
    to the same request id. Returns the losses of 4 forward_backwards."""
    tc = new_client(wire, rank=8, seed=0)
    losses = []
    for _ in range(3):
        raw = wc.encode_fb_request(tc.model_id, tc.next_seq(), batch)
        rid = wire.forward_backward_raw(raw)
        if resend:
            check(wire.forward_backward_raw(raw) == rid, "identical fb resend: new request id")
        seq = tc.next_seq()
        oid = wire.optim_step(tc.model_id, seq, LR)
        if resend:
            check(wire.optim_step(tc.model_id, seq, LR) == oid, "identical optim resend: new request id")
        losses.append(wire.retrieve(rid, "ForwardBackward").metrics["loss:sum"])
        wire.retrieve(oid, "OptimStep")
        if resend:  # a resend after completion still maps to the finished request
            check(wire.forward_backward_raw(raw) == rid, "resend after completion: new request id")
    losses.append(tc.forward_backward(batch).metrics["loss:sum"])
    return tc, losses


def check_idempotency(wire, batch):
    tc, with_resend = resend_run(wire, batch, True)
    _, plain = resend_run(wire, batch, False)
    check_close(with_resend, plain, 1e-6, "losses with resends vs without (ops ran twice?)")
    other = sft_batch(seed=99)
    raw = wc.encode_fb_request(tc.model_id, tc.seq, other)  # seq already used with another body
    expect_status(lambda: wire.forward_backward_raw(raw), (400, 422), "same seq_id, different body")
    expect_status(lambda: wire.optim_step(tc.model_id, tc.seq, 0.5), (400, 422),
                  "optim_step reusing a forward_backward's seq_id")
    tc.forward(batch)  # the model still works with the next seq id
    check_concurrent_conflict(wire, tc, batch)


def check_concurrent_conflict(wire, tc, batch):
    """Two different bodies for one seq_id sent at once: exactly one is accepted, the other gets
    400/422 (never 409/5xx, which the SDK retries for minutes)."""
    seq = tc.next_seq()
    bodies = [wc.encode_fb_request(tc.model_id, seq, batch, forward_only=True),
              wc.encode_fb_request(tc.model_id, seq, sft_batch(seed=98), forward_only=True)]
    outcomes = [None, None]

    def send(i):
        try:
            outcomes[i] = wire.forward_backward_raw(bodies[i])
        except ApiError as e:
            outcomes[i] = e

    threads = [threading.Thread(target=send, args=(i,)) for i in (0, 1)]
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    ok = [o for o in outcomes if isinstance(o, str)]
    errs = [o for o in outcomes if isinstance(o, ApiError)]
    check(len(ok) == 1 and len(errs) == 1, "concurrent conflicting submissions: %r" % outcomes)
    check(errs[0].status in (400, 422) and errs[0].body, "conflict answered HTTP %d" % errs[0].status)
    wire.retrieve(ok[0], "Forward")
    tc.forward(batch)


def poll_pending(wire, rid, kind):
    r = wire.poll_once(rid, kind, accept="application/json")
    return r.status == 200 and r.json().get("type") == "try_again"


def check_early_arrivals(wire, batch):
    tc = new_client(wire, rank=8, seed=0)
    tc.forward(batch)  # seq 1
    first = tc.next_seq(3)  # 2, 3, 4
    r3 = wire.forward_backward(tc.model_id, first + 1, batch)
    r4 = wire.optim_step(tc.model_id, first + 2, LR)
    time.sleep(0.5)
    check(poll_pending(wire, r3, "ForwardBackward") and poll_pending(wire, r4, "OptimStep"),
          "seq 3/4 ran before seq 2 arrived")
    r2 = wire.forward_backward(tc.model_id, first, batch, forward_only=True)
    for rid, kind in ((r2, "Forward"), (r3, "ForwardBackward"), (r4, "OptimStep")):
        wire.retrieve(rid, kind)


def check_refused_chunk_releases_seq(wire, batch):
    """A forward_backward refused for its data (an image chunk: text-only models) is a 400, and its
    seq_id is released: the run's next operations run instead of waiting for it forever."""
    tc = new_client(wire, rank=8, seed=0)
    seq = tc.next_seq(2)
    P = wc.pb2()
    req = P.ForwardBackwardRequest()
    req.ParseFromString(wc.encode_fb_request(tc.model_id, seq, batch, forward_only=True))
    req.data[0].model_input.add().image.data = b"\x89PNG"
    try:
        wire.forward_backward_raw(req.SerializeToString())
        raise AssertionError("an image chunk was accepted by a text-only model")
    except ApiError as e:
        check(e.status == 400 and "image" in e.body, "image chunk: HTTP %d %r" % (e.status, e.body[:200]))
    rid = wire.forward_backward(tc.model_id, seq + 1, batch, forward_only=True)
    out = wire.retrieve(rid, "Forward", max_wait=30)
    check(len(out.outputs) == len(batch), "the op after the refused chunk did not run")


def check_barrier(wire, batch):
    """[fb, optim, fb, optim] held behind seq 1, then released: the second fb sees the first optim
    and equals a sequential reference."""
    held = new_client(wire, rank=8, seed=0)
    s = held.next_seq(5)
    ids = [wire.forward_backward(held.model_id, s + 1, batch), wire.optim_step(held.model_id, s + 2, LR),
           wire.forward_backward(held.model_id, s + 3, batch), wire.optim_step(held.model_id, s + 4, LR)]
    time.sleep(0.3)
    check(poll_pending(wire, ids[0], "ForwardBackward"), "op behind seq 1 ran early")
    wire.retrieve(wire.forward_backward(held.model_id, s, batch, forward_only=True), "Forward")
    fb1, fb2 = wire.retrieve(ids[0], "ForwardBackward"), wire.retrieve(ids[2], "ForwardBackward")
    wire.retrieve(ids[1], "OptimStep")
    wire.retrieve(ids[3], "OptimStep")
    ref = new_client(wire, rank=8, seed=0)
    ref.forward(batch)
    r1, _ = ref.step(batch, LR)
    r2 = ref.forward_backward(batch)
    check(not np.allclose(all_logprobs(fb1), all_logprobs(fb2)), "second fb does not see the first optim")
    check_close(all_logprobs(fb1), all_logprobs(r1), 1e-5, "barrier: first fb vs sequential")
    check_close(all_logprobs(fb2), all_logprobs(r2), 1e-5, "barrier: second fb vs sequential")


def check_failed_futures(wire, batch):
    tc = new_client(wire, rank=8, seed=0)
    e = expect_user_error(lambda: tc.forward_backward(batch, loss_fn="foo"), "unknown loss_fn foo")
    fine = tc.forward_async(batch).result(max_wait=20)  # the next seq id works (no gap left)
    expect_user_error(lambda: tc.forward_backward(batch, config={"bogus_key": 1.0}),
                      "cross_entropy with a bogus loss_fn_config key")
    again = tc.forward(batch)
    check(np.array_equal(all_logprobs(fine), all_logprobs(again)), "failed ops changed the model")
    no_target = [wc.Datum(d.tokens, weights=d.inputs["weights"]) for d in batch]
    expect_user_error(lambda: tc.forward_backward(no_target), "cross_entropy without target_tokens")
    tc.forward(batch)
    big_token = [wc.Datum([5, 10 ** 6], target_tokens=[6, 7], weights=[1, 1])]
    expect_user_error(lambda: tc.forward_backward(big_token), "token id beyond the vocabulary")
    bad_shape = [wc.Datum([5, 6, 7], target_tokens=[6, 7], weights=[1, 1])]
    expect_user_error(lambda: tc.forward_backward(bad_shape), "target_tokens shorter than the input")
    last = tc.forward_async(batch).result(max_wait=20)
    check(np.array_equal(all_logprobs(fine), all_logprobs(last)), "failed ops changed the model")
    return type(e).__name__


def check_lr_zero(wire, batch):
    tc = new_client(wire, rank=8, seed=0)
    tc.train(batch, [LR])  # non-zero LoRA B so updates show
    before = tc.forward(batch)
    tc.forward_backward(batch)
    tc.optim_step(0.0)
    after = tc.forward(batch)
    check_close(all_logprobs(after), all_logprobs(before), 1e-5, "lr 0 optim_step changed logprobs")
    tc.forward_backward(batch)
    tc.optim_step(1e-3)
    moved = tc.forward(batch)
    check(np.max(np.abs(all_logprobs(moved) - all_logprobs(after))) > 1e-5, "lr 1e-3 step changed nothing")
    return [tc.forward_backward(batch)]


def check_unknown_model(wire):
    r = wire.request("POST", "/api/v1/get_info", b'{"model_id":"nope","type":"get_info"}')
    pc.check_json_error(r, (404, 400), "get_info of an unknown model")
    try:
        wire.optim_step("no-such-model", 1, LR)
        raise AssertionError("optim_step on an unknown model accepted")
    except ApiError as e:
        check(e.status in (400, 404, 422), "optim_step on unknown model: HTTP %d" % e.status)


# ---------------------------------------------------------------- sampling at the wire level
# (what the SDK never sends: a pickled client's huge seq_ids set by hand, invalid sample bodies)

def check_pickled(sc):
    """A copy unpickled elsewhere uses huge, non-contiguous seq_ids on the same session."""
    kw = dict(max_tokens=6, temperature=1.0, seed=31)
    ref = sc.sample(P, 1, **kw).tokens
    for first in (10 ** 12 + 7, 10 ** 12 + 1007, 3 * 10 ** 9 + 1, 10 ** 18 + 3):
        copy = sc.unpickled(first)
        got = copy.sample(P, 1, **kw).tokens
        check(got == ref, "seq_id %d: %r vs %r" % (first, got, ref))
        check(copy.seq == first + 1, "client counter")
    return "seq_ids up to 1e18 accepted"


def check_invalid(wire, sid, sc):
    body = sample_body("sess-nope:sample:0", 0, P, 1, max_tokens=2)
    expect_status(lambda: wire.asample(body), (404,), "unknown sampling_session_id")
    body = sample_body(sc.sampling_session_id, sc.next_seq(), P, 0, max_tokens=2)
    expect_status(lambda: wire.asample(body), (400,), "num_samples 0")
    body = sample_body(sc.sampling_session_id, sc.next_seq(), P, 1, max_tokens=2, stop=["\n\n"])
    expect_status(lambda: wire.asample(body), (400,), "stop strings on a model without tokenizer.json")
    body = sample_body(sc.sampling_session_id, sc.next_seq(), P, 1, max_tokens=2, stop="ab")
    expect_status(lambda: wire.asample(body), (400,), "a single stop string without tokenizer.json")
    bad = [("empty prompt", [], 1, {}), ("token id >= vocab", [5, VOCAB], 1, {}),
           ("negative token id", [5, -1], 1, {}), ("prompt + max_tokens > context", [5] * 2047, 1, {}),
           ("temperature < 0", P, 1, {"temperature": -1.0}), ("top_p 0", P, 1, {"top_p": 0.0}),
           ("top_k 0", P, 1, {"top_k": 0}), ("num_samples 100000", P, 100000, {})]
    for what, prompt, n, kw in bad:
        kw = dict({"max_tokens": 2}, **kw)
        body = sample_body(sc.sampling_session_id, sc.next_seq(), prompt, n, **kw)
        expect_user_error(lambda: wire.retrieve(wire.asample(body), "Sample"), what)
    expect_status(lambda: wire.create_sampling_session(sid, 900, model_path="tinker://nope:train:0/sampler_weights/x"),
                  (404,), "model_path of a missing checkpoint")
    expect_status(lambda: wire.create_sampling_session(sid, 901, model_path="tinker://bad"),
                  (400, 404), "malformed model_path")
    expect_status(lambda: wire.create_sampling_session(sid, 902, base_model="no/such-model"),
                  (400, 404), "unknown base_model")


def run(ctx):
    srv = ctx.start_server(extra=["--poll-timeout-seconds", "1", "--max-body-bytes", str(MAX_BODY)])
    wire = srv.wire()
    sid = wire.create_session()
    batch = sft_batch(seed=4, n=2, length=12)
    ctx.case("client/config, healthz, telemetry, heartbeat literals", pc.check_service_literals, wire, sid)
    ctx.case("retrieve_future of an unknown id -> 404 JSON", pc.check_unknown_future, wire)
    ctx.case("idempotent resend; same seq_id other body -> 4xx", check_idempotency, wire, batch)
    ctx.case("early arrivals wait for the missing seq_id", check_early_arrivals, wire, batch)
    ctx.case("barrier [fb, optim, fb, optim]", check_barrier, wire, batch)
    ctx.case("a refused chunk releases its seq_id", check_refused_chunk_releases_seq, wire, batch)
    failed_as = ctx.case("failed futures are user errors; model keeps working", check_failed_futures,
                         wire, batch)
    results = ctx.case("optim_step lr 0 keeps logprobs, lr 1e-3 moves them", check_lr_zero, wire, batch)
    ctx.case("loss functions: IS, PPO, CISPO, DRO formulas; (N, K) sparse cross_entropy",
             pc.check_loss_functions, wire, batch)
    if results:
        ctx.case("metric keys name:reduction", pc.check_metric_keys, results)

    tc = new_client(wire, rank=8, session_id=sid, model_seq_id=5)
    ctx.case("results as protobuf / legacy JSON; legacy JSON requests", pc.check_result_encodings,
             wire, tc, batch)
    ctx.case("malformed protobuf / zstd / JSON -> 400 JSON", pc.check_bad_bodies, wire, tc, batch)
    ctx.case("oversized body -> 413 JSON", pc.check_oversized, srv, tc, MAX_BODY)
    ctx.case("model still works after rejected bodies", tc.forward, batch)
    ctx.case("checkpoint REST routes with '/' and ':'", pc.check_rest_routes, wire, tc)
    ctx.case("pending poll -> try_again JSON under Accept protobuf", pc.check_pending_poll, wire, tc, batch)
    ctx.case("unknown model -> 4xx", check_unknown_model, wire)
    ctx.case("unload_model, then calls fail", pc.check_unload, wire, batch)
    sc = SamplingClient.create(wire, sid, base_model="tinkerd/builtin-tiny")
    ctx.case("sampling: a pickled client's huge non-contiguous seq_ids", check_pickled, sc)
    ctx.case("sampling: invalid sample requests answer 4xx", check_invalid, wire, sid, sc)
    ctx.case("session expiry unloads the model, keeps checkpoints", pc.check_session_expiry, ctx, batch)
    ctx.finish()
    return "all protocol cases pass (bad loss_fn reported as %s)" % failed_as
