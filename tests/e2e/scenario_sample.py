# Scenario S1 at the wire level: base samplers on the built-in model (num_samples, greedy and seeded
# determinism, seeds independent of batching, stop tokens, max_tokens, compute_logprobs vs sampled
# logprobs, the temperature law, top-k prompt logprobs in protobuf and JSON, pickled clients' huge
# seq_ids, invalid requests), then sampler-vs-trainer logprobs on LoRA snapshots (frozen, named and
# unnamed) and stories260K (golden greedy ids, stop strings). Trainer checks: sample_trainer.py.
import threading

import numpy as np

from harness import BUILTIN_MODEL, check, check_abs, expect_status, expect_user_error
from sample_trainer import check_eos_and_concurrent_training, check_stories, check_trainer_snapshots
from sampling_client import SamplingClient, sample_body

EOS = 257  # the built-in model's eos_token_id (vocab 260: 256 bytes + bos, eos, pad, unk)
VOCAB = 260
P = [5, 6, 7, 8]
P2 = [40, 41, 42, 43, 44, 45]


def check_seq(tokens, lps, reason, max_tokens, stops=(), eos=EOS):
    """One sequence against the sampling contract (S1, §1.10)."""
    check(lps is not None and len(lps) == len(tokens), "logprobs %r for tokens %r" % (lps, tokens))
    check(all(np.isfinite(v) and v <= 0 for v in lps), "logprobs must be finite and <= 0: %r" % lps)
    check(0 < len(tokens) <= max_tokens, "%d tokens for max_tokens %d" % (len(tokens), max_tokens))
    ends = set(stops) | {eos}
    check(all(t not in ends for t in tokens[:-1]), "a stop/EOS token before the end: %r" % tokens)
    if reason == "length":
        check(len(tokens) == max_tokens, "stop_reason length after %d of %d tokens" % (len(tokens), max_tokens))
    else:
        check(reason == "stop" and tokens[-1] in ends, "stop_reason %r, tokens %r" % (reason, tokens))


def check_base(wire, sid):
    models = [m.get("model_name") for m in wire.capabilities().get("supported_models", [])]
    check(BUILTIN_MODEL in models, "capabilities lack %s: %r" % (BUILTIN_MODEL, models))
    sc = SamplingClient.create(wire, sid, base_model=BUILTIN_MODEL)
    info = wire.get_sampler(sc.sampling_session_id)
    check(info.get("base_model") == BUILTIN_MODEL and info.get("sampler_id") == sc.sampling_session_id,
          "samplers/%s: %r" % (sc.sampling_session_id, info))
    return sc


def check_num_samples(sc):
    res = sc.sample(P, 3, max_tokens=8, temperature=0.7, seed=1)
    check(len(res.sequences) == 3, "num_samples=3 gave %d sequences" % len(res.sequences))
    for s in res.sequences:
        check_seq(s["tokens"], s["logprobs"], s["stop_reason"], 8)
    check(res.prompt_logprobs is None and res.topk_prompt_logprobs is None,
          "prompt logprobs not asked for but sent: %r" % res.prompt_logprobs)
    return res.tokens


def greedy(sc, prompt, n=12, **kw):
    (toks, lps, reason), = sc.sample_seqs(prompt, 1, max_tokens=n, temperature=0.0, **kw)
    return toks, lps, reason


def check_greedy(sc):
    a, b = greedy(sc, P), greedy(sc, P)
    check(a == b, "greedy twice differs: %r vs %r" % (a, b))
    check_seq(a[0], a[1], a[2], 12)
    # greedy = argmax, logprobs reported at temperature 1: the prompt logprobs of P + tokens agree
    full = P + a[0]
    res = sc.sample(full, 1, max_tokens=1, prompt_logprobs=True, topk_prompt_logprobs=1)
    check_abs(res.prompt_logprobs[len(P):], a[1], 1e-3, "greedy logprobs vs compute_logprobs (T=1)")
    tops = [row[0][0] for row in res.topk_prompt_logprobs[len(P):]]
    check(tops == a[0], "greedy tokens %r are not the argmax tokens %r" % (a[0], tops))
    return a[0]


