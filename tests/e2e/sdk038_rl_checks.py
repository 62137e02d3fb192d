# What the newest cookbook's RL recipes send, done with the real tinker SDK 0.38 alone against build/tinkerd on
# the default model (SmolLM2-135M-Instruct, `make default-model`): sample with record_stability_info, build
# provenance datums (Datum.with_provenance), train stable_reinforce and gspo steps whose losses are checked
# against a recomputation from the returned logprobs, tampered and foreign provenance refused by name; and the
# metadata a cookbook run keeps (renderer name on the run and the checkpoint, the session's display name,
# sessions/search, checkpoint storage usage), recipes/decisions' target_prompt_logprobs and prompt_alt_tokens_k, an
# inflight sampling client, and the Dimuon optimizer with a bit-exact resume.
# Usage: .venv/bin/python tests/e2e/sdk038_rl_checks.py --build build
import argparse
import math
import os
import sys
import time

import numpy as np

HERE = os.path.dirname(os.path.abspath(__file__))
sys.path.insert(0, HERE)
from sdk038_checks import CheckFailed, check, expect_refused  # noqa: E402

MODEL = "HuggingFaceTB/SmolLM2-135M-Instruct"
GGUF = os.path.join(os.environ.get("MODEL_CACHE", os.path.expanduser("~/.cache/tinkerd")),
                    "SmolLM2-135M-Instruct.Q4_1.gguf")
PROMPT = [1, 9690, 198, 2683, 359, 253, 5356, 5646]  # any in-vocabulary ids
SAMPLES = 4


def sample_recorded(tinker, tc):
    """A sampling client that records stability info, and one group of samples from it."""
    sampler = tc.save_weights_and_get_sampling_client(record_stability_info=True)
    params = tinker.SamplingParams(max_tokens=8, temperature=1.0, seed=11)
    res = sampler.sample(prompt=tinker.ModelInput.from_ints(PROMPT), num_samples=SAMPLES,
                         sampling_params=params).result()
    check(len({s.sequence_id for s in res.sequences}) == SAMPLES, "sequence ids %r" % res.sequences)
    return res.sequences


def provenance_datum(tinker, seq, advantage, extra=None):
    """The single-turn datum the cookbook builds: prompt + sample, shifted by one, spans tiling both fields."""
    p, s = len(PROMPT), len(seq.tokens)
    full = PROMPT + list(seq.tokens)
    adv = np.array([0.0] * (p - 1) + [advantage] * s, dtype=np.float32)
    q = np.array([0.0] * (p - 1) + list(seq.logprobs), dtype=np.float32)
    inputs = {"target_tokens": np.array(full[1:], dtype=np.int64), "advantages": adv, "logprobs": q}
    inputs.update(extra or {})
    datum = tinker.Datum(model_input=tinker.ModelInput.from_ints(full[:-1]), loss_fn_inputs=inputs)
    prompt_span, sampled_span = tinker.types.PromptProvenanceSpan, tinker.types.SampledProvenanceSpan
    return datum.with_provenance(
        model_input=[prompt_span(sequence_id=seq.sequence_id, length=p),
                     sampled_span(sequence_id=seq.sequence_id, length=s - 1)],
        loss_fn_inputs=[prompt_span(sequence_id=seq.sequence_id, offset=1, length=p - 1),
                        sampled_span(sequence_id=seq.sequence_id, length=s)])


def expected_stable_reinforce(datums, seqs, lps, cap, kl):
    """docs/sdk-0.38.md's objective from the returned logprobs and the sampler's logprobs."""
    total = 0.0
    for datum, seq, lp in zip(datums, seqs, lps):
        adv = datum.loss_fn_inputs["advantages"].to_numpy()
        start = len(PROMPT) - 1
        for t, q in enumerate(seq.logprobs):
            x = lp[start + t] - q
            total -= min(math.exp(x), cap) * adv[start + t] * lp[start + t]
            total += kl * (math.exp(x) - 1 - x)
    return total


