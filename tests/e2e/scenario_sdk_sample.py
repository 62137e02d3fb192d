# S1 through the official SDK's SamplingClient on the built-in model: num_samples, greedy and seeded
# determinism, stop tokens (last, once) and max_tokens ("length"), compute_logprobs (first None, equal
# to a T=1 sampled logprob and to the top-k distribution), the temperature law, topk_prompt_logprobs,
# top_k=1 == greedy; a trained LoRA snapshot (frozen, == its trainer); stories260K golden greedy ids
# and stop strings.
import json
import os

import numpy as np

import sdk_common as sdk
from harness import BUILTIN_MODEL, check, check_abs, shared_path, stories_dir

EOS, VOCAB = sdk.EOS, sdk.VOCAB
P = [5, 6, 7, 8]
PROMPTS = (P, [40, 41, 42, 43, 44, 45], [9, 10, 11], [100, 101, 102], [30, 60, 90, 120])


def seqs(sc, p, n=1, **kw):
    res = sc.sample(sdk.prompt(p), n, sdk.params(**kw)).result()
    check(len(res.sequences) == n, "%d sequences for num_samples=%d" % (len(res.sequences), n))
    return [(list(s.tokens), list(s.logprobs) if s.logprobs is not None else None, str(s.stop_reason))
            for s in res.sequences]


def reason_name(r):
    return r.split(".")[-1].lower()


def check_seq(tokens, lps, reason, max_tokens, stops=()):
    check(lps is not None and len(lps) == len(tokens), "logprobs %r for tokens %r" % (lps, tokens))
    check(all(np.isfinite(v) and v <= 0 for v in lps), "logprobs must be finite and <= 0: %r" % lps)
    check(0 < len(tokens) <= max_tokens, "%d tokens for max_tokens %d" % (len(tokens), max_tokens))
    ends = set(stops) | {EOS}
    check(all(t not in ends for t in tokens[:-1]), "a stop/EOS token before the end: %r" % tokens)
    if reason_name(reason) == "length":
        check(len(tokens) == max_tokens, "stop_reason length after %d of %d tokens" % (len(tokens), max_tokens))
    else:
        check(reason_name(reason) == "stop" and tokens[-1] in ends, "stop_reason %r, tokens %r" % (reason, tokens))


def greedy(sc, p, n=12, **kw):
    return seqs(sc, p, 1, max_tokens=n, temperature=0.0, **kw)[0]


def check_num_samples(sc):
    out = seqs(sc, P, 3, max_tokens=8, temperature=0.7, seed=1)
    for t, lp, r in out:
        check_seq(t, lp, r, 8)
    check(seqs(sc, P, 3, max_tokens=8, temperature=0.7, seed=1) == out, "seeded num_samples=3 not repeatable")
    many = seqs(sc, P, 8, max_tokens=8, temperature=1.0, seed=2)
    check(len({tuple(t) for t, _, _ in many}) > 1, "8 samples at T=1 are all identical")


def check_greedy(sc):
    a, b = greedy(sc, P), greedy(sc, P)
    check(a == b, "greedy twice: %r vs %r" % (a, b))
    check_seq(*a, 12)


def check_stop_tokens(sc):
    for p in PROMPTS:
        g = greedy(sc, p)[0]
        i = next((k for k in range(2, len(g)) if g[k] not in g[:k] and g[k] != EOS and EOS not in g[:k]), None)
        if i is not None:
            break
    check(i is not None, "no greedy sequence with a usable stop token")
    t = g[i]
    toks, lps, reason = greedy(sc, p, stop=[t])
    check(reason_name(reason) == "stop" and toks == g[:i + 1], "stop=[%d]: %r %s (greedy %r)" % (t, toks, reason, g))
    check_seq(toks, lps, reason, 12, [t])
    toks, _, reason = greedy(sc, p, n=i, stop=[t])
    check(reason_name(reason) == "length" and toks == g[:i], "max_tokens before the stop: %r %s" % (toks, reason))
    return "stop on token %d at index %d" % (t, i)


