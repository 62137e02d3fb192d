# Scenario S3 in miniature (rl_loop at the wire level, built-in model): each iteration takes an
# unnamed sampler snapshot, samples 4 prompts x 8 at T=1 (max_tokens 4, stop on EOS), rewards a
# sampled first token equal to a low-probability target, builds rl_loop datums (prompt + sampled[:-1],
# zero-padded logprobs/advantages) and runs importance_sampling + optim_step. Checks the sampler vs
# trainer logprob gap on every first forward_backward, that the reward rises, and that a batch with
# all advantages zero leaves the weights (compute_logprobs of a new snapshot) unchanged.
import numpy as np

import wire_codec as wc
from harness import check, check_abs, new_client
from sampling_client import SamplingClient, lp_array

EOS = 257
VOCAB = 260
PROMPT_POOL_SIZES = [4, 3, 5, 4]  # 4 prompts, lengths cycled through the pool
ITERS = 15
GROUP = 8
MAX_TOKENS = 4
LR = 5e-4  # Adam; 1e-3 also learns, 1e-2 collapses a group onto a zero-probability target


def next_token_dist(sc, prompt):
    res = sc.sample(prompt + [0], 1, max_tokens=1, prompt_logprobs=True, topk_prompt_logprobs=VOCAB)
    row = res.topk_prompt_logprobs[-1]
    check(row is not None and len(row) == VOCAB, "top-%d row: %s entries" % (VOCAB, row and len(row)))
    dist = np.full(VOCAB, -np.inf)
    for tok, lp in row:
        dist[tok] = lp
    return dist


def pick_target(dist):
    """A token ranked 3rd or lower whose probability is low but not tiny (closest to 8%), or None."""
    ranked = [int(t) for t in np.argsort(-dist)][2:12]
    ok = [t for t in ranked if t != EOS and 0.02 <= np.exp(dist[t]) <= 0.2]
    return min(ok, key=lambda t: abs(np.exp(dist[t]) - 0.08)) if ok else None


def choose_tasks(base, n=len(PROMPT_POOL_SIZES)):
    """Prompts (from a seeded pool) whose next-token distribution has a usable target; the built-in
    model is peaked, so most prompts' rank-5 tokens are far below 1%."""
    rng = np.random.default_rng(4)
    tasks = []
    for length in PROMPT_POOL_SIZES * 12:
        prompt = [int(t) for t in rng.integers(3, 200, size=length)]
        dist = next_token_dist(base, prompt)
        target = pick_target(dist)
        if target is not None:
            tasks.append((prompt, target, float(np.exp(dist[target]))))
        if len(tasks) == n:
            break
    check(len(tasks) == n, "only %d usable prompts in the pool" % len(tasks))
    return tasks


def rl_datum(prompt, tokens, lps, adv):
    """rl_loop's datum: model_input prompt + sampled[:-1]; targets the next tokens; the sampler's
    logprobs and the advantage on sampled positions, 0 on prompt positions."""
    full = prompt + tokens
    n_prompt = len(prompt) - 1
    logprobs = np.zeros(len(full) - 1, dtype=np.float32)
    advantages = np.zeros(len(full) - 1, dtype=np.float32)
    logprobs[n_prompt:] = lps
    advantages[n_prompt:] = adv
    return wc.Datum(full[:-1], target_tokens=full[1:], logprobs=logprobs, advantages=advantages)


def rollouts(snap, tasks, it):
    futs = [snap.sample_async(p, GROUP, max_tokens=MAX_TOKENS, temperature=1.0, stop=[EOS],
                              seed=1000 * it + i) for i, (p, _, _) in enumerate(tasks)]
    datums, actions, rewards = [], [], []
    for (p, target, _), fut in zip(tasks, futs):
        seqs = fut.result().sequences
        check(len(seqs) == GROUP, "%d sequences for num_samples %d" % (len(seqs), GROUP))
        r = np.array([1.0 if s["tokens"][0] == target else 0.0 for s in seqs])
        for s, adv in zip(seqs, r - r.mean()):
            toks, lps = s["tokens"], s["logprobs"]
            check(lps is not None and len(lps) == len(toks) and 0 < len(toks) <= MAX_TOKENS,
                  "sample %r / %r" % (toks, lps))
            check(EOS not in toks[:-1] and (s["stop_reason"] == "length") == (toks[-1] != EOS),
                  "stop on EOS: %r %s" % (toks, s["stop_reason"]))
            datums.append(rl_datum(p, toks, lps, adv))
            actions.append((len(p) - 1, np.asarray(lps, dtype=np.float64)))
        rewards.append(r.mean())
    return datums, actions, float(np.mean(rewards))


