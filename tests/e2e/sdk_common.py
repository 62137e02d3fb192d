# What the SDK-driven scenarios (scenario_sdk_*.py) share: the official `tinker` SDK from PyPI (0.38.0
# in .venv, 0.25.0 in .venv-sdk025; the same scenario code runs under both), clients built exactly as a
# user's loop builds them, token-id datums, result accessors and the known-failure register.
import os

import numpy as np

try:
    import tinker
    from tinker import types
except ImportError as e:  # a missing SDK is a failure of the tier, never a skip
    raise SystemExit("FAIL: the official `tinker` SDK is not importable with %s: %s" % (os.sys.executable, e))

from harness import BUILTIN_MODEL, CheckFailed, check, check_abs, memorisation_sequences

SDK_VERSION = tinker.__version__
EOS = 257  # the built-in model's eos_token_id (vocab 260: 256 bytes + bos, eos, pad, unk)
VOCAB = 260

# Server bugs that make a case fail under one SDK version: {(sdk version prefix, case name): bug}.
# mark_known() hands them to the context: such a case that fails is a loud KNOWN FAILURE (with the bug)
# and does not fail the scenario; once it passes the run prints KNOWN FAILURE NOW PASSES.
KNOWN_FAILURES = {}


def mark_known(ctx):
    for (prefix, name), bug in KNOWN_FAILURES.items():
        if SDK_VERSION.startswith(prefix):
            ctx.known[name] = bug


def service(srv, api_key="tml-test"):
    """tinker.ServiceClient as a user's loop makes it (base_url + a tml- key)."""
    return tinker.ServiceClient(base_url="http://127.0.0.1:%d" % srv.port, api_key=api_key)


def rest(svc):
    return svc.create_rest_client()


def datum(tokens, targets, weights=None, **extra):
    inputs = {"target_tokens": np.asarray(targets, dtype=np.int64)}
    if weights is not None:
        inputs["weights"] = np.asarray(weights, dtype=np.float32)
    for k, v in extra.items():
        inputs[k] = np.asarray(v, dtype=np.float32)
    return types.Datum(model_input=types.ModelInput.from_ints([int(t) for t in tokens]), loss_fn_inputs=inputs)


def sft_batch(seed, **kw):
    """harness.memorisation_sequences as SDK datums."""
    return [datum(t, y, w) for t, y, w in memorisation_sequences(seed, **kw)]


def weights_of(d):
    return np.asarray(d.loss_fn_inputs["weights"].to_numpy(), dtype=np.float64)


def logprobs(out, i):
    return np.asarray(out.loss_fn_outputs[i]["logprobs"].to_numpy(), dtype=np.float64)


def all_logprobs(out):
    return np.concatenate([logprobs(out, i).reshape(-1) for i in range(len(out.loss_fn_outputs))])


def weighted_nll(out, batch):
    return float(-sum(np.sum(logprobs(out, i) * weights_of(d)) for i, d in enumerate(batch)))


def mean_nll(out, batch):
    return weighted_nll(out, batch) / float(sum(weights_of(d).sum() for d in batch))


def check_metric_keys(metrics):
    for k in metrics:
        check(k.count(":") == 1, "metric key %r lacks exactly one ':' (name:reduction)" % k)


def adam(lr, beta1=0.9, beta2=0.95, eps=1e-8, **kw):
    return types.AdamParams(learning_rate=lr, beta1=beta1, beta2=beta2, eps=eps, **kw)


def step(tc, batch, lr, loss_fn="cross_entropy", config=None, **adam_kw):
    """forward_backward and optim_step submitted back to back, then both results (the cookbook's way)."""
    fb = tc.forward_backward(batch, loss_fn, config) if config else tc.forward_backward(batch, loss_fn)
    opt = tc.optim_step(adam(lr, **adam_kw))
    out = fb.result()
    check_metric_keys(out.metrics)
    return out, opt.result()


def train(tc, batch, lrs, **adam_kw):
    """Steps on a fixed batch; returns each step's loss:sum."""
    return [step(tc, batch, lr, **adam_kw)[0].metrics["loss:sum"] for lr in lrs]


def new_training_client(svc, rank=8, seed=0, base_model=BUILTIN_MODEL, **kw):
    tc = svc.create_lora_training_client(base_model=base_model, rank=rank, seed=seed, **kw)
    return tc


