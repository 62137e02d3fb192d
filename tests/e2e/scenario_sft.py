# Scenario S2 at the wire level (no sampling): create a LoRA model, check get_info, forward
# determinism, loss:sum = -sum(logprobs*weights), a 15-step SFT loop whose NLL halves, a pipelined
# run with the same losses, chunked forward_backward (seq 2,3 then 1), sampler saves, zstd bodies.
import os

import numpy as np

import wire_codec as wc
from harness import (BUILTIN_MODEL, all_logprobs, check, check_abs, check_close, mean_nll, new_client,
                     sft_batch, shared_dir, weighted_nll)
from tinker_wire import parse_tinker_path

STEPS = 15
LR = 1e-3


def check_info(tc, rank):
    info = tc.get_info()
    check(info.get("model_id") == tc.model_id, "get_info model_id %r" % info.get("model_id"))
    md = info.get("model_data")
    check(isinstance(md, dict), "get_info without model_data object: %r" % info)
    check(md.get("model_name") == BUILTIN_MODEL, "model_data.model_name %r" % md.get("model_name"))
    check(info.get("lora_rank") == rank and info.get("is_lora") is True, "get_info rank/is_lora %r" % info)


def check_forward(tc, batch):
    a = tc.forward(batch)
    b = tc.forward(batch)
    check(len(a.outputs) == len(batch), "forward returned %d datums" % len(a.outputs))
    for i, d in enumerate(batch):
        lp = a.logprobs(i)
        check(lp.shape == d.inputs["target_tokens"].shape, "logprobs shape %s" % (lp.shape,))
        check(np.all(lp <= 0) and np.all(np.isfinite(lp)), "logprobs must be finite and <= 0")
    check(np.array_equal(all_logprobs(a), all_logprobs(b)), "two forwards differ")
    c = tc.forward_backward(batch)
    check_close(all_logprobs(c), all_logprobs(a), 1e-6, "forward changed the next forward_backward")
    check("loss:sum" in a.metrics, "no loss:sum in %r" % a.metrics)
    check_close(a.metrics["loss:sum"], weighted_nll(a, batch), 1e-4, "loss:sum vs -sum(lp*w)")
    return a


def check_chunked(tc, batch):
    whole = tc.forward(batch)
    chunked = tc.forward_async(batch, chunks=3).result()
    check(len(chunked.outputs) == len(batch), "chunked forward: %d datums" % len(chunked.outputs))
    for i in range(len(batch)):
        check_close(chunked.logprobs(i), whole.logprobs(i), 1e-5, "chunked datum %d" % i)
    check_close(chunked.metrics["loss:sum"], whole.metrics["loss:sum"], 1e-5, "chunked loss:sum")
    fb_whole = tc.forward_backward(batch)  # gradients accumulate; fine before the final save
    fb_chunk = tc.forward_backward_async(batch, chunks=3).result()
    check_close(fb_chunk.metrics["loss:sum"], fb_whole.metrics["loss:sum"], 1e-5, "chunked fb loss")


def check_chunked_gradients(wire, batch):
    """Gradients of 3 chunks accumulate to the unchunked gradient: after one optim_step the two
    models (same seed) give the same logprobs."""
    whole = new_client(wire, rank=8, seed=7)
    chunked = new_client(wire, rank=8, seed=7)
    whole.forward_backward(batch)
    whole.optim_step(LR)
    chunked.forward_backward_async(batch, chunks=3).result()
    chunked.optim_step(LR)
    a, b = whole.forward(batch), chunked.forward(batch)
    check_close(all_logprobs(b), all_logprobs(a), 1e-5, "after a chunked vs an unchunked step")


def train_loop(tc, batch):
    nll, losses = [], []
    for _ in range(STEPS):
        fb, opt = tc.step(batch, LR)
        check(opt is None or isinstance(opt, dict), "optim_step result %r" % (opt,))
        nll.append(mean_nll(fb, batch))
        losses.append(fb.metrics["loss:sum"])
        check_close(fb.metrics["loss:sum"], weighted_nll(fb, batch), 1e-4, "loss:sum in training")
    check(nll[-1] < 0.5 * nll[0], "NLL did not halve in %d steps: %s" % (STEPS, [round(x, 3) for x in nll]))
    falls = sum(1 for a, b in zip(nll, nll[1:]) if b < a)
    check(falls >= STEPS - 4, "NLL fell only %d of %d steps: %s" % (falls, STEPS - 1, nll))
    return nll, losses


def check_saves(tc, wire, session_id):
    res = tc.save_weights_for_sampler("final")
    path = res.get("path", "")
    check(path == "tinker://%s/sampler_weights/final" % tc.model_id, "sampler path %r" % path)
    parse_tinker_path(path)
    unnamed = tc.save_weights_for_sampler(sampling_session_seq_id=0)
    sid = unnamed.get("sampling_session_id")
    check(isinstance(sid, str) and sid, "unnamed save: %r" % unnamed)
    s = wire.get_sampler(sid)
    check(s.get("base_model") == BUILTIN_MODEL, "samplers/%s: %r" % (sid, s))
    check(s.get("sampler_id") == sid and "model_path" in s, "samplers/%s: %r" % (sid, s))
    sess = wire.get_session(session_id)
    check(tc.model_id in sess.get("training_run_ids", []) and sid in sess.get("sampler_ids", []),
          "sessions/%s: %r" % (session_id, sess))
    check(session_id in wire.list_sessions(limit=100).get("sessions", []), "session not listed")
    return path