def train(ctx, wire, sid, tc, tasks):
    curve, gaps = [], []
    for it in range(ITERS):
        snap = SamplingClient.snapshot(tc, sid)
        datums, actions, reward = rollouts(snap, tasks, it)
        fb = tc.forward_backward_async(datums, "importance_sampling")
        opt = tc.optim_step_async(LR)
        res = fb.result()
        opt.result()
        check(len(res.outputs) == len(datums), "importance_sampling: %d outputs" % len(res.outputs))
        diff = np.concatenate([lps - res.logprobs(i).astype(np.float64)[start:]
                               for i, (start, lps) in enumerate(actions)])
        gaps.append(float(np.mean(diff)))
        check(abs(gaps[-1]) < 0.01 and np.max(np.abs(diff)) < 1e-2,
              "iteration %d: sampler - trainer logprobs: mean %.3g, max |.| %.3g (over %d action tokens)"
              % (it, gaps[-1], np.max(np.abs(diff)), len(diff)))
        curve.append(reward)
    ctx.note("reward curve: %s" % " ".join("%.2f" % r for r in curve))
    ctx.note("sampler-trainer mean gap per iteration: max |.| %.2e" % max(abs(g) for g in gaps))
    first, last = np.mean(curve[:3]), np.mean(curve[-3:])
    check(last > first + 0.3 and last > 0.6, "reward did not rise: first 3 %.2f, last 3 %.2f: %s"
          % (first, last, curve))
    return curve, gaps


def zero_advantage_batch(tc, sid, tasks, beta1=0.9):
    """forward_backward with every advantage 0, then optim_step: nothing moves (zero gradient; with
    beta1=0 Adam's old momentum cannot move the weights either)."""
    probe = tasks[0][0] + [tasks[0][1], 3, 4]
    before = lp_array(SamplingClient.snapshot(tc, sid).compute_logprobs(probe))
    snap = SamplingClient.snapshot(tc, sid)
    datums, _, _ = rollouts(snap, tasks, 99)
    for d in datums:
        d.inputs["advantages"][:] = 0.0
    res = tc.forward_backward(datums, "importance_sampling")
    check(abs(res.metrics.get("loss:sum", 0.0)) < 1e-6, "zero-advantage loss:sum %r" % res.metrics)
    tc.optim_step(LR, beta1=beta1)
    after = lp_array(SamplingClient.snapshot(tc, sid).compute_logprobs(probe))
    check_abs(after, before, 1e-6, "compute_logprobs after an all-zero-advantage step")


def half_batches(wire, sid, base, tasks):
    """Two importance_sampling forward_backwards on half-batches, then one optim_step, give the
    same weights as one full batch (two adapters with the same seed)."""
    for it in range(100, 130):  # a batch with some reward variance (non-zero advantages)
        datums, _, _ = rollouts(base, tasks, it)
        if any(np.any(d.inputs["advantages"] != 0) for d in datums):
            break
    full = new_client(wire, rank=8, session_id=sid, model_seq_id=2, seed=5)
    halves = new_client(wire, rank=8, session_id=sid, model_seq_id=3, seed=5)
    full.forward_backward(datums, "importance_sampling")
    full.optim_step(LR)
    half = len(datums) // 2
    halves.forward_backward(datums[:half], "importance_sampling")
    halves.forward_backward(datums[half:], "importance_sampling")
    halves.optim_step(LR)
    probe = tasks[1][0] + [tasks[1][1], 3, 4]
    a = lp_array(SamplingClient.snapshot(full, sid).compute_logprobs(probe))
    b = lp_array(SamplingClient.snapshot(halves, sid).compute_logprobs(probe))
    check(np.max(np.abs(a - lp_array(base.compute_logprobs(probe)))) > 1e-4, "the step changed nothing")
    check_abs(b, a, 1e-5, "two accumulated half-batches vs one batch")


def run(ctx):
    srv = ctx.start_server()
    wire = srv.wire()
    sid = wire.create_session(tags=["e2e-rl"])
    base = SamplingClient.create(wire, sid, base_model="tinkerd/builtin-tiny")
    tasks = choose_tasks(base)
    ctx.note("prompts -> target (initial p): %s" % ", ".join("%s -> %d (%.3f)" % t for t in tasks))
    fresh = new_client(wire, rank=8, session_id=sid, model_seq_id=0, seed=1)
    ctx.case("all-zero advantages on a fresh adapter: weights unchanged", zero_advantage_batch,
             fresh, sid, tasks)
    ctx.case("two half-batch forward_backwards before one step == one batch", half_batches,
             wire, sid, base, tasks)
    tc = new_client(wire, rank=8, session_id=sid, model_seq_id=1, seed=0)
    out = ctx.case("RL loop: sampler == trainer logprobs, reward rises", train, ctx, wire, sid, tc, tasks)
    ctx.case("all-zero advantages after training (beta1=0): weights unchanged", zero_advantage_batch,
             tc, sid, tasks, 0.0)
    ctx.finish()
    curve, gaps = out
    return "reward %s; max |mean sampler-trainer gap| %.1e" % (
        " ".join("%.2f" % r for r in curve), max(abs(g) for g in gaps))
