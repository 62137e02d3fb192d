# Drives the real tinker SDK 0.38 against build/tinkerd: every call 0.38 added that tinkerd supports
# (top-k sampled logprobs, prompt_logprobs_last_n, sequence ids, loss_fn_config_v2, optimizer config,
# ServiceClient.close), every one it refuses (asserting the 4xx and the feature it names), and one basic
# flow (LoRA client, forward_backward, optim_step, sample, save/load) run with this SDK and with SDK 0.25.
# Usage: .venv/bin/python tests/e2e/sdk038_checks.py --build build-sdk
import argparse
import json
import os
import subprocess
import sys
import time
import urllib.error
import urllib.request

import numpy as np

HERE = os.path.dirname(os.path.abspath(__file__))
ROOT = os.path.abspath(os.path.join(HERE, "..", ".."))
MODEL = "tinkerd/builtin-tiny"
SDK025_PYTHON = os.path.join(ROOT, ".venv-sdk025", "bin", "python")


class CheckFailed(Exception):
    pass


def check(cond, msg):
    if not cond:
        raise CheckFailed(msg)


def sft_data(tinker, n=4, length=12, seed=0):
    rng = np.random.default_rng(seed)
    data = []
    for _ in range(n):
        toks = rng.integers(1, 200, size=length + 1).tolist()
        data.append(tinker.Datum(model_input=tinker.ModelInput.from_ints(toks[:-1]),
                                 loss_fn_inputs={"target_tokens": np.array(toks[1:], dtype=np.int64),
                                                 "weights": np.ones(length, dtype=np.float32)}))
    return data


def basic_flow(tinker, base_url):
    """The flow both SDKs must run unchanged; returns a one-line summary."""
    sc = tinker.ServiceClient(base_url=base_url, api_key="tml-sdkcheck")
    tc = sc.create_lora_training_client(base_model=MODEL, rank=8, seed=3)
    data = sft_data(tinker)
    losses = []
    for _ in range(4):
        fb = tc.forward_backward(data, "cross_entropy").result()
        losses.append(fb.metrics["loss:sum"])
        tc.optim_step(tinker.AdamParams(learning_rate=1e-2)).result()
    check(losses[-1] < losses[0], "loss did not fall: %r" % losses)
    sampler = tc.save_weights_and_get_sampling_client("basic")
    prompt = tinker.ModelInput.from_ints([5, 6, 7, 8])
    params = tinker.SamplingParams(max_tokens=6, temperature=0.0)
    res = sampler.sample(prompt=prompt, num_samples=2, sampling_params=params).result()
    check(len(res.sequences) == 2 and len(res.sequences[0].tokens) == 6, "sample shape %r" % res)
    path = tc.save_state("basic-state").result().path
    resumed = sc.create_training_client_from_state_with_optimizer(path)
    a = tc.forward(data, "cross_entropy").result().metrics["loss:sum"]
    b = resumed.forward(data, "cross_entropy").result().metrics["loss:sum"]
    check(abs(a - b) <= 1e-4 * max(1.0, abs(a)), "resumed loss %r != %r" % (b, a))
    weights_only = sc.create_training_client_from_state(path)  # load_state: a new client's first request
    c = weights_only.forward(data, "cross_entropy").result().metrics["loss:sum"]
    check(abs(a - c) <= 1e-4 * max(1.0, abs(a)), "weights-only resume loss %r != %r" % (c, a))
    return "SDK %s basic flow ok (loss %.3f -> %.3f)" % (tinker.__version__, losses[0], losses[-1])


def expect_refused(fn, needle, status=400):
    """fn() must raise the SDK's APIStatusError with `status` and a message naming `needle`."""
    try:
        fn()
    except Exception as e:  # the SDK wraps it differently per call; check status and text
        code = getattr(e, "status_code", None)
        text = str(e)
        check(code == status, "expected HTTP %d naming %r, got %s: %s" % (status, needle, type(e).__name__, text))
        check(needle in text, "HTTP %d does not name %r: %s" % (status, needle, text))
        return text
    raise CheckFailed("expected HTTP %d naming %r, but the call succeeded" % (status, needle))


def expect_failed(fn, needle):
    """fn() must fail as a user error naming `needle`: a 400 at submission, or a failed future (the engine's
    per-datum checks run after the request was accepted, as on the official service)."""
    try:
        fn()
    except Exception as e:
        code = getattr(e, "status_code", None)
        check(code in (None, 400) and needle in str(e), "expected a user error naming %r, got %s: %s"
              % (needle, type(e).__name__, e))
        return str(e)
    raise CheckFailed("expected a user error naming %r, but the call succeeded" % needle)