def check_seeded(sc):
    kw = dict(max_tokens=8, temperature=1.0, seed=123)
    a, b = sc.sample(P, 2, **kw).tokens, sc.sample(P, 2, **kw).tokens
    check(a == b, "seeded twice differs: %r vs %r" % (a, b))
    eight = sc.sample(P, 8, max_tokens=8, temperature=1.0, seed=9).tokens
    check(len(set(map(tuple, eight))) > 1, "num_samples=8 at T=1 gave 8 identical sequences: %r" % eight)
    return a


def check_seed_vs_batch(sc):
    """A seeded request gives the same tokens alone and while 3 other requests run."""
    kw = dict(max_tokens=8, temperature=1.0, seed=77)
    alone = sc.sample(P2, 2, **kw).tokens
    others = [([9, 10, 11], 4, 1), ([100, 101], 3, 2), (P2, 5, None)]
    out, errors, barrier = [None] * 4, [], threading.Barrier(4)

    def go(i, prompt, n, seed):
        try:
            barrier.wait()
            out[i] = sc.sample(prompt, n, max_tokens=8, temperature=1.0, seed=seed).tokens
        except Exception as e:  # reported on the main thread
            errors.append(e)

    threads = [threading.Thread(target=go, args=(i,) + o) for i, o in enumerate(others)]
    threads.append(threading.Thread(target=go, args=(3, P2, 2, 77)))
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    if errors:
        raise errors[0]
    check(out[3] == alone, "seeded alone %r vs under concurrency %r" % (alone, out[3]))


def first_new(tokens, start=2):
    """An index i >= 1 (start preferred) whose token is not earlier in the sequence and not EOS."""
    for i in [start] + list(range(1, len(tokens))):
        if i < len(tokens) and tokens[i] not in tokens[:i] and tokens[i] != EOS:
            return i
    return None


def check_stop_tokens(sc):
    for prompt in (P, P2, [9, 10, 11], [100, 101, 102], [30, 60, 90, 120]):
        g, _, _ = greedy(sc, prompt)
        i = first_new(g)
        if i is not None:
            break
    check(i is not None, "no greedy sequence with a usable stop token")
    t = g[i]
    toks, lps, reason = greedy(sc, prompt, stop=[t])
    check(reason == "stop" and toks == g[:i + 1], "greedy stop=[%d]: %r %s (greedy %r)" % (t, toks, reason, g))
    check(toks.count(t) == 1 and toks[-1] == t, "stop token %d not last/once: %r" % (t, toks))
    check_seq(toks, lps, reason, 12, [t])
    # the same with a seeded T=1 draw and two stop tokens, only the first of which occurs
    (s, _, _), = sc.sample_seqs(prompt, 1, max_tokens=12, temperature=1.0, seed=5)
    j = first_new(s)
    if j is not None:
        unused = next(x for x in range(3, 200) if x not in s)
        (toks, lps, reason), = sc.sample_seqs(prompt, 1, max_tokens=12, temperature=1.0, seed=5,
                                              stop=[unused, s[j]])
        check(reason == "stop" and toks == s[:j + 1], "seeded stop=[%d,%d]: %r %s (unstopped %r)"
              % (unused, s[j], toks, reason, s))
    # max_tokens: exactly max_tokens tokens, "length", a prefix of the greedy sequence
    n = next((k for k in (5, 3, 1) if EOS not in g[:k]), 1)
    toks, lps, reason = greedy(sc, prompt, n)
    check(reason == "length" and toks == g[:n], "greedy max_tokens=%d: %r %s (greedy %r)" % (n, toks, reason, g))
    return "stop on token %d at index %d" % (t, i)


def draw_first_token(sc, prompt, x, temperature, top_k=-1, tries=40):
    """Samples single tokens (16 per seeded request) until one is x; returns its logprob."""
    for seed in range(tries):
        for toks, lps, reason in sc.sample_seqs(prompt, 16, max_tokens=1, temperature=temperature,
                                                top_k=top_k, seed=1000 + seed):
            check_seq(toks, lps, reason, 1)
            if toks[0] == x:
                return lps[0]
    raise AssertionError("token %d never drawn at T=%g top_k=%d in %d x 16 samples" % (x, temperature, top_k, tries))


