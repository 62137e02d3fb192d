# Trained-model checks of the OpenAI scenario: SFT through the Tinker API teaches a fixed prompt a
# target continuation; the tinker:// sampler checkpoint and the run id (live weights) answer with it on
# /v1/completions and /v1/chat/completions, the base model does not; later steps move the run id but
# not the checkpoint; /v1/models lists them for their tenant only; the other tenant gets 404s.
import numpy as np

import wire_codec as wc
from harness import check, new_client
from openai_checks import expect_error, greedy

STEPS = 12


def target_datum(m, target):
    seq = m.train_prompt + target
    weights = [0.0] * (len(m.train_prompt) - 1) + [1.0] * len(target)
    return wc.Datum(seq[:-1], target_tokens=seq[1:], weights=weights)


def train(tc, m, target, steps):
    datum = target_datum(m, target)
    return [tc.step([datum] * 2, m.lr)[0].metrics["loss:sum"] for _ in range(steps)]


def answer(client, m, model):
    """(text, finish_reason) of the greedy answer to the training prompt; on a chat model the chat
    endpoint must agree with /v1/completions on the rendered prompt ids."""
    c, _ = greedy(client, model, m.train_prompt, 8)
    if m.messages is not None:
        r = client.chat(model=model, messages=m.messages, max_tokens=8, temperature=0)
        got = r["choices"][0]
        check((got["message"]["content"], got["finish_reason"]) == (c["text"], c["finish_reason"]),
              "model %s: chat %r vs completions %r" % (model, got, c))
    return c["text"], c["finish_reason"]


def expect_answer(client, m, model, target, what):
    want = (m.text(target), "stop")
    got = answer(client, m, model)
    check(got == want, "%s (%s): %r, want %r" % (what, model, got, want))


def check_trained(env):
    m = env.qwen or env.stories
    wire = env.srv.wire("tml-alice")
    tc = new_client(wire, base_model=m.name, rank=8, seed=0)
    losses = train(tc, m, m.targets[0], STEPS)
    check(losses[-1] < 0.05 * losses[0], "SFT loss %r" % losses)
    path = tc.save_weights_for_sampler("oai-first")["path"]
    check(path == "tinker://%s/sampler_weights/oai-first" % tc.model_id, "sampler path %r" % path)
    base = answer(env.alice, m, m.name)
    check(base[0] != m.text(m.targets[0]), "the base model already answers %r" % (base,))
    expect_answer(env.alice, m, path, m.targets[0], "the tinker:// checkpoint")
    expect_answer(env.alice.with_(prefix="/oai/api/v1", header="x-api-key"), m, tc.model_id, m.targets[0],
                  "the run id")
    return {"tc": tc, "path": path, "model": m, "wire": wire,
            "summary": "%s: loss %.2f -> %.3f, answers %r" % (m.name, losses[0], losses[-1], m.text(m.targets[0]))}


def greedy_logprobs(client, m, model):
    c, _ = greedy(client, model, m.train_prompt, 4, logprobs=0)
    return np.asarray(c["logprobs"]["token_logprobs"], dtype=np.float64)


def check_live_vs_checkpoint(env, state):
    tc, path, m = state["tc"], state["path"], state["model"]
    run_before = greedy_logprobs(env.alice, m, tc.model_id)
    ckpt_before = greedy_logprobs(env.alice, m, path)
    train(tc, m, m.targets[1], 1)
    run_after = greedy_logprobs(env.alice, m, tc.model_id)
    check(run_after.shape != run_before.shape or np.max(np.abs(run_after - run_before)) > 1e-4,
          "run id logprobs unchanged after an optim_step: %r" % run_after)
    check(np.array_equal(greedy_logprobs(env.alice, m, path), ckpt_before), "the checkpoint moved with its run")
    train(tc, m, m.targets[1], 2 * STEPS)  # Adam still carries the first target's momentum
    expect_answer(env.alice, m, tc.model_id, m.targets[1], "the run id after retraining")
    expect_answer(env.alice, m, path, m.targets[0], "the checkpoint after its run retrained")
    return "run id -> %r, checkpoint still %r" % (m.text(m.targets[1]), m.text(m.targets[0]))


def check_models_after(env, state):
    run, path = state["tc"].model_id, state["path"]
    ids = env.alice.model_ids()
    check(run in ids and path in ids, "alice's /v1/models lacks %s or %s: %r" % (run, path, ids))
    bob = env.bob.model_ids()
    check(run not in bob and path not in bob, "bob's /v1/models shows alice's %r" % bob)
    return "%d models for alice" % len(ids)


def check_tenants(env, state):
    run, path, m, wire = state["tc"].model_id, state["path"], state["model"], state["wire"]
    for model in [run, path] + ([env.sampler_id] if env.sampler_id else []):
        expect_error(lambda: greedy(env.bob, model, m.train_prompt, 4), 404, "bob's completion on alice's %s" % model,
                     param="model", code="model_not_found")
        expect_error(lambda: env.bob.chat(model=model, messages=[{"role": "user", "content": "hi"}]), 404,
                     "bob's chat on alice's %s" % model, code="model_not_found")
    wire.publish(path)
    try:
        expect_answer(env.bob, m, path, m.targets[0], "bob on alice's published checkpoint")
    finally:
        wire.unpublish(path)
    expect_error(lambda: greedy(env.bob, path, m.train_prompt, 4), 404, "bob after unpublish", code="model_not_found")
    return "404 model_not_found (run, checkpoint, sampling session); published checkpoint readable"
