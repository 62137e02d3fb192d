# S2 through the official SDK: get_info, forward == the base sampler's compute_logprobs on a fresh
# adapter, a 15-step SFT loop on a fixed batch (NLL halves, loss:sum = -sum(lp*w)), a pipelined run
# (step k+1 submitted before k is awaited) with the same losses, forward determinism, sampler weights
# whose compute_logprobs equal the trainer's forward, and stories260K (golden logprobs, SFT).
import numpy as np

import sdk_common as sdk
from harness import BUILTIN_MODEL, check, check_abs, check_close, stories_dir


STEPS = 15
LR = 1e-3


def check_info(tc, rank):
    info = tc.get_info()
    check(info.model_data.model_name == BUILTIN_MODEL, "get_info model_name %r" % info.model_data.model_name)
    check(info.lora_rank == rank and info.is_lora is True, "get_info rank/is_lora %r" % info)


def check_capabilities(svc):
    names = [m.model_name for m in svc.get_server_capabilities().supported_models]
    check(BUILTIN_MODEL in names, "capabilities lack %s: %r" % (BUILTIN_MODEL, names))


def check_fresh_vs_base(svc, tc, batch):
    """Zero-initialised LoRA: the trainer's forward equals the base sampler's compute_logprobs."""
    base = svc.create_sampling_client(base_model=BUILTIN_MODEL)
    fwd = tc.forward(batch, "cross_entropy").result()
    for i, d in enumerate(batch):
        toks = d.model_input.to_ints() + [int(d.loss_fn_inputs["target_tokens"].tolist()[-1])]
        lps = base.compute_logprobs(sdk.prompt(toks)).result()
        check(lps[0] is None and len(lps) == len(toks), "compute_logprobs shape: %r" % lps[:3])
        check_abs(lps[1:], sdk.logprobs(fwd, i), 2e-4, "datum %d: forward vs base compute_logprobs" % i)


def train_loop(tc, batch):
    nll, losses = [], []
    for _ in range(STEPS):
        fb, _ = sdk.step(tc, batch, LR)
        nll.append(sdk.mean_nll(fb, batch))
        losses.append(fb.metrics["loss:sum"])
        check_close(fb.metrics["loss:sum"], sdk.weighted_nll(fb, batch), 1e-4, "loss:sum vs -sum(lp*w)")
    check(nll[-1] < 0.5 * nll[0], "NLL did not halve in %d steps: %s" % (STEPS, [round(x, 3) for x in nll]))
    falls = sum(1 for a, b in zip(nll, nll[1:]) if b < a)
    check(falls >= STEPS - 4, "NLL fell only %d of %d steps: %s" % (falls, STEPS - 1, nll))
    return nll, losses


def check_pipelined(svc, batch, losses):
    """Same seed, every step submitted before the previous one is awaited: the same losses."""
    tc = sdk.new_training_client(svc, rank=8, seed=0)
    pending = []
    for _ in range(STEPS):
        pending.append(tc.forward_backward(batch, "cross_entropy"))
        pending.append(tc.optim_step(sdk.adam(LR)))
    piped = [f.result().metrics["loss:sum"] for f in pending[0::2]]
    for f in pending[1::2]:
        f.result()
    check_close(piped, losses, 1e-5, "pipelined vs sequential losses")
    return tc


def check_forward(tc, batch):
    a = tc.forward(batch, "cross_entropy").result()
    b = tc.forward(batch, "cross_entropy").result()
    check(len(a.loss_fn_outputs) == len(batch), "forward returned %d datums" % len(a.loss_fn_outputs))
    for i, d in enumerate(batch):
        lp = sdk.logprobs(a, i)
        check(lp.shape == (len(d.loss_fn_inputs["target_tokens"].tolist()),), "logprobs shape %s" % (lp.shape,))
        check(np.all(lp <= 0) and np.all(np.isfinite(lp)), "logprobs must be finite and <= 0")
    check(np.array_equal(sdk.all_logprobs(a), sdk.all_logprobs(b)), "two forwards differ")
    c = tc.forward_backward(batch, "cross_entropy").result()
    check_close(sdk.all_logprobs(c), sdk.all_logprobs(a), 1e-6, "forward changed the next forward_backward")
    check_close(a.metrics["loss:sum"], sdk.weighted_nll(a, batch), 1e-4, "forward loss:sum")
    sdk.check_metric_keys(a.metrics)