def full_distribution(sc, prompt):
    """log p(. | prompt) over the whole vocab at T=1, from topk_prompt_logprobs=VOCAB."""
    res = sc.sample(prompt + [0], 1, max_tokens=1, prompt_logprobs=True, topk_prompt_logprobs=VOCAB)
    row = res.topk_prompt_logprobs[-1]
    check(row is not None and len(row) == VOCAB, "top-%d row has %s entries" % (VOCAB, row and len(row)))
    dist = np.full(VOCAB, np.nan)
    for tok, lp in row:
        dist[tok] = lp
    check(not np.any(np.isnan(dist)), "top-%d row misses tokens" % VOCAB)
    check_abs(np.exp(dist).sum(), 1.0, 1e-4, "full next-token distribution sums")
    return dist


def check_compute_logprobs(sc):
    dist = full_distribution(sc, P)
    ranked = [int(t) for t in np.argsort(-dist)]
    for x in ranked[:3]:
        cl = sc.compute_logprobs(P + [x])
        check(len(cl) == len(P) + 1 and cl[0] is None, "compute_logprobs: %r" % cl)
        check(all(isinstance(v, float) and v <= 0 for v in cl[1:]), "compute_logprobs values %r" % cl)
        check_abs(cl[-1], dist[x], 1e-4, "compute_logprobs vs top-k distribution for %d" % x)
        check_abs(draw_first_token(sc, P, x, 1.0), cl[-1], 1e-3, "sampled logprob of %d vs compute_logprobs" % x)
    return ranked


def check_temperature_law(sc):
    """log p_T(a) - log p_T(b) = (log p_1(a) - log p_1(b)) / T; top_k=2 only forces the choice.
    The prefix is the candidate whose two most likely next tokens are closest (both get drawn)."""
    best = None
    for prompt in (P, P2, [9, 10, 11], [100, 101, 102], [30, 60, 90, 120], [3], [77, 78], [150, 20, 7]):
        dist = full_distribution(sc, prompt)
        a, b = [int(t) for t in np.argsort(-dist)[:2]]
        if best is None or dist[a] - dist[b] < best[0]:
            best = (dist[a] - dist[b], prompt, dist, a, b)
    _, prompt, dist, a, b = best
    lp = {}
    for T in (1.0, 0.5, 1.5):
        lp[T] = {x: draw_first_token(sc, prompt, x, T, top_k=2) for x in (a, b)}
        want = {x: dist[x] / T - np.log(np.exp(dist / T).sum()) for x in (a, b)}
        check_abs([lp[T][a], lp[T][b]], [want[a], want[b]], 1e-3, "logprobs at T=%g (before top-k)" % T)
        check_abs(lp[T][a] - lp[T][b], (lp[1.0][a] - lp[1.0][b]) / T, 1e-3, "difference scaling at T=%g" % T)
    return "gap %.3f at T=1, %.3f at T=0.5" % (lp[1.0][a] - lp[1.0][b], lp[0.5][a] - lp[0.5][b])