def full_distribution(sc, p):
    """log p(. | p) over the whole vocabulary at T=1, from topk_prompt_logprobs=VOCAB."""
    res = sc.sample(sdk.prompt(p + [0]), 1, sdk.params(max_tokens=1), include_prompt_logprobs=True,
                    topk_prompt_logprobs=VOCAB).result()
    row = res.topk_prompt_logprobs[-1]
    check(row is not None and len(row) == VOCAB, "top-%d row has %s entries" % (VOCAB, row and len(row)))
    dist = np.full(VOCAB, np.nan)
    for tok, lp in row:
        dist[tok] = lp
    check(not np.any(np.isnan(dist)), "top-%d row misses tokens" % VOCAB)
    check_abs(np.exp(dist).sum(), 1.0, 1e-4, "next-token distribution sums")
    return dist


def check_compute_logprobs(sc):
    dist = full_distribution(sc, P)
    for x in [int(t) for t in np.argsort(-dist)[:2]]:
        cl = sc.compute_logprobs(sdk.prompt(P + [x])).result()
        check(len(cl) == len(P) + 1 and cl[0] is None, "compute_logprobs: %r" % cl)
        check_abs(cl[-1], dist[x], 1e-4, "compute_logprobs vs the top-k distribution for %d" % x)
    for seed in (1, 2, 3):
        (t, lp, _), = seqs(sc, P, 1, max_tokens=1, temperature=1.0, seed=seed)
        check_abs(lp[0], dist[t[0]], 1e-3, "T=1 sampled logprob of %d vs compute_logprobs" % t[0])


def check_temperature_law(sc):
    """A token sampled at temperature T has logprob log softmax(lp_1 / T) (before top-k/top-p)."""
    dist = full_distribution(sc, P)
    for T in (0.5, 1.5):
        for seed in (1, 2):
            (t, lp, _), = seqs(sc, P, 1, max_tokens=1, temperature=T, seed=seed, top_k=3)
            want = dist[t[0]] / T - np.log(np.exp(dist / T).sum())
            check_abs(lp[0], want, 1e-3, "logprob of %d at T=%g" % (t[0], T))


def check_topk(sc):
    p = [1, 2, 3, 50] + greedy(sc, [1, 2, 3, 50], 6)[0] + [60, 70, 199, 7, 8]
    res = sc.sample(sdk.prompt(p), 1, sdk.params(max_tokens=1), include_prompt_logprobs=True,
                    topk_prompt_logprobs=5).result()
    plp, topk = res.prompt_logprobs, res.topk_prompt_logprobs
    check(len(plp) == len(p) and plp[0] is None, "prompt_logprobs %r" % plp)
    check(len(topk) == len(p) and topk[0] is None, "topk first row %r" % (topk and topk[0]))
    hits = 0
    for j in range(1, len(p)):
        row = topk[j]
        check(row is not None and len(row) == 5, "topk row %d: %r" % (j, row))
        vals = [lp for _, lp in row]
        check(vals == sorted(vals, reverse=True), "topk row %d not descending: %r" % (j, row))
        for tok, lp in row:
            if tok == p[j]:
                hits += 1
                check_abs(lp, plp[j], 1e-4, "topk logprob of the true token at %d" % j)
    check(hits >= 5, "only %d true tokens in the top 5 (6 are greedy tokens)" % hits)


def check_params(sc):
    g = greedy(sc, P, 6)[0]
    (t, _, _), = seqs(sc, P, 1, max_tokens=6, temperature=1.0, top_k=1, seed=9)
    check(t == g, "top_k=1 %r vs greedy %r" % (t, g))
    (t, _, _), = seqs(sc, P, 1, max_tokens=6, temperature=1.0, top_p=1e-6, seed=9)
    check(t == g, "tiny top_p %r vs greedy %r" % (t, g))


