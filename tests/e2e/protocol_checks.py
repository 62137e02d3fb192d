# HTTP-level protocol checks used by scenario_protocol: status codes and bodies of errors (401/404/
# 413/400), malformed protobuf and zstd, telemetry/healthz/client-config literals, retrieve_future on
# unknown or pending ids, legacy JSON encodings, REST routes with '/' and ':' in ids, unload, expiry.
import json
import time

import numpy as np

import wire_codec as wc
from harness import (all_logprobs, check, check_close, expect_status, expect_user_error, new_client,
                     sft_batch)

PROTO = "application/x-protobuf"


def check_json_error(r, statuses, what):
    check(r.status in statuses, "%s: HTTP %d (want %s): %r" % (what, r.status, statuses, r.body[:200]))
    check(r.body, "%s: HTTP %d with an empty body" % (what, r.status))
    check("application/json" in r.content_type, "%s: error Content-Type %r" % (what, r.content_type))
    try:
        obj = json.loads(r.body)
    except ValueError:
        raise AssertionError("%s: error body is not JSON: %r" % (what, r.body[:200]))
    check(isinstance(obj, dict), "%s: error body %r" % (what, obj))
    return obj


def check_service_literals(wire, session_id):
    check(wire.healthz() == {"status": "ok"}, "healthz")
    cfg = wire.client_config()
    check(cfg.get("use_pyqwest_transport") is False, "client/config %r" % cfg)
    tel = wire.telemetry(session_id)
    check(tel == {"status": "accepted"}, "telemetry answered %r (must be exactly accepted)" % tel)
    hb = wire.heartbeat(session_id)
    check(hb in ({}, {"type": "session_heartbeat"}) or isinstance(hb, dict), "heartbeat %r" % hb)


def check_unknown_future(wire):
    for accept in ("application/json", PROTO):
        r = wire.poll_once("req-doesnotexist0000", "ForwardBackward", accept=accept)
        check_json_error(r, (404,), "retrieve_future of an unknown id (Accept %s)" % accept)


def check_pending_poll(wire, tc, batch):
    """An op behind a seq gap stays pending; a poll asking for protobuf gets try_again JSON within the
    server's 1 s poll timeout. Returns the gapped request id (left pending)."""
    seq = tc.next_seq(2) + 1
    rid = wire.forward_backward(tc.model_id, seq, batch, forward_only=True)
    t0 = time.monotonic()
    r = wire.poll_once(rid, "Forward", accept=PROTO)
    took = time.monotonic() - t0
    check(r.status == 200 and "application/json" in r.content_type,
          "pending poll: HTTP %d %r %r" % (r.status, r.content_type, r.body[:200]))
    obj = r.json()
    check(obj.get("type") == "try_again" and obj.get("request_id") == rid, "pending poll body %r" % obj)
    check(obj.get("queue_state") in ("active", "paused_capacity", "paused_rate_limit"),
          "try_again queue_state %r" % obj.get("queue_state"))
    check(took < 5, "pending poll held %.1f s with --poll-timeout-seconds 1" % took)
    check(0.5 < took, "pending poll answered in %.2f s: not a long-poll" % took)
    return rid


def check_result_encodings(wire, tc, batch):
    """A completed forward polled with Accept protobuf (protobuf body) and with Accept JSON (legacy
    JSON shape) gives the same numbers; the legacy JSON request forms work too."""
    fut = tc.forward_async(batch)
    proto = fut.result()
    r = wire.poll_once(fut.request_id, "Forward", accept=PROTO)
    check(r.status == 200 and PROTO in r.content_type, "completed poll with Accept protobuf: %r" % r.content_type)
    r = wire.poll_once(fut.request_id, "Forward", accept="application/json")
    check(r.status == 200 and "application/json" in r.content_type,
          "completed poll with Accept JSON: HTTP %d %r" % (r.status, r.content_type))
    legacy = wc.decode_fb_json(r.json())
    check(len(legacy.outputs) == len(batch), "legacy JSON result: %d outputs" % len(legacy.outputs))
    check_close(all_logprobs(legacy), all_logprobs(proto), 1e-6, "JSON vs protobuf result")
    check_close(legacy.metrics["loss:sum"], proto.metrics["loss:sum"], 1e-6, "JSON vs protobuf loss")
    rid = wire.forward_backward_json(tc.model_id, tc.next_seq(), batch, forward_only=True)
    via_forward = wire.retrieve(rid, "Forward")
    check_close(all_logprobs(via_forward), all_logprobs(proto), 1e-6, "/api/v1/forward (JSON request)")
    rid = wire.forward_backward_json(tc.model_id, tc.next_seq(), batch)
    via_fb = wire.retrieve(rid, "ForwardBackward")
    check_close(all_logprobs(via_fb), all_logprobs(proto), 1e-6, "legacy JSON forward_backward")