def resolved(client):
    """The client itself: SDK 0.38 hands out Backcompat*ClientFuture wrappers (resolved by .result())."""
    futures = tuple(getattr(tinker, n) for n in ("BackcompatSamplingClientFuture", "BackcompatTrainingClientFuture")
                    if hasattr(tinker, n))
    return client.result() if futures and isinstance(client, futures) else client


def prompt(tokens):
    return types.ModelInput.from_ints([int(t) for t in tokens])


def params(**kw):
    return types.SamplingParams(**kw)


def expect_api_error(fn, classes, msg):
    """fn must raise one of the SDK's exception classes (e.g. tinker.NotFoundError); returns it."""
    try:
        fn()
    except classes as e:
        return e
    except Exception as e:  # noqa: BLE001 - a different class is the failure being reported
        raise CheckFailed("%s: raised %s (want %s): %s" % (msg, type(e).__name__,
                                                          "/".join(c.__name__ for c in classes), e))
    raise CheckFailed("%s: succeeded, expected %s" % (msg, "/".join(c.__name__ for c in classes)))


# What a clean user error looks like through the SDK: a 4xx at submission or a failed future.
USER_ERRORS = (tinker.BadRequestError, tinker.NotFoundError, tinker.UnprocessableEntityError,
               tinker.RequestFailedError)


# ---------------------------------------------------------------- served tiny Hugging Face families


def save_random_hf_model(model_cls, config, seed, out_dir):
    """A seeded random transformers model (every matrix N(0, 0.2), norms as built) saved with save_pretrained,
    for scenarios that serve a family with --model NAME=DIR (sdk_moe, sdk_qwen35). Returns out_dir."""
    import torch
    torch.manual_seed(seed)
    model = model_cls(config).float().eval()
    with torch.no_grad():
        for p in model.parameters():
            if p.dim() > 1:
                p.normal_(0.0, 0.2)
    model.save_pretrained(out_dir, safe_serialization=True)
    return out_dir


def learn_fixed_batch(tc, batch, lr, steps=12):
    """`steps` SFT steps on one batch; the mean NLL must at least halve. Returns the NLL of every step."""
    nll = []
    for _ in range(steps):
        fb, _ = step(tc, batch, lr)
        nll.append(mean_nll(fb, batch))
    check(nll[-1] < 0.5 * nll[0], "NLL did not halve in %d steps: %s" % (steps, [round(x, 3) for x in nll]))
    return nll


def check_resume_bit_exact(svc, tc, batch, lr, name):
    """save_state, two more steps, and the same two steps from create_training_client_from_state_with_optimizer:
    bit-identical losses."""
    path = tc.save_state(name).result().path
    continued = train(tc, batch, [lr] * 2)
    resumed = train(resolved(svc.create_training_client_from_state_with_optimizer(path)), batch, [lr] * 2)
    check(resumed == continued, "resume with optimizer: %r vs uninterrupted %r (bit-identical)" % (resumed, continued))


def check_sampler_matches_trainer(tc, batch, name):
    """The sampler weights saved as `name`: compute_logprobs of two data equal the trainer's forward, and the
    logprobs of sampled tokens (the cached decode) equal compute_logprobs of prompt + tokens (one prefill)."""
    sampler = resolved(tc.save_weights_and_get_sampling_client(name))
    fwd = tc.forward(batch, "cross_entropy").result()
    for i, d in enumerate(batch[:2]):
        toks = d.model_input.to_ints() + [int(d.loss_fn_inputs["target_tokens"].tolist()[-1])]
        lps = sampler.compute_logprobs(prompt(toks)).result()
        check_abs(lps[1:], logprobs(fwd, i), 2e-4, "datum %d: sampler compute_logprobs vs forward" % i)
    start = batch[0].model_input.to_ints()[:6]
    out = sampler.sample(prompt(start), 2, params(max_tokens=8, temperature=1.0, seed=3)).result()
    check(len(out.sequences) == 2 and all(len(s.tokens) == 8 for s in out.sequences), "sample: %r" % out)
    for k, seq in enumerate(out.sequences):
        whole = sampler.compute_logprobs(prompt(start + list(seq.tokens))).result()
        check_abs(list(seq.logprobs), whole[len(start):], 2e-4,
                  "sequence %d: sampled-token logprobs vs compute_logprobs of the whole sequence" % k)
    return sampler