def check_snapshot(svc, batch):
    """save_weights_and_get_sampling_client: sampled logprobs == the trainer's; frozen after a step."""
    tc = sdk.new_training_client(svc, rank=8, seed=0)
    sdk.train(tc, batch, [1e-2])
    snap = tc.save_weights_and_get_sampling_client()
    out = seqs(snap, [1, 2, 3], 4, max_tokens=8, temperature=1.0, seed=3)
    data = [sdk.datum([1, 2, 3] + t[:-1], [2, 3] + t) for t, _, _ in out]
    fwd = tc.forward(data, "cross_entropy").result()
    gap = max(float(np.max(np.abs(np.asarray(lp) - sdk.logprobs(fwd, i)[2:]))) for i, (_, lp, _) in enumerate(out))
    check(gap < 1e-3, "snapshot sampled logprobs vs trainer: max gap %.3g" % gap)
    before = snap.compute_logprobs(sdk.prompt([1, 2, 3, 4, 5])).result()
    sdk.train(tc, batch, [1e-2])
    check(snap.compute_logprobs(sdk.prompt([1, 2, 3, 4, 5])).result() == before, "snapshot not frozen")
    new = tc.save_weights_and_get_sampling_client().compute_logprobs(sdk.prompt([1, 2, 3, 4, 5])).result()
    check(new != before, "a new snapshot after a step has the old logprobs")
    return "gap %.1e" % gap


class Detok:
    """Decodes stories260K ids with tokenizer.json's vocab: '▁' -> ' ', <0xNN> byte fallback."""

    def __init__(self, path):
        self.inv = {v: k for k, v in json.load(open(path))["model"]["vocab"].items()}

    def __call__(self, ids):
        out = b""
        for i in ids:
            piece = self.inv[i]
            if piece.startswith("<0x") and piece.endswith(">") and len(piece) == 6:
                out += bytes([int(piece[3:5], 16)])
            else:
                out += piece.replace("\u2581", " ").encode()
        text = out.decode(errors="replace")
        return text[1:] if text.startswith(" ") else text


def check_stories(ctx):
    hf = stories_dir()
    expected = json.load(open(shared_path("models", "stories260K", "expected.json")))
    detok = Detok(os.path.join(hf, "tokenizer.json"))
    srv = ctx.start_server(extra=["--model", "stories260K=" + hf], name="tinkerd-stories")
    sc = sdk.service(srv).create_sampling_client(base_model="stories260K")
    gen = expected["generation"]["<empty prompt>"]
    p, want = gen["prompt_ids"], gen["greedy_48_ids"]
    toks, lps, reason = greedy(sc, p, 48)
    check(toks == want, "greedy from %r: %r (golden %r)" % (p, toks, want))
    check(reason_name(reason) == "length" and len(lps) == 48, "greedy 48: stop_reason %r" % reason)
    text = detok(toks)
    check(gen["text"].startswith(text), "decoded greedy %r vs golden text %r" % (text, gen["text"]))
    stops = []
    for stop in (["park"], ["red ball", "Lily"]):
        first = min(stop, key=lambda w: text.find(w) + len(w))
        s, slp, sr = greedy(sc, p, 48, stop=stop)
        got = detok(s)
        check(reason_name(sr) == "stop" and s == want[:len(s)], "stop=%r: %r %s" % (stop, s, sr))
        check(got.endswith(first) and got.count(first) == 1 and len(s) < 48,
              "stop=%r: text %r should end with %r once" % (stop, got, first))
        stops.append("%r->%d tokens" % (first, len(s)))
    srv.stop()
    return "stories260K golden greedy ok, stops %s" % ", ".join(stops)


def run(ctx):
    srv = ctx.start_server()
    svc = sdk.service(srv)
    sc = svc.create_sampling_client(base_model=BUILTIN_MODEL)
    ctx.case("num_samples=3 at T=0.7 (seeded, repeatable); 8 samples differ", check_num_samples, sc)
    ctx.case("greedy twice identical", check_greedy, sc)
    stop = ctx.case("stop token (last, once, 'stop'); max_tokens first ('length')", check_stop_tokens, sc)
    ctx.case("compute_logprobs == top-k distribution == T=1 sampled logprob", check_compute_logprobs, sc)
    ctx.case("temperature law (logprobs under softmax(lp/T), before top-k)", check_temperature_law, sc)
    ctx.case("topk_prompt_logprobs=5: first None, descending, true token's logprob", check_topk, sc)
    ctx.case("top_k=1 / tiny top_p == greedy", check_params, sc)
    gap = ctx.case("LoRA snapshot == trainer, frozen; new snapshot differs", check_snapshot, svc,
                   sdk.sft_batch(seed=4))
    stories = ctx.case("stories260K: golden greedy ids, stop strings", check_stories, ctx)
    ctx.finish()
    return "%s; snapshot %s; %s" % (stop, gap, stories)
