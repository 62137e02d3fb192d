# S3 in miniature through the official SDK (rl_loop): each iteration takes
# save_weights_and_get_sampling_client, samples 4 prompts x 8 at T=1 (max_tokens 4, stop on EOS),
# rewards a sampled first token equal to a low-probability target, builds rl_loop datums (prompt +
# sampled[:-1], zero-padded logprobs/advantages) and runs importance_sampling (then ppo with explicit
# clip thresholds) + optim_step. Checks the sampler vs trainer logprob gap on every forward_backward,
# that the reward rises under both losses, that all-zero advantages leave the weights unchanged and
# that two half-batch forward_backwards before one step equal one batch.
import numpy as np

import sdk_common as sdk
from harness import BUILTIN_MODEL, check, check_abs

EOS = sdk.EOS
VOCAB = sdk.VOCAB
PROMPT_POOL_SIZES = [4, 3, 5, 4]  # 4 prompts, lengths cycled through the pool
ITERS = 15
PPO_ITERS = 8
PPO_CONFIG = {"clip_low_threshold": 0.8, "clip_high_threshold": 1.2}
GROUP = 8
MAX_TOKENS = 4
LR = 5e-4  # Adam; 1e-3 also learns, 1e-2 collapses a group onto a zero-probability target


def next_token_dist(sc, prompt):
    res = sc.sample(sdk.prompt(prompt + [0]), 1, sdk.params(max_tokens=1), include_prompt_logprobs=True,
                    topk_prompt_logprobs=VOCAB).result()
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
    return sdk.datum(full[:-1], full[1:], logprobs=logprobs, advantages=advantages)


def rollouts(snap, tasks, it):
    futs = [snap.sample(sdk.prompt(p), GROUP, sdk.params(max_tokens=MAX_TOKENS, temperature=1.0, stop=[EOS],
                                                         seed=1000 * it + i)) for i, (p, _, _) in enumerate(tasks)]
    datums, actions, rewards = [], [], []
    for (p, target, _), fut in zip(tasks, futs):
        seqs = fut.result().sequences
        check(len(seqs) == GROUP, "%d sequences for num_samples %d" % (len(seqs), GROUP))
        r = np.array([1.0 if s.tokens[0] == target else 0.0 for s in seqs])
        for s, adv in zip(seqs, r - r.mean()):
            toks, lps, reason = list(s.tokens), s.logprobs, str(s.stop_reason).split(".")[-1].lower()
            check(lps is not None and len(lps) == len(toks) and 0 < len(toks) <= MAX_TOKENS,
                  "sample %r / %r" % (toks, lps))
            check(EOS not in toks[:-1] and (reason == "length") == (toks[-1] != EOS),
                  "stop on EOS: %r %s" % (toks, reason))
            datums.append(rl_datum(p, toks, lps, adv))
            actions.append((len(p) - 1, np.asarray(lps, dtype=np.float64)))
        rewards.append(r.mean())
    return datums, actions, float(np.mean(rewards))


def train(ctx, tc, tasks, loss_fn="importance_sampling", iters=ITERS, config=None):
    curve, gaps = [], []
    for it in range(iters):
        snap = tc.save_weights_and_get_sampling_client()
        datums, actions, reward = rollouts(snap, tasks, it)
        res, _ = sdk.step(tc, datums, LR, loss_fn, config)
        check(len(res.loss_fn_outputs) == len(datums), "%s: %d outputs" % (loss_fn, len(res.loss_fn_outputs)))
        diff = np.concatenate([lps - sdk.logprobs(res, i)[start:]
                               for i, (start, lps) in enumerate(actions)])
        gaps.append(float(np.mean(diff)))
        check(abs(gaps[-1]) < 0.01 and np.max(np.abs(diff)) < 1e-2,
              "iteration %d: sampler - trainer logprobs: mean %.3g, max |.| %.3g (over %d action tokens)"
              % (it, gaps[-1], np.max(np.abs(diff)), len(diff)))
        curve.append(reward)
    ctx.note("%s reward curve: %s" % (loss_fn, " ".join("%.2f" % r for r in curve)))
    ctx.note("sampler-trainer mean gap per iteration: max |.| %.2e" % max(abs(g) for g in gaps))
    first, last = np.mean(curve[:3]), np.mean(curve[-3:])
    want = 0.3 if iters >= ITERS else 0.15
    check(last > first + want and last > 0.3 + want, "reward did not rise: first 3 %.2f, last 3 %.2f: %s"
          % (first, last, curve))
    return curve, gaps