def check_bad_bodies(wire, tc, batch):
    raw = wc.encode_fb_request(tc.model_id, tc.seq + 1, batch)
    for body, enc, what in ((b"\xff\xff\xff\xff garbage", None, "malformed protobuf"),
                            (raw[: len(raw) // 2], None, "truncated protobuf"),
                            (b"\x28\xb5\x2f\xfd garbage", "zstd", "malformed zstd")):
        headers = {"Content-Type": PROTO}
        if enc:
            headers["Content-Encoding"] = enc
        r = wire.request("POST", "/api/v1/forward_backward", body, headers)
        check_json_error(r, (400, 422), what)
    r = wire.request("POST", "/api/v1/create_session", b"{not json", {})
    check_json_error(r, (400, 422), "malformed JSON")


def check_oversized(srv, tc, limit):
    big = sft_batch(seed=7, n=1, length=(limit // 4) + 100)  # > limit bytes of int32 tokens alone
    seq = tc.next_seq()  # used up, as the SDK's counter is by a refused request
    raw = wc.encode_fb_request(tc.model_id, seq, big)
    check(len(raw) > limit, "oversized body is only %d bytes" % len(raw))
    w = srv.wire()
    try:
        r = w.request("POST", "/api/v1/forward_backward", raw, {"Content-Type": PROTO})
    finally:
        w.close()
    check_json_error(r, (413,), "oversized forward_backward (%d bytes)" % len(raw))
    # Read from the body's first bytes and released: the run's next op does not wait for it (docs/seq-order.md).
    check(b"seq_id %d of model %s is released" % (seq, tc.model_id.encode()) in r.body, "413 body: %r" % r.body)


def check_rest_routes(wire, tc):
    """Checkpoint REST URLs hold a '/' in the checkpoint id and ':' in the run id."""
    check(":" in tc.model_id, "model id %r has no ':' (the SDK's format is session:train:n)" % tc.model_id)
    path = tc.save_state("routes")
    wire.publish(path)
    wire.set_ttl(path, 3600)
    wire.set_ttl(path, None)
    wire.unpublish(path)
    ids = [c["checkpoint_id"] for c in wire.list_checkpoints(tc.model_id)["checkpoints"]]
    check("weights/routes" in ids, "checkpoint ids %r" % ids)
    r = wire.request("DELETE", "/api/v1/training_runs/%s/checkpoints/routes" % tc.model_id)
    check_json_error(r, (400, 404, 422), "DELETE with a bare checkpoint id")
    wire.delete_checkpoint(path)


def check_unload(wire, batch):
    tc = new_client(wire, rank=4)
    tc.forward(batch)
    res = wire.retrieve(wire.unload_model(tc.model_id), "UnloadModel")
    check(res.get("model_id") == tc.model_id, "unload_model result %r" % res)
    expect_user_error(lambda: tc.forward(batch), "forward on an unloaded model")
    expect_status(lambda: tc.get_info(), (400, 404), "get_info on an unloaded model")


def check_session_expiry(ctx, batch):
    """--session-timeout-seconds 2: a session without heartbeats loses its model (its checkpoints stay);
    a session that heartbeats keeps working."""
    srv = ctx.start_server(extra=["--session-timeout-seconds", "2", "--poll-timeout-seconds", "1"],
                           name="tinkerd-expiry")
    wire = srv.wire()
    wire.client_config()
    quiet_sid = wire.create_session(heartbeat=False)
    live_sid = wire.create_session(heartbeat=False)
    quiet = new_client(wire, rank=4, session_id=quiet_sid)
    live = new_client(wire, rank=4, session_id=live_sid)
    for sid in (quiet_sid, live_sid):
        wire.heartbeat(sid)
    quiet.forward_backward(batch)
    wire.heartbeat(quiet_sid)
    path = quiet.save_state("kept")
    deadline = time.monotonic() + 5.0
    while time.monotonic() < deadline:
        wire.heartbeat(live_sid)
        time.sleep(0.5)
    expect_user_error(lambda: quiet.forward_backward(batch), "forward_backward after the session expired")
    live.forward_backward(batch)
    cks = [c["tinker_path"] for c in wire.list_checkpoints(quiet.model_id)["checkpoints"]]
    check(path in cks, "checkpoint of the expired session gone: %r" % cks)
    info = wire.weights_info(path)
    check(info.get("lora_rank") == 4, "weights_info after expiry %r" % info)
    srv.stop()


def check_metric_keys(results):
    for r in results:
        for k in r.metrics:
            check(k.count(":") == 1, "metric key %r" % k)
            check(np.isfinite(r.metrics[k]), "metric %s = %r" % (k, r.metrics[k]))


def rl_datums(batch, lp, seed):
    """The batch's tokens as RL datums: sampling logprobs = current logprobs + noise, advantages +-1."""
    rng = np.random.default_rng(seed)
    out = []
    for d, cur in zip(batch, lp):
        samp = (cur + rng.normal(0, 0.3, cur.shape)).astype(np.float32)
        adv = rng.choice([-1.0, 0.5, 1.0], size=cur.shape).astype(np.float32)
        out.append(wc.Datum(d.tokens, target_tokens=d.inputs["target_tokens"], logprobs=samp, advantages=adv))
    return out


def expected_rl_loss(name, cfg, lp, d):
    samp, adv = d.inputs["logprobs"].astype(np.float64), d.inputs["advantages"].astype(np.float64)
    lp = lp.astype(np.float64)
    r = np.exp(lp - samp)
    if name == "importance_sampling":
        return -np.sum(r * adv)
    if name == "ppo":
        lo, hi = cfg.get("clip_low_threshold", 0.8), cfg.get("clip_high_threshold", 1.2)
        return -np.sum(np.minimum(r * adv, np.clip(r, lo, hi) * adv))
    if name == "cispo":
        lo, hi = cfg.get("clip_low_threshold", 0.0), cfg.get("clip_high_threshold", 4.0)
        return -np.sum(np.clip(r, lo, hi) * lp * adv)
    if name == "dro":
        return -np.sum(lp * adv - 0.5 * cfg["beta"] * (lp - samp) ** 2)
    raise ValueError(name)


def check_loss_functions(wire, batch):
    """Each Tinker loss through the wire: loss:sum equals its formula on the returned logprobs, and
    the returned logprobs equal cross_entropy's. Also (N, K) cross_entropy with sparse CSR inputs."""
    tc = new_client(wire, rank=8, seed=3)
    tc.train(batch, [1e-2])
    ce = tc.forward(batch)
    lp = [ce.logprobs(i) for i in range(len(batch))]
    data = rl_datums(batch, lp, seed=8)
    cases = [("importance_sampling", {}), ("ppo", {}),
             ("ppo", {"clip_low_threshold": 0.9, "clip_high_threshold": 1.1}), ("cispo", {}),
             ("cispo", {"clip_low_threshold": 0.5, "clip_high_threshold": 1.5}), ("dro", {"beta": 0.1})]
    for name, cfg in cases:
        res = tc.forward(data, loss_fn=name, config=cfg or None)
        check_close(all_logprobs(res), np.concatenate(lp), 1e-5, "%s logprobs vs cross_entropy" % name)
        want = sum(expected_rl_loss(name, cfg, res.logprobs(i), d) for i, d in enumerate(data))
        check_close(res.metrics["loss:sum"], want, 1e-4, "%s %r loss:sum vs formula" % (name, cfg))
    k_targets, k_weights = [], []
    rng = np.random.default_rng(4)
    for d in batch:
        n = len(d.tokens)
        k_targets.append(rng.integers(1, 200, size=(n, 3)))
        w = np.zeros((n, 3), dtype=np.float32)
        w[rng.random((n, 3)) < 0.4] = 0.5
        k_weights.append(w)
    topk = [wc.Datum(d.tokens, sparse=("weights",), target_tokens=t, weights=w)
            for d, t, w in zip(batch, k_targets, k_weights)]
    res = tc.forward(topk)
    for i, w in enumerate(k_weights):
        check(res.logprobs(i).shape == w.shape, "(N, K) logprobs shape %s" % (res.logprobs(i).shape,))
    want = -sum(np.sum(res.logprobs(i).astype(np.float64) * w) for i, w in enumerate(k_weights))
    check_close(res.metrics["loss:sum"], want, 1e-4, "(N, K) cross_entropy loss:sum")
    for i, d in enumerate(batch):  # column k of (N,K) targets gives the same logprob as a 1-D target
        col = tc.forward([wc.Datum(d.tokens, target_tokens=k_targets[i][:, 0], weights=np.ones(len(d.tokens)))])
        check_close(res.logprobs(i)[:, 0], col.logprobs(0), 1e-5, "(N,K) column 0 vs 1-D targets")