def expected_gspo(datums, lps, lo, hi):
    total = 0.0
    for datum, lp in zip(datums, lps):
        q = datum.loss_fn_inputs["logprobs"].to_numpy()
        adv = datum.loss_fn_inputs["advantages"].to_numpy()
        mask = datum.loss_fn_inputs["sequence_ratio_mask"].to_numpy() != 0
        s = math.exp(float(np.mean(np.asarray(lp)[mask] - q[mask])))
        total -= sum(min(s * a, min(max(s, lo), hi) * a) for a in adv)
    return total


def close(a, b, what):
    check(abs(a - b) <= 2e-3 * max(1.0, abs(b)), "%s: server %.6f vs recomputed %.6f" % (what, a, b))


def check_rl(tinker, sc, tc):
    seqs = sample_recorded(tinker, tc)
    advs = [1.0, -1.0, 0.5, -0.5]
    datums = [provenance_datum(tinker, s, a) for s, a in zip(seqs, advs)]
    fb = tc.forward_backward(datums, "stable_reinforce", {"kl_coeff": 0.05}).result()
    lps = [o["logprobs"].to_numpy() for o in fb.loss_fn_outputs]
    close(fb.metrics["loss:sum"], expected_stable_reinforce(datums, seqs, lps, 2.0, 0.05), "stable_reinforce")
    # Under --matmul bf16 (auto on CPUs with fast bf16 dot products) the trainer's and the sampler's sums run in
    # different orders on bf16-rounded inputs: measured worst 0.07, mean 0.02 nats here (a float64 simulation
    # of 40 perturbed runs: worst up to 0.125, mean 0.023); exact mode agrees to 1e-5.
    diffs = [abs(lp[len(PROMPT) - 1 + t] - q) for lp, s in zip(lps, seqs) for t, q in enumerate(s.logprobs)]
    print("trainer vs sampler logprobs before any step: worst %.4f, mean %.4f nats" % (max(diffs), np.mean(diffs)),
          flush=True)
    check(max(diffs) < 0.25 and np.mean(diffs) < 0.05, "trainer vs sampler logprobs differ: %r" % diffs)
    tc.optim_step(tinker.AdamParams(learning_rate=5e-3)).result()
    mask = {"sequence_ratio_mask": np.array([0.0] * (len(PROMPT) - 1) + [1.0] * len(seqs[0].tokens), np.float32)}
    gspo = [provenance_datum(tinker, s, a, mask if len(s.tokens) == len(seqs[0].tokens) else None)
            for s, a in zip(seqs, advs)]
    gspo = [d for d in gspo if "sequence_ratio_mask" in d.loss_fn_inputs]
    fb = tc.forward_backward(gspo, "gspo", {"clip_low_threshold": 0.95, "clip_high_threshold": 1.05}).result()
    lps = [o["logprobs"].to_numpy() for o in fb.loss_fn_outputs]
    close(fb.metrics["loss:sum"], expected_gspo(gspo, lps, 0.95, 1.05), "gspo")
    tc.optim_step(tinker.AdamParams(learning_rate=5e-3)).result()
    again = tc.forward(datums, "stable_reinforce").result()  # off-policy now: the truncated weights apply
    lps = [o["logprobs"].to_numpy() for o in again.loss_fn_outputs]
    close(again.metrics["loss:sum"], expected_stable_reinforce(datums, seqs, lps, 2.0, 0.0), "stable_reinforce 2")
    return seqs, datums


def check_refusals(tinker, sc, tc, seqs, datums):
    tampered = provenance_datum(tinker, seqs[0], 1.0)
    tokens = tampered.loss_fn_inputs["target_tokens"].to_numpy().copy()
    tokens[-1] = (tokens[-1] + 1) % 1000
    tampered = tinker.Datum(model_input=tampered.model_input,
                            loss_fn_inputs={**tampered.loss_fn_inputs, "target_tokens": tokens}).with_provenance(
        model_input=tampered.model_input_spans, loss_fn_inputs=tampered.loss_fn_input_spans)
    expect_refused(lambda: tc.forward_backward([tampered], "stable_reinforce").result(), "is not the recorded token")
    plain = tinker.Datum(model_input=datums[0].model_input, loss_fn_inputs=datums[0].loss_fn_inputs)
    expect_refused(lambda: tc.forward_backward([plain], "stable_reinforce").result(), "provenance")
    other = tinker.ServiceClient(api_key="tml-rl")  # another session of the same tenant (TINKER_BASE_URL)
    foreign_tc = other.create_lora_training_client(base_model=MODEL, rank=4)
    expect_refused(lambda: foreign_tc.forward_backward(datums[:1], "stable_reinforce").result(),
                   "is not a recorded sequence of this session")
    tc.optim_step(tinker.AdamParams(learning_rate=1e-4)).result()  # the refused seq_ids did not block the run
    return "refused: a tampered token, a datum without provenance, another session's sequence"