def check_sampling(tinker, tc):
    sampler = tc.save_weights_and_get_sampling_client("s038")
    prompt = tinker.ModelInput.from_ints([3, 9, 27, 81, 43, 17])
    params = tinker.SamplingParams(max_tokens=5, temperature=0.0)
    res = sampler.sample(prompt=prompt, num_samples=3, sampling_params=params, topk_sample_logprobs=4).result()
    ids = [s.sequence_id for s in res.sequences]
    check(all(isinstance(i, str) and i for i in ids) and len(set(ids)) == 3, "sequence ids %r" % ids)
    for s in res.sequences:
        top = s.topk_logprobs
        check(top is not None and len(top) == len(s.tokens), "topk_logprobs rows %r" % (top,))
        for tok, lp, row in zip(s.tokens, s.logprobs, top):
            check(len(row) == 4 and row[0][0] == tok, "greedy token %d is not the best of %r" % (tok, row))
            check(abs(row[0][1] - lp) < 1e-4, "top logprob %r vs sampled %r" % (row[0][1], lp))
    full = sampler.sample(prompt=prompt, num_samples=1, sampling_params=params,
                          include_prompt_logprobs=True).result().prompt_logprobs
    last = sampler.sample(prompt=prompt, num_samples=1, sampling_params=params, include_prompt_logprobs=True,
                          prompt_logprobs_last_n=2).result().prompt_logprobs
    check(last[:-2] == [None] * 4, "prompt_logprobs_last_n=2 scored earlier positions: %r" % last)
    check(np.allclose(last[-2:], full[-2:], atol=1e-5), "last_n logprobs %r vs %r" % (last, full))
    target = tinker.TensorData(data=[1] * 5, dtype="int64", shape=[5, 1])
    scored = sampler.sample(prompt=prompt, num_samples=1, sampling_params=params,
                            target_prompt_logprobs=target).result().target_prompt_logprobs
    check(scored is not None and scored.shape == [5, 1], "target_prompt_logprobs %r" % (scored,))
    expect_refused(lambda: sampler.sample(prompt=prompt, num_samples=1, sampling_params=params,
                                          prompt_alt_tokens_k=2000).result(), "prompt_alt_tokens_k")
    image = tinker.ModelInput(chunks=[tinker.types.ImageChunk(data=b"\x89PNG", format="png", expected_tokens=4),
                                      tinker.types.EncodedTextChunk(tokens=[1, 2])])
    expect_refused(lambda: sampler.sample(prompt=image, num_samples=1, sampling_params=params).result(),
                   "image chunks are not supported")
    return "sampling: sequence_id, topk_sample_logprobs, prompt_logprobs_last_n, target_prompt_logprobs; 2 refusals"


def check_training(tinker, sc, tc):
    data = sft_data(tinker, seed=1)
    ppo = [tinker.Datum(model_input=d.model_input,
                        loss_fn_inputs={"target_tokens": d.loss_fn_inputs["target_tokens"],
                                        "logprobs": np.full(12, -5.0, dtype=np.float32),
                                        "advantages": np.ones(12, dtype=np.float32)}) for d in data]
    a = tc.forward(ppo, "ppo", {"clip_low_threshold": 0.5, "clip_high_threshold": 1.5}).result()
    b = tc.forward(ppo, "ppo").result()
    check(a.metrics["loss:sum"] != b.metrics["loss:sum"], "loss_fn_config (v2 numbers) had no effect")
    expect_refused(lambda: tc.forward(ppo, "ppo", {"clip_low_threshold": "low"}).result(),
                   'loss_fn_config["clip_low_threshold"]: string values')
    expect_failed(lambda: tc.forward_backward(ppo, "gspo").result(), "missing 'sequence_ratio_mask'")
    expect_refused(lambda: tc.forward_backward(ppo, "stable_reinforce").result(), "provenance")
    dimuon = tinker.types.DimuonParams(learning_rate=1e-3)
    expect_refused(lambda: tc.optim_step(dimuon).result(), "optimizer_params (type 'dimuon') does not fit")
    custom = tc.forward_backward_custom(data, lambda d, lps: (sum((-lp).sum() for lp in lps), {})).result()
    check(custom.metrics["loss:sum"] > 0, "forward_backward_custom metrics %r" % custom.metrics)
    tc.optim_step(tinker.AdamParams(learning_rate=1e-3)).result()  # the refused seq_ids did not block it
    expect_refused(lambda: tc.save_weights_external("ext").result(), "save_weights_external")
    return "training: loss_fn_config v2, custom loss client-side; 8 refusals (gspo and stable_reinforce flows: sdk038_rl_checks.py)"