def check_sampler_weights(svc, tc, batch):
    """save_weights_for_sampler("final"): tinker://<run>/sampler_weights/final; a sampling client on
    it gives the trainer's logprobs (the cookbook's sampler/trainer check), greedy is repeatable."""
    path = tc.save_weights_for_sampler("final").result().path
    run_id = tc.get_info().model_id
    check(path == "tinker://%s/sampler_weights/final" % run_id, "sampler path %r" % path)
    sc = svc.create_sampling_client(model_path=path)
    fwd = tc.forward(batch, "cross_entropy").result()
    sq = []
    for i, d in enumerate(batch):
        toks = d.model_input.to_ints() + [int(d.loss_fn_inputs["target_tokens"].tolist()[-1])]
        lps = sc.compute_logprobs(sdk.prompt(toks)).result()
        sq.append((np.asarray(lps[1:], dtype=np.float64) - sdk.logprobs(fwd, i)) ** 2)
    mse = float(np.mean(np.concatenate(sq)))
    check(mse < 1e-6, "sampler vs trainer logprobs: mean squared error %g" % mse)
    p = sdk.prompt(batch[0].model_input.to_ints()[:6])
    g1 = sc.sample(p, 1, sdk.params(max_tokens=6, temperature=0.0)).result().sequences[0].tokens
    g2 = sc.sample(p, 1, sdk.params(max_tokens=6, temperature=0.0)).result().sequences[0].tokens
    check(list(g1) == list(g2), "greedy twice: %r vs %r" % (g1, g2))
    return path


def check_stories(ctx):
    """stories260K: logprobs after "Once upon a time" match the golden logits (argmax 432, the
    distribution sums to 1) and SFT lowers the loss."""
    d = stories_dir()
    srv = ctx.start_server(extra=["--model", "stories260K=" + d], name="tinkerd-stories")
    svc = sdk.service(srv)
    tc = sdk.new_training_client(svc, rank=8, seed=0, base_model="stories260K")
    check(tc.get_info().model_data.model_name == "stories260K", "stories get_info")
    p = [1, 403, 407, 261, 378]
    datums = [sdk.datum(p, p[1:] + [t], [0, 0, 0, 0, 1]) for t in range(512)]
    res = tc.forward(datums, "cross_entropy").result()
    last = np.array([sdk.logprobs(res, t)[-1] for t in range(512)], dtype=np.float64)
    lse = 17.8311
    check_abs(last[:2], [-10.13658 - lse, -5.32946 - lse], 2e-3, "golden logprobs of tokens 0 and 1")
    check(int(np.argmax(last)) == 432, "argmax after the prompt %d (golden 432)" % int(np.argmax(last)))
    check_abs(np.exp(last).sum(), 1.0, 1e-4, "next-token probabilities sum")
    batch = sdk.sft_batch(seed=5, vocab=512)
    losses = sdk.train(tc, batch, [LR] * 10)
    check(losses[-1] < 0.8 * losses[0], "stories SFT loss %r" % losses)
    srv.stop()
    return "stories260K loss %.2f -> %.2f" % (losses[0], losses[-1])


def run(ctx):
    srv = ctx.start_server()
    svc = sdk.service(srv)
    batch = sdk.sft_batch(seed=1)
    ctx.case("get_server_capabilities lists the model", check_capabilities, svc)
    tc = sdk.new_training_client(svc, rank=8, seed=0)
    ctx.case("get_info", check_info, tc, 8)
    ctx.case("fresh adapter: forward == base compute_logprobs", check_fresh_vs_base, svc, tc, batch)
    nll, losses = train_loop(tc, batch)
    ctx.note("NLL per step: %s" % " ".join("%.3f" % x for x in nll))
    pipe = ctx.case("pipelined run == sequential run", check_pipelined, svc, batch, losses)
    ctx.case("forward deterministic, loss:sum = -sum(lp*w), forward leaves fb alone", check_forward,
             pipe or tc, batch)
    path = ctx.case("save_weights_for_sampler -> sampler == trainer logprobs", check_sampler_weights,
                    svc, tc, batch)
    stories = ctx.case("stories260K: golden logprobs and SFT", check_stories, ctx)
    ctx.finish()
    return "NLL %.3f -> %.3f in %d steps; pipelined == sequential; %s; %s" % (
        nll[0], nll[-1], STEPS, path, stories)