def check_decisions(tinker, tc):
    """recipes/decisions: score candidate next tokens at prompt positions in the one prefill (dense and CSR
    target_prompt_logprobs), and prompt_alt_tokens_k draws; each against prompt_logprobs / top-k of the same
    prompt."""
    import torch
    sampler = tc.save_weights_and_get_sampling_client()
    prompt = tinker.ModelInput.from_ints(PROMPT)
    greedy = tinker.SamplingParams(max_tokens=1, temperature=0.0)
    ref = sampler.sample(prompt=prompt, num_samples=1, sampling_params=greedy, include_prompt_logprobs=True,
                         topk_prompt_logprobs=3).result()
    rows = len(PROMPT) - 1
    ids = torch.full((rows, 16), -1, dtype=torch.int64)  # wide enough that the SDK keeps CSR when asked
    ids[:, 0] = torch.tensor(PROMPT[1:])  # the actual next tokens: their logprobs are the prompt logprobs
    ids[rows - 1, :3] = torch.tensor([tok for tok, _ in ref.topk_prompt_logprobs[rows]])  # the last row: the top 3
    for sparse in (False, True):
        target = tinker.TensorData.from_torch_sparse(ids, pad_value=-1) if sparse else \
            tinker.TensorData.from_torch(ids)
        check((target.sparse_crow_indices is not None) == sparse, "CSR encoding expected: %r" % target)
        res = sampler.sample(prompt=prompt, num_samples=1, sampling_params=greedy,
                             target_prompt_logprobs=target).result()
        got = res.target_prompt_logprobs.to_numpy()  # dense either way; 0.0 where nothing was asked
        want = [lp for lp in ref.prompt_logprobs[1:]]
        check(np.allclose(got[:rows - 1, 0], want[:rows - 1], atol=1e-5), "targets %r vs %r" % (got[:, 0], want))
        check(np.allclose(got[rows - 1, :3], [lp for _, lp in ref.topk_prompt_logprobs[rows]], atol=1e-5),
              "last row %r vs top-3 %r" % (got[rows - 1], ref.topk_prompt_logprobs[rows]))
        check(np.all(got[:rows - 1, 1:] == 0.0), "unasked cells %r" % got)
    alt = sampler.sample(prompt=prompt, num_samples=1, sampling_params=greedy, prompt_alt_tokens_k=2).result()
    tokens, lps = alt.prompt_alt_tokens.tokens.to_numpy(), alt.prompt_alt_tokens.logprobs.to_numpy()
    best = [top[0] for top in ref.topk_prompt_logprobs[1:]]  # temperature 0: the argmax, k times
    check(tokens.shape == (rows, 2) and all(list(tokens[i]) == [best[i][0]] * 2 for i in range(rows)),
          "greedy alt tokens %r vs argmax %r" % (tokens, best))
    check(np.allclose(lps[:, 0], [b[1] for b in best], atol=1e-5), "alt logprobs %r" % lps)
    hot = tinker.SamplingParams(max_tokens=1, temperature=1.0, seed=5)
    a = sampler.sample(prompt=prompt, num_samples=1, sampling_params=hot, prompt_alt_tokens_k=8).result()
    b = sampler.sample(prompt=prompt, num_samples=1, sampling_params=hot, prompt_alt_tokens_k=8).result()
    drawn = a.prompt_alt_tokens.tokens.to_numpy()
    check(np.array_equal(drawn, b.prompt_alt_tokens.tokens.to_numpy()), "seeded draws differ between calls")
    check(len({int(t) for t in drawn.ravel()}) > rows, "temperature-1 draws look like a top-k: %r" % drawn)
    bad = tinker.TensorData.from_torch(ids[:-1])
    expect_refused(lambda: sampler.sample(prompt=prompt, num_samples=1, sampling_params=greedy,
                                          target_prompt_logprobs=bad).result(), "len(prompt) - 1")
    return "decisions: target_prompt_logprobs dense and CSR == prompt / top-k logprobs; prompt_alt_tokens_k"