def check_topk(sc):
    # half greedy continuation (true tokens are the top-1) and half arbitrary tokens
    prompt = [1, 2, 3, 50] + greedy(sc, [1, 2, 3, 50], 6)[0] + [60, 70, 199, 7, 8]
    fut = sc.sample_async(prompt, 1, max_tokens=1, prompt_logprobs=True, topk_prompt_logprobs=5)
    res = fut.result()
    plp, topk = res.prompt_logprobs, res.topk_prompt_logprobs
    check(len(plp) == len(prompt) and plp[0] is None, "prompt_logprobs %r" % plp)
    check(len(topk) == len(prompt) and topk[0] is None, "topk first row %r" % (topk and topk[0]))
    hits = 0
    for j in range(1, len(prompt)):
        row = topk[j]
        check(row is not None and len(row) == 5, "topk row %d: %r" % (j, row))
        vals = [lp for _, lp in row]
        check(vals == sorted(vals, reverse=True), "topk row %d not descending: %r" % (j, row))
        check(len({t for t, _ in row}) == 5 and sum(np.exp(vals)) <= 1 + 1e-4, "topk row %d: %r" % (j, row))
        for tok, lp in row:
            if tok == prompt[j]:
                hits += 1
                check_abs(lp, plp[j], 1e-4, "topk logprob of the true token at %d" % j)
        check(plp[j] <= vals[0] + 1e-5, "prompt logprob above the top-1 at %d" % j)
    check(hits >= 5, "only %d true tokens found in the top 5 (6 are greedy tokens)" % hits)
    # the same future polled with Accept: application/json gives the legacy JSON, equal values
    js = sc.wire.retrieve(fut.request_id, "Sample", proto=False)
    check(js.tokens == res.tokens and js.stop_reasons == res.stop_reasons, "JSON vs proto sequences")
    check(js.prompt_logprobs[0] is None, "JSON prompt_logprobs[0] %r" % js.prompt_logprobs[0])
    check_abs(js.prompt_logprobs[1:], plp[1:], 1e-6, "JSON vs proto prompt_logprobs")
    check(js.topk_prompt_logprobs[0] is None and [[t for t, _ in r] for r in js.topk_prompt_logprobs[1:]]
          == [[t for t, _ in r] for r in topk[1:]], "JSON vs proto top-k tokens")
    return "%d of %d true tokens in the top 5" % (hits, len(prompt) - 1)


def check_pickled(sc):
    """A copy unpickled elsewhere uses huge, non-contiguous seq_ids on the same session."""
    kw = dict(max_tokens=6, temperature=1.0, seed=31)
    ref = sc.sample(P, 1, **kw).tokens
    for first in (10 ** 12 + 7, 10 ** 12 + 1007, 3 * 10 ** 9 + 1, 10 ** 18 + 3):
        copy = sc.unpickled(first)
        got = copy.sample(P, 1, **kw).tokens
        check(got == ref, "seq_id %d: %r vs %r" % (first, got, ref))
        check(copy.seq == first + 1, "client counter")
    return "seq_ids up to 1e18 accepted"


def check_params(sc):
    """top_k=1 and a tiny top_p at T=1 pick the greedy tokens, with unrestricted T=1 logprobs; a
    prompt split into two chunks is one prompt; a stop token drawn first ends at once; max_tokens
    omitted runs to EOS or the context limit (2048)."""
    g = greedy(sc, P, 6)
    for kw in (dict(top_k=1), dict(top_p=1e-6), dict(top_k=1, top_p=0.5)):
        got = sc.sample_seqs(P, 2, max_tokens=6, temperature=1.0, seed=3, **kw)
        for toks, lps, reason in got:
            check(toks == g[0], "%r at T=1: %r (greedy %r)" % (kw, toks, g[0]))
            check_abs(lps, g[1], 1e-5, "%r: logprobs before top-k/top-p" % kw)
    body = sample_body(sc.sampling_session_id, sc.next_seq(), P, 1, max_tokens=6, temperature=0.0)
    body["prompt"]["chunks"] = [{"type": "encoded_text", "tokens": P[:2]},
                                {"type": "encoded_text", "tokens": P[2:]}]
    two = sc.wire.retrieve(sc.wire.asample(body), "Sample")
    check(two.tokens == [g[0]], "prompt in 2 chunks: %r vs %r" % (two.tokens, g[0]))
    toks, _, reason = greedy(sc, P, 6, stop=[g[0][0]])
    check(toks == g[0][:1] and reason == "stop", "stop on the first token: %r %s" % (toks, reason))
    (toks, lps, reason), = sc.sample_seqs([9, 10], 1, temperature=1.0, seed=3)
    check(0 < len(toks) <= 2046 and len(lps) == len(toks), "max_tokens omitted: %d tokens" % len(toks))
    check(reason == "length" if toks[-1] != EOS else reason == "stop", "max_tokens omitted: %s" % reason)
    return "no max_tokens: %d tokens, %s" % (len(toks), reason)