def check_rest(tinker, sc, tc):
    caps = sc.get_server_capabilities()
    check(any(m.model_name == MODEL and m.trainable and m.sampleable for m in caps.supported_models),
          "capabilities %r" % caps)
    info = tc.get_info()
    check(info.optimizer_config.type == "adamw", "get_info optimizer_config %r" % info.optimizer_config)
    rest = sc.create_rest_client()
    path = tc.save_state("rest-ckpt").result().path
    expect_refused(lambda: rest.copy_weights(path, "proj-1").result(), "copy_weights")
    owner = tinker.types.UserSearchOwner(owner_urns=["urn:user:1"])
    expect_refused(lambda: rest.search_sessions(tinker.types.SessionSearchRequest(owner=owner)).result(),
                   "owner.type 'user'")
    return "rest: capabilities, optimizer_config; 2 refusals (search and storage usage: sdk038_rl_checks.py)"


def post_json(base_url, path, body):
    req = urllib.request.Request(base_url + path, data=json.dumps(body).encode(), method="POST",
                                 headers={"Content-Type": "application/json", "X-API-Key": "tml-sdkcheck"})
    try:
        with urllib.request.urlopen(req, timeout=30) as r:
            return r.status, r.read().decode()
    except urllib.error.HTTPError as e:
        return e.code, e.read().decode()


def check_close(tinker, base_url):
    with tinker.ServiceClient(base_url=base_url, api_key="tml-sdkcheck") as sc:
        tc = sc.create_lora_training_client(base_model=MODEL, rank=4)
        tc.forward(sft_data(tinker), "cross_entropy").result()
        model_id = tc.model_id
    status, text = post_json(base_url, "/api/v1/get_info", {"model_id": model_id, "type": "get_info"})
    check(status == 404 and "not loaded" in text, "get_info after close: %d %s" % (status, text))
    status, text = post_json(base_url, "/api/v1/sessions/%s/finish" % model_id.split(":")[0],
                             {"reason": {"type": "done"}})
    check(status == 400 and "reason.type" in text, "finish with a bad reason: %d %s" % (status, text))
    return "close: sessions/{id}/finish unloads the session's models"


def run_038(base_url):
    import tinker
    check(tinker.__version__.startswith("0.38"), "this needs tinker 0.38, found %s" % tinker.__version__)
    sc = tinker.ServiceClient(base_url=base_url, api_key="tml-sdkcheck")
    tc = sc.create_lora_training_client(base_model=MODEL, rank=8, seed=5)
    results = [basic_flow(tinker, base_url)]
    print("ok:", results[0], flush=True)
    for fn in (lambda: check_sampling(tinker, tc), lambda: check_training(tinker, sc, tc),
               lambda: check_rest(tinker, sc, tc), lambda: check_close(tinker, base_url)):
        results.append(fn())
        print("ok:", results[-1], flush=True)
    return results


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--build", default=os.path.join(ROOT, "build"))
    ap.add_argument("--base-url", help="run against a running server (no server is started)")
    ap.add_argument("--basic-only", action="store_true", help="only the flow shared with SDK 0.25")
    args = ap.parse_args()
    os.environ.setdefault("TINKER_TELEMETRY", "0")
    if args.base_url:
        import tinker
        print(basic_flow(tinker, args.base_url) if args.basic_only else run_038(args.base_url), flush=True)
        return 0
    sys.path.insert(0, HERE)
    import harness
    server = harness.Server(args.build, name="sdk038").start()
    url = "http://127.0.0.1:%d" % server.port
    t0 = time.monotonic()
    try:
        run_038(url)
        if os.path.exists(SDK025_PYTHON):
            subprocess.run([SDK025_PYTHON, os.path.abspath(__file__), "--base-url", url, "--basic-only"],
                           check=True, timeout=600)
        else:
            print("skip: no %s for the SDK 0.25 flow" % SDK025_PYTHON)
        print("PASS sdk038_checks (%.1f s)" % (time.monotonic() - t0))
        return 0
    except Exception as e:
        print("FAIL sdk038_checks: %s: %s" % (type(e).__name__, e))
        print(server.tail())
        return 1
    finally:
        server.stop()
        server.cleanup()


if __name__ == "__main__":
    sys.exit(main())