def check_inflight(tinker, tc):
    """save_weights_and_get_sampling_client(kind="inflight") follows the run's later steps; a snapshot does not."""
    prompt = tinker.ModelInput.from_ints(PROMPT)
    params = tinker.SamplingParams(max_tokens=1, temperature=0.0)

    def scored(sampler):
        res = sampler.sample(prompt=prompt, num_samples=1, sampling_params=params, include_prompt_logprobs=True)
        return np.array(res.result().prompt_logprobs[1:], dtype=np.float64)

    live = tc.save_weights_and_get_sampling_client(kind="inflight")
    frozen = tc.save_weights_and_get_sampling_client()
    before_live, before_frozen = scored(live), scored(frozen)
    check(np.allclose(before_live, before_frozen, atol=1e-6), "inflight and snapshot differ before a step")
    datum = tinker.Datum(model_input=tinker.ModelInput.from_ints(PROMPT[:-1]),
                         loss_fn_inputs={"target_tokens": np.array(PROMPT[1:], dtype=np.int64),
                                         "weights": np.ones(len(PROMPT) - 1, dtype=np.float32)})
    tc.forward_backward([datum], "cross_entropy").result()
    tc.optim_step(tinker.AdamParams(learning_rate=2e-2)).result()
    after_live, after_frozen = scored(live), scored(frozen)
    check(np.array_equal(after_frozen, before_frozen), "the snapshot moved with its run")
    now = scored(tc.save_weights_and_get_sampling_client())
    check(np.abs(after_live - before_live).max() > 1e-3 and np.allclose(after_live, now, atol=1e-6),
          "the inflight client does not sample the stepped weights: %r vs a new snapshot %r" % (after_live, now))
    return "inflight sampling client follows optim_step (prompt logprob sum %.3f -> %.3f), snapshot frozen" % (
        before_live.sum(), after_live.sum())


def check_dimuon(tinker, sc, adamw_tc):
    """A Dimuon client (optimizer_config, DimuonParams) trains, resumes bit-exactly from save_state, keeps its
    optimizer through the resume, and refuses AdamW state and the other family's step params."""
    rng = np.random.default_rng(4)
    data = []
    for _ in range(3):
        toks = rng.integers(1, 2000, size=13).tolist()
        data.append(tinker.Datum(model_input=tinker.ModelInput.from_ints(toks[:-1]),
                                 loss_fn_inputs={"target_tokens": np.array(toks[1:], dtype=np.int64),
                                                 "weights": np.ones(12, dtype=np.float32)}))
    tc = sc.create_lora_training_client(base_model=MODEL, rank=8, seed=6,
                                        optimizer=tinker.types.DimuonOptimizerConfig())
    check(tc.get_info().optimizer_config.type == "dimuon", "get_info %r" % tc.get_info().optimizer_config)
    params = tinker.types.DimuonParams(learning_rate=2e-3)
    losses = []
    for _ in range(3):
        losses.append(tc.forward_backward(data, "cross_entropy").result().metrics["loss:sum"])
        tc.optim_step(params).result()
    check(losses[-1] < losses[0], "Dimuon did not lower the loss: %r" % losses)
    path = tc.save_state("dimuon-3").result().path
    resumed = sc.create_training_client_from_state_with_optimizer(path)
    check(resumed.get_info().optimizer_config.type == "dimuon", "the resumed client lost its optimizer")
    for client in (tc, resumed):  # the same momentum: the same next step, bit for bit
        client.forward_backward(data, "cross_entropy").result()
        client.optim_step(params).result()
    a = [o["logprobs"].to_numpy() for o in tc.forward(data, "cross_entropy").result().loss_fn_outputs]
    b = [o["logprobs"].to_numpy() for o in resumed.forward(data, "cross_entropy").result().loss_fn_outputs]
    check(all(np.array_equal(x, y) for x, y in zip(a, b)), "a resumed Dimuon step is not bit-exact")
    expect_refused(lambda: tc.optim_step(tinker.AdamParams(learning_rate=1e-3)).result(), "trains with dimuon")
    expect_refused(lambda: adamw_tc.optim_step(params).result(), "trains with adamw")
    adam_path = adamw_tc.save_state("adamw-state").result().path
    fresh = sc.create_lora_training_client(base_model=MODEL, rank=8, optimizer=tinker.types.DimuonOptimizerConfig())
    expect_refused(lambda: fresh.load_state_with_optimizer(adam_path).result(), "holds adamw optimizer state")
    return "dimuon: loss %.2f -> %.2f in 3 steps, save_state resume bit-exact, AdamW state and params refused" % (
        losses[0], losses[-1])