def check_invalid(wire, sid, sc):
    body = sample_body("sess-nope:sample:0", 0, P, 1, max_tokens=2)
    expect_status(lambda: wire.asample(body), (404,), "unknown sampling_session_id")
    body = sample_body(sc.sampling_session_id, sc.next_seq(), P, 0, max_tokens=2)
    expect_status(lambda: wire.asample(body), (400,), "num_samples 0")
    body = sample_body(sc.sampling_session_id, sc.next_seq(), P, 1, max_tokens=2, stop=["\n\n"])
    expect_status(lambda: wire.asample(body), (400,), "stop strings on a model without tokenizer.json")
    body = sample_body(sc.sampling_session_id, sc.next_seq(), P, 1, max_tokens=2, stop="ab")
    expect_status(lambda: wire.asample(body), (400,), "a single stop string without tokenizer.json")
    bad = [("empty prompt", [], 1, {}), ("token id >= vocab", [5, VOCAB], 1, {}),
           ("negative token id", [5, -1], 1, {}), ("prompt + max_tokens > context", [5] * 2047, 1, {}),
           ("temperature < 0", P, 1, {"temperature": -1.0}), ("top_p 0", P, 1, {"top_p": 0.0}),
           ("top_k 0", P, 1, {"top_k": 0}), ("num_samples 100000", P, 100000, {})]
    for what, prompt, n, kw in bad:
        kw = dict({"max_tokens": 2}, **kw)
        body = sample_body(sc.sampling_session_id, sc.next_seq(), prompt, n, **kw)
        expect_user_error(lambda: wire.retrieve(wire.asample(body), "Sample"), what)
    expect_status(lambda: wire.create_sampling_session(sid, 900, model_path="tinker://nope:train:0/sampler_weights/x"),
                  (404,), "model_path of a missing checkpoint")
    expect_status(lambda: wire.create_sampling_session(sid, 901, model_path="tinker://bad"),
                  (400, 404), "malformed model_path")
    expect_status(lambda: wire.create_sampling_session(sid, 902, base_model="no/such-model"),
                  (400, 404), "unknown base_model")


def run(ctx):
    srv = ctx.start_server()
    wire = srv.wire()
    sid = wire.create_session(tags=["e2e-sample"])
    sc = check_base(wire, sid)
    ctx.case("num_samples=3 at T=0.7: 3 sequences, len(lp)==len(tokens)<=8, lp<=0", check_num_samples, sc)
    ctx.case("greedy twice identical, argmax, logprobs at T=1", check_greedy, sc)
    ctx.case("seeded twice identical; 8 samples not all identical", check_seeded, sc)
    ctx.case("seeded alone == seeded beside 3 concurrent requests", check_seed_vs_batch, sc)
    stop = ctx.case("stop tokens (last, once, 'stop'); max_tokens ('length')", check_stop_tokens, sc)
    ctx.case("compute_logprobs == T=1 sampled logprob", check_compute_logprobs, sc)
    temp = ctx.case("temperature law (1/T scaling, before top-k)", check_temperature_law, sc)
    topk = ctx.case("topk_prompt_logprobs=5 (proto and JSON)", check_topk, sc)
    params = ctx.case("top_k=1 / tiny top_p == greedy; 2 prompt chunks; no max_tokens", check_params, sc)
    ctx.case("pickled client's huge non-contiguous seq_ids", check_pickled, sc)
    ctx.case("invalid sample requests answer 4xx", check_invalid, wire, sid, sc)
    gap = ctx.case("trainer vs sampler logprobs; frozen, named and unnamed snapshots",
                   check_trainer_snapshots, ctx, wire, sid, sc)
    eos = ctx.case("EOS stops (kept once, last) on a model trained to emit it; sampling beside training",
                   check_eos_and_concurrent_training, wire, sid, sc)
    stories = ctx.case("stories260K: golden greedy ids, stop strings", check_stories, ctx)
    ctx.finish()
    return "; ".join(str(x) for x in (stop, temp, topk, params, gap, eos, stories))