def check_zstd(tc, batch, config):
    plain = tc.forward(batch)
    packed = tc.forward(batch, zstd=True)
    check(np.array_equal(all_logprobs(plain), all_logprobs(packed)), "zstd forward differs")
    note = "proto_compress_fwdbwd=%s" % config.get("proto_compress_fwdbwd", False)
    return note


def stories_dir():
    shared = shared_dir()
    for sub in ("stories260K", "stories260K/hf-f32"):
        d = os.path.join(shared or "", "models", sub)
        if shared and os.path.exists(os.path.join(d, "config.json")):
            return d
    return None


def check_stories(ctx):
    """The real stories260K model: base logprobs after "Once upon a time" match the golden logits
    (expected.json), the next-token distribution sums to 1 with argmax 432, and SFT lowers NLL."""
    d = stories_dir()
    if d is None:
        return "stories260K not found: skipped"
    srv = ctx.start_server(extra=["--model", "stories260K=" + d], name="tinkerd-stories")
    wire = srv.wire()
    caps = {m.get("model_name"): m for m in wire.capabilities()["supported_models"]}
    check("stories260K" in caps, "capabilities %r" % caps)
    tc = new_client(wire, base_model="stories260K", rank=8, seed=0)
    check(tc.get_info()["model_data"].get("model_name") == "stories260K", "stories get_info")
    prompt = [1, 403, 407, 261, 378]
    datums = [wc.Datum(prompt, target_tokens=prompt[1:] + [t], weights=[0, 0, 0, 0, 1]) for t in range(512)]
    res = tc.forward(datums)
    last = np.array([res.logprobs(t)[-1] for t in range(512)], dtype=np.float64)
    lse = 17.8311
    check_abs(last[:2], [-10.13658 - lse, -5.32946 - lse], 2e-3, "golden logprobs of tokens 0 and 1")
    check(int(np.argmax(last)) == 432, "argmax after the prompt %d (golden 432)" % int(np.argmax(last)))
    check_abs(np.exp(last).sum(), 1.0, 1e-4, "next-token probabilities sum")
    batch = sft_batch(seed=5, vocab=512)
    losses = tc.train(batch, [LR] * 10)
    check(losses[-1] < 0.8 * losses[0], "stories SFT loss %r" % losses)
    srv.stop()
    return "stories260K golden logprobs ok, loss %.2f -> %.2f" % (losses[0], losses[-1])


def check_pipelined(wire, sid, batch, losses):
    pipe = new_client(wire, rank=8, session_id=sid, model_seq_id=1, seed=0)
    piped = pipe.train(batch, [LR] * STEPS, pipelined=True)
    check_close(piped, losses, 1e-5, "pipelined (2nd model, same seed) vs sequential losses")
    return pipe


def run(ctx):
    srv = ctx.start_server()
    wire = srv.wire()
    config = wire.client_config()
    check(config.get("use_pyqwest_transport") is False, "client/config: %r" % config)
    models = [m.get("model_name") for m in wire.capabilities().get("supported_models", [])]
    check(BUILTIN_MODEL in models, "capabilities lack %s: %r" % (BUILTIN_MODEL, models))
    sid = wire.create_session(tags=["e2e"])
    batch = sft_batch(seed=1)

    tc = new_client(wire, rank=8, session_id=sid, model_seq_id=0, seed=0)
    ctx.case("get_info", check_info, tc, 8)
    nll, losses = train_loop(tc, batch)
    ctx.note("NLL per step: %s" % " ".join("%.3f" % x for x in nll))
    pipe = ctx.case("pipelined run == sequential run", check_pipelined, wire, sid, batch, losses)
    other = pipe or new_client(wire, rank=8, session_id=sid, model_seq_id=2)
    ctx.case("forward deterministic, loss:sum = -sum(lp*w), forward leaves fb alone", check_forward,
             other, batch)
    ctx.case("chunked forward/forward_backward (seq 2,3 then 1)", check_chunked, other, batch)
    ctx.case("chunked gradients accumulate like one batch", check_chunked_gradients, wire, batch)
    zs = ctx.case("zstd forward_backward body", check_zstd, other, batch, config)
    path = ctx.case("save_weights_for_sampler named/unnamed, samplers/{id}", check_saves, tc, wire, sid)
    stories = ctx.case("stories260K: golden logprobs and SFT", check_stories, ctx)
    ctx.finish()
    return "NLL %.3f -> %.3f in %d steps; pipelined == sequential; chunks ok; %s; %s; %s" % (
        nll[0], nll[-1], STEPS, zs, path, stories)