def check_cancel(tinker, tc, base_url):
    """cancel_future (dynamic_config sample_cancel_enabled): a long sample stops at once and its future fails
    as cancelled; a second cancel is fine (idempotent); an unknown id is a 404."""
    import json
    import urllib.request

    def post(path, body):
        req = urllib.request.Request(base_url + "/api/v1/" + path, data=json.dumps(body).encode(), method="POST",
                                     headers={"Content-Type": "application/json", "X-API-Key": "tml-rl"})
        try:
            with urllib.request.urlopen(req, timeout=60) as r:
                return r.status, json.loads(r.read() or b"{}")
        except urllib.error.HTTPError as e:
            return e.code, json.loads(e.read() or b"{}")

    status, config = post("client/dynamic_config", {})
    check(status == 200 and config.get("sample_cancel_enabled") is True, "dynamic_config %r" % config)
    sampler_id = tc.save_weights_and_get_sampling_client().result()._sampling_session_id
    t0 = time.monotonic()
    status, sub = post("asample", {"sampling_session_id": sampler_id, "seq_id": 0, "num_samples": 4,
                                   "prompt": {"chunks": [{"type": "encoded_text", "tokens": PROMPT}]},
                                   "sampling_params": {"max_tokens": 1500, "temperature": 1.0, "stop": []}})
    check(status == 200, "asample %d %r" % (status, sub))
    time.sleep(0.5)
    for _ in range(2):
        status, body = post("cancel_future", {"request_id": sub["request_id"]})
        check(status == 200, "cancel_future %d %r" % (status, body))
    status, out = post("retrieve_future", {"request_id": sub["request_id"]})
    while status == 200 and out.get("type") == "try_again":
        status, out = post("retrieve_future", {"request_id": sub["request_id"]})
    took = time.monotonic() - t0
    check("cancelled by cancel_future" in json.dumps(out) and took < 20, "after cancel (%.1f s): %d %r"
          % (took, status, out))
    status, body = post("cancel_future", {"request_id": "req-nope"})
    check(status == 404, "unknown id: %d %r" % (status, body))
    return "cancel_future: a 4 x 1500-token sample stopped after %.1f s, idempotent, unknown id 404" % took


def check_metadata(tinker, sc, tc, display_name):
    rest = sc.create_rest_client()
    path = tc.save_state("rl-1", user_metadata={"renderer_name": "qwen3", "step": "1"}).result().path
    run = rest.get_training_run_by_tinker_path(path).result()
    check(run.user_metadata == {"renderer_name": "qwen3"}, "run user_metadata %r" % run.user_metadata)
    ckpts = rest.list_checkpoints(run.training_run_id).result().checkpoints
    mine = [c for c in ckpts if c.tinker_path == path]
    check(mine and mine[0].user_metadata == {"renderer_name": "qwen3", "step": "1"}, "checkpoint %r" % mine)
    tc.save_state("rl-1", overwrite=True).result()  # an overwrite replaces the whole mapping
    ckpts = rest.list_checkpoints(run.training_run_id).result().checkpoints
    check([c.user_metadata for c in ckpts if c.tinker_path == path] == [{}], "after overwrite %r" % ckpts)
    session_id = run.training_run_id.split(":")[0]
    session = rest.get_session(session_id).result()
    check(session.display_name == display_name and session.user_metadata == {"recipe": "rl_loop"},
          "session %r" % session)
    found = rest.search_sessions(tinker.types.SessionSearchRequest(display_name=display_name.split()[0].upper(),
                                                                    user_metadata={"recipe": "rl_loop"})).result()
    check([s.session_id for s in found.sessions] == [session_id], "search %r" % found)
    check(found.sessions[0].checkpoints_count >= 1 and found.sessions[0].status.type == "active",
          "summary %r" % found.sessions[0])
    usage = rest.get_current_checkpoint_storage_usage().result()
    check(sum(d.checkpoint_count for d in usage.data) >= 1 and all(d.size_bytes > 0 for d in usage.data),
          "storage usage %r" % usage)
    return "metadata: run and checkpoint user_metadata, overwrite, display_name, search, storage usage"


