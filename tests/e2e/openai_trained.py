# Trained-model checks of the OpenAI scenario: SFT through the Tinker API teaches a fixed prompt a
# target continuation; the tinker:// sampler checkpoint and the run id (live weights) answer with it on
# /v1/completions and /v1/chat/completions, the base model does not; later steps move the run id but
# not the checkpoint; /v1/models lists them for their tenant only; the other tenant gets 404s.
# Training and checkpoints go through the official tinker SDK, inference through the official openai client.
import numpy as np

import sdk_common as sdk
from harness import check
from openai_checks import greedy
from openai_sdk import expect_error

STEPS = 12


def target_datum(m, target):
    seq = m.train_prompt + target
    weights = [0.0] * (len(m.train_prompt) - 1) + [1.0] * len(target)
    return sdk.datum(seq[:-1], seq[1:], weights)


def train(tc, m, target, steps):
    return sdk.train(tc, [target_datum(m, target)] * 2, [m.lr] * steps, eps=1e-12)


# Greedy decoding of the training prompt yields exactly the target once every target token has p > 1/2
# given its prefix (it is then the argmax). Training stops at p >= ANSWER_P instead of after a fixed step
# count, so the assertion does not rest on one CPU's convergence; the margin above 1/2 covers the trainer's
# and the sampler's logprobs differing by rounding (1e-5 here, a logprob margin of 0.4).
ANSWER_P = 0.75
MAX_ROUNDS = 6


def target_probs(tc, m, target):
    """p of each target token under the run's current weights (a forward pass: no gradient, no step)."""
    datum = target_datum(m, target)
    out = tc.forward([datum], "cross_entropy").result()
    lp = sdk.logprobs(out, 0)
    return np.exp(lp[sdk.weights_of(datum) > 0])


def train_until_answered(tc, m, target):
    """Rounds of STEPS steps toward target until every target token has p >= ANSWER_P; returns the losses."""
    losses = []
    for _ in range(MAX_ROUNDS):
        losses += train(tc, m, target, STEPS)
        probs = target_probs(tc, m, target)
        if probs.min() >= ANSWER_P:
            return losses
    check(False, "after %d steps toward %r the target tokens' p are %r (< %g): SFT does not converge"
          % (len(losses), m.text(target), probs.tolist(), ANSWER_P))


def answer(client, m, model):
    """(text, finish_reason) of the greedy answer to the training prompt; on a chat model the chat
    endpoint must agree with /v1/completions on the rendered prompt ids."""
    c, _ = greedy(client, model, m.train_prompt, 8)
    if m.messages is not None:
        r = client.chat(model=model, messages=m.messages, max_tokens=8, temperature=0, logprobs=True,
                        top_logprobs=2)
        got = r["choices"][0]
        check((got["message"]["content"], got["finish_reason"]) == (c["text"], c["finish_reason"]),
              "model %s: chat %r vs completions %r" % (model, got, c))
        if got["finish_reason"] == "stop":  # the greedy end-of-turn token is written as its own top entry
            last = got["logprobs"]["content"][-1]
            best = last["top_logprobs"][0]
            check(last["token"] and (last["token"], last["bytes"]) == (best["token"], best["bytes"]),
                  "model %s: chosen end-of-turn token %r vs its top_logprobs entry %r" % (model, last, best))
    return c["text"], c["finish_reason"]


def expect_answer(client, m, model, target, what):
    want = (m.text(target), "stop")
    got = answer(client, m, model)
    check(got == want, "%s (%s): %r, want %r" % (what, model, got, want))


def check_trained(env):
    m = env.qwen or env.stories
    svc = sdk.service(env.srv, "tml-alice")
    tc = sdk.new_training_client(svc, base_model=m.name, rank=8, seed=0)
    run = tc.get_info().model_id
    losses = train_until_answered(tc, m, m.targets[0])
    check(losses[-1] < 0.05 * losses[0], "SFT loss %r" % losses)
    path = tc.save_weights_for_sampler("oai-first").result().path
    check(path == "tinker://%s/sampler_weights/oai-first" % run, "sampler path %r" % path)
    base = answer(env.alice, m, m.name)
    check(base[0] != m.text(m.targets[0]), "the base model already answers %r" % (base,))
    expect_answer(env.alice, m, path, m.targets[0], "the tinker:// checkpoint")
    expect_answer(env.alice.with_(prefix="/oai/api/v1"), m, run, m.targets[0], "the run id")
    return {"tc": tc, "run": run, "path": path, "model": m, "rest": sdk.rest(svc),
            "summary": "%s: loss %.2f -> %.3f, answers %r" % (m.name, losses[0], losses[-1], m.text(m.targets[0]))}


def greedy_logprobs(client, m, model):
    c, _ = greedy(client, model, m.train_prompt, 4, logprobs=0)
    return np.asarray(c["logprobs"]["token_logprobs"], dtype=np.float64)


def check_live_vs_checkpoint(env, state):
    tc, run, path, m = state["tc"], state["run"], state["path"], state["model"]
    run_before = greedy_logprobs(env.alice, m, run)
    ckpt_before = greedy_logprobs(env.alice, m, path)
    train(tc, m, m.targets[1], 1)
    run_after = greedy_logprobs(env.alice, m, run)
    check(run_after.shape != run_before.shape or np.max(np.abs(run_after - run_before)) > 1e-4,
          "run id logprobs unchanged after an optim_step: %r" % run_after)
    check(np.array_equal(greedy_logprobs(env.alice, m, path), ckpt_before), "the checkpoint moved with its run")
    train_until_answered(tc, m, m.targets[1])  # Adam still carries the first target's momentum
    expect_answer(env.alice, m, run, m.targets[1], "the run id after retraining")
    expect_answer(env.alice, m, path, m.targets[0], "the checkpoint after its run retrained")
    return "run id -> %r, checkpoint still %r" % (m.text(m.targets[1]), m.text(m.targets[0]))


def check_models_after(env, state):
    run, path = state["run"], state["path"]
    ids = env.alice.model_ids()
    check(run in ids and path in ids, "alice's /v1/models lacks %s or %s: %r" % (run, path, ids))
    bob = env.bob.model_ids()
    check(run not in bob and path not in bob, "bob's /v1/models shows alice's %r" % bob)
    return "%d models for alice" % len(ids)


def check_tenants(env, state):
    run, path, m, rest = state["run"], state["path"], state["model"], state["rest"]
    for model in [run, path] + ([env.sampler_id] if env.sampler_id else []):
        expect_error(lambda: greedy(env.bob, model, m.train_prompt, 4), 404, "bob's completion on alice's %s" % model,
                     param="model", code="model_not_found")
        expect_error(lambda: env.bob.chat(model=model, messages=[{"role": "user", "content": "hi"}]), 404,
                     "bob's chat on alice's %s" % model, code="model_not_found")
    rest.publish_checkpoint_from_tinker_path(path).result()
    try:
        expect_answer(env.bob, m, path, m.targets[0], "bob on alice's published checkpoint")
    finally:
        rest.unpublish_checkpoint_from_tinker_path(path).result()
    expect_error(lambda: greedy(env.bob, path, m.train_prompt, 4), 404, "bob after unpublish", code="model_not_found")
    return "404 model_not_found (run, checkpoint, sampling session); published checkpoint readable"