def zero_advantage_batch(tc, tasks, beta1=0.9):
    """forward_backward with every advantage 0, then optim_step: nothing moves (zero gradient; with
    beta1=0 Adam's old momentum cannot move the weights either)."""
    probe = tasks[0][0] + [tasks[0][1], 3, 4]
    snap = tc.save_weights_and_get_sampling_client()
    before = lp_array(snap.compute_logprobs(sdk.prompt(probe)).result())
    datums, _, _ = rollouts(snap, tasks, 99)
    datums = [sdk.datum(d.model_input.to_ints(), d.loss_fn_inputs["target_tokens"].tolist(),
                        logprobs=d.loss_fn_inputs["logprobs"].tolist(),
                        advantages=[0.0] * len(d.loss_fn_inputs["advantages"].tolist())) for d in datums]
    res = tc.forward_backward(datums, "importance_sampling").result()
    check(abs(res.metrics.get("loss:sum", 0.0)) < 1e-6, "zero-advantage loss:sum %r" % res.metrics)
    tc.optim_step(sdk.adam(LR, beta1=beta1)).result()
    after = lp_array(tc.save_weights_and_get_sampling_client().compute_logprobs(sdk.prompt(probe)).result())
    check_abs(after, before, 1e-6, "compute_logprobs after an all-zero-advantage step")


def half_batches(svc, base, tasks):
    """Two importance_sampling forward_backwards on half-batches, then one optim_step, give the
    same weights as one full batch (two adapters with the same seed)."""
    for it in range(100, 130):  # a batch with some reward variance (non-zero advantages)
        datums, _, _ = rollouts(base, tasks, it)
        if any(np.any(d.loss_fn_inputs["advantages"].to_numpy() != 0) for d in datums):
            break
    full = sdk.new_training_client(svc, rank=8, seed=5)
    halves = sdk.new_training_client(svc, rank=8, seed=5)
    full.forward_backward(datums, "importance_sampling").result()
    full.optim_step(sdk.adam(LR)).result()
    half = len(datums) // 2
    f1 = halves.forward_backward(datums[:half], "importance_sampling")
    f2 = halves.forward_backward(datums[half:], "importance_sampling")
    f1.result(), f2.result()
    halves.optim_step(sdk.adam(LR)).result()
    probe = sdk.prompt(tasks[1][0] + [tasks[1][1], 3, 4])
    a = lp_array(full.save_weights_and_get_sampling_client().compute_logprobs(probe).result())
    b = lp_array(halves.save_weights_and_get_sampling_client().compute_logprobs(probe).result())
    check(np.max(np.abs(a - lp_array(base.compute_logprobs(probe).result()))) > 1e-4, "the step changed nothing")
    check_abs(b, a, 1e-5, "two accumulated half-batches vs one batch")


def check_ppo_on_policy(tc, tasks):
    """On-policy (ratio 1) ppo with explicit clips has importance_sampling's loss, -sum(A)."""
    datums, _, _ = rollouts(tc.save_weights_and_get_sampling_client(), tasks, 200)
    ppo = tc.forward(datums, "ppo", PPO_CONFIG).result()
    isl = tc.forward(datums, "importance_sampling").result()
    adv = sum(float(np.sum(d.loss_fn_inputs["advantages"].to_numpy())) for d in datums)
    check_abs(ppo.metrics["loss:sum"], isl.metrics["loss:sum"], 1e-4, "ppo vs importance_sampling on-policy")
    check_abs(isl.metrics["loss:sum"], -adv, 1e-3, "importance_sampling on-policy loss vs -sum(A)")


def lp_array(values):
    return np.asarray(values[1:], dtype=np.float64)


def run(ctx):
    srv = ctx.start_server()
    svc = sdk.service(srv)
    base = svc.create_sampling_client(base_model=BUILTIN_MODEL)
    tasks = choose_tasks(base)
    ctx.note("prompts -> target (initial p): %s" % ", ".join("%s -> %d (%.3f)" % t for t in tasks))
    fresh = sdk.new_training_client(svc, rank=8, seed=1)
    ctx.case("all-zero advantages on a fresh adapter: weights unchanged", zero_advantage_batch, fresh, tasks)
    ctx.case("two half-batch forward_backwards before one step == one batch", half_batches, svc, base, tasks)
    tc = sdk.new_training_client(svc, rank=8, seed=0)
    out = ctx.case("RL loop (importance_sampling): sampler == trainer logprobs, reward rises", train,
                   ctx, tc, tasks)
    ctx.case("all-zero advantages after training (beta1=0): weights unchanged", zero_advantage_batch,
             tc, tasks, 0.0)
    ptc = sdk.new_training_client(svc, rank=8, seed=0)
    ctx.case("ppo on-policy loss == importance_sampling == -sum(A)", check_ppo_on_policy, ptc, tasks)
    ppo = ctx.case("RL loop (ppo, clips 0.8/1.2): reward rises", train, ctx, ptc, tasks, "ppo", PPO_ITERS,
                   PPO_CONFIG)
    ctx.finish()
    curve, gaps = out
    return "IS reward %s; ppo reward %s; max |mean sampler-trainer gap| %.1e" % (
        " ".join("%.2f" % r for r in curve), " ".join("%.2f" % r for r in ppo[0]), max(abs(g) for g in gaps))