def check_restart_while_sampling(server):
    """A sample in flight when the server dies: SDK 0.38 waits for it on its retrieve_futures poller; after a
    restart the poller learns that the request failed (the restart's recovery reports it), so the call ends
    (retried by the SDK, or an error) instead of waiting for a completion that can never come."""
    import concurrent.futures
    import tinker
    sc = tinker.ServiceClient(api_key="tml-rl")
    tc = sc.create_lora_training_client(base_model=MODEL, rank=4)
    sampler = tc.save_weights_and_get_sampling_client().result()
    params = tinker.SamplingParams(max_tokens=1500, temperature=1.0, stop=[])
    future = sampler.sample(prompt=tinker.ModelInput.from_ints(PROMPT), num_samples=4, sampling_params=params)
    time.sleep(1.0)
    server.kill9()
    server.restart()
    t0 = time.monotonic()
    try:
        future.result(timeout=120)
        outcome = "retried and finished"
    except concurrent.futures.TimeoutError:
        raise CheckFailed("a sample in flight at a crash never ended after the restart (120 s)")
    except Exception as e:  # the failure itself is fine: what matters is that it ends
        outcome = "failed: %s" % str(e)[:80]
    return "restart with a sample in flight: the call ended %.1f s after the restart (%s)" % (
        time.monotonic() - t0, outcome)


def run(base_url):
    import tinker
    check(tinker.__version__.startswith("0.38"), "this needs tinker 0.38, found %s" % tinker.__version__)
    display_name = "Math RL sweep 3"
    sc = tinker.ServiceClient(user_metadata={"recipe": "rl_loop"}, display_name=display_name, base_url=base_url,
                              api_key="tml-rl")
    tc = sc.create_lora_training_client(base_model=MODEL, rank=8, seed=2, user_metadata={"renderer_name": "qwen3"})
    seqs, datums = check_rl(tinker, sc, tc)
    print("ok: stable_reinforce and gspo steps match the recomputed losses", flush=True)
    print("ok:", check_refusals(tinker, sc, tc, seqs, datums), flush=True)
    print("ok:", check_decisions(tinker, tc), flush=True)
    print("ok:", check_inflight(tinker, tc), flush=True)
    print("ok:", check_dimuon(tinker, sc, tc), flush=True)
    print("ok:", check_cancel(tinker, tc, base_url), flush=True)
    print("ok:", check_metadata(tinker, sc, tc, display_name), flush=True)


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--build", default=os.path.join(HERE, "..", "..", "build"))
    args = ap.parse_args()
    os.environ.setdefault("TINKER_TELEMETRY", "0")
    if not os.path.exists(GGUF):
        print("FAIL sdk038_rl_checks: the default model %s is missing (run `make default-model`)" % GGUF)
        return 1
    import harness
    server = harness.Server(args.build, extra=["--model", "%s=%s" % (MODEL, GGUF)], name="sdk038-rl").start()
    t0 = time.monotonic()
    try:
        os.environ["TINKER_BASE_URL"] = "http://127.0.0.1:%d" % server.port
        run(os.environ["TINKER_BASE_URL"])
        print("ok:", check_restart_while_sampling(server), flush=True)
        print("PASS sdk038_rl_checks (%.1f s)" % (time.monotonic() - t0))
        return 0
    except Exception as e:
        print("FAIL sdk038_rl_checks: %s: %s" % (type(e).__name__, e))
        print(server.tail())
        return 1
    finally:
        server.stop()
        server.cleanup()


if __name__ == "__main__":
    sys.exit(main())
