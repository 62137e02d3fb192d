# Sampling checks that involve training or a second model, used by scenario_sample.py: sampler vs
# trainer logprobs on LoRA snapshots, frozen snapshots, named vs unnamed sampler saves, and the real
# stories260K model (golden greedy ids and logits, stop strings decoded with its tokenizer.json).
import json
import os

import numpy as np

import wire_codec as wc
from harness import BUILTIN_MODEL, check, check_abs, new_client, sft_batch, shared_dir
from sampling_client import SamplingClient, lp_array

LR = 1e-2
PROMPT = [12, 13, 14, 15, 16]


def seq_datum(tokens):
    return wc.Datum(tokens[:-1], target_tokens=tokens[1:], weights=np.ones(len(tokens) - 1))


def trainer_logprobs(tc, sequences):
    """The trainer's log p(token_i | tokens_<i) for i >= 1, per sequence (forward, cross_entropy)."""
    res = tc.forward([seq_datum(s) for s in sequences])
    return [res.logprobs(i).astype(np.float64) for i in range(len(sequences))]


def sft_steps(tc, n, batch):
    for _ in range(n):
        tc.step(batch, LR)


def check_trainer_snapshots(ctx, wire, sid, base):
    tc = new_client(wire, rank=8, session_id=sid, model_seq_id=0, seed=0)
    batch = sft_batch(seed=3)
    probe = [int(t) for t in batch[0].tokens[:10]]
    # a fresh adapter (zero-init B) leaves the base model: base sampler == trainer
    check_abs(lp_array(base.compute_logprobs(probe)), trainer_logprobs(tc, [probe])[0], 1e-3,
              "base sampler vs fresh LoRA trainer")
    sft_steps(tc, 2, batch)
    snap = SamplingClient.snapshot(tc, sid)
    info = wire.get_sampler(snap.sampling_session_id)
    check(info.get("base_model") == BUILTIN_MODEL, "samplers/%s: %r" % (snap.sampling_session_id, info))
    seqs = snap.sample_seqs(PROMPT, 6, max_tokens=8, temperature=1.0, seed=11)
    full = [PROMPT + toks for toks, _, _ in seqs]
    trainer = trainer_logprobs(tc, full)
    gaps = []
    for (toks, lps, _), tl in zip(seqs, trainer):
        gaps.extend(np.asarray(lps) - tl[len(PROMPT) - 1:])
    gaps = np.abs(np.asarray(gaps))
    ctx.note("sampler vs trainer logprobs over %d sampled tokens: max |gap| %.2e, mean |gap| %.2e"
             % (len(gaps), gaps.max(), gaps.mean()))
    check(gaps.max() < 1e-3 and gaps.mean() < 1e-4,
          "sampler vs trainer gap: max %.3g (< 1e-3), mean %.3g (< 1e-4)" % (gaps.max(), gaps.mean()))
    check_abs(lp_array(snap.compute_logprobs(full[0])), trainer[0], 1e-3, "snapshot compute_logprobs vs trainer")
    # frozen: the old snapshot does not move with 3 more optimizer steps; a new snapshot does
    before = lp_array(snap.compute_logprobs(probe))
    sft_steps(tc, 3, batch)
    after = lp_array(snap.compute_logprobs(probe))
    check(np.array_equal(before, after), "snapshot moved after 3 steps: %r vs %r" % (before, after))
    snap2 = SamplingClient.snapshot(tc, sid)
    now = lp_array(snap2.compute_logprobs(probe))
    check(np.max(np.abs(now - before)) > 1e-3, "a new snapshot equals the old one: %r" % now)
    check_abs(now, trainer_logprobs(tc, [probe])[0], 1e-3, "new snapshot vs trainer")
    # named save at the same step == the unnamed snapshot; the base model is inferred from the path
    path = tc.save_weights_for_sampler("s1")["path"]
    check(path.endswith("/sampler_weights/s1"), "named sampler path %r" % path)
    named = SamplingClient.create(wire, sid, model_path=path)
    info = wire.get_sampler(named.sampling_session_id)
    check(info.get("base_model") == BUILTIN_MODEL and info.get("model_path") == path,
          "samplers/%s: %r" % (named.sampling_session_id, info))
    check_abs(lp_array(named.compute_logprobs(probe)), now, 1e-6, "named (model_path) vs unnamed snapshot")
    a = named.sample(PROMPT, 2, max_tokens=6, temperature=1.0, seed=4).tokens
    b = snap2.sample(PROMPT, 2, max_tokens=6, temperature=1.0, seed=4).tokens
    check(a == b, "named vs unnamed snapshot seeded samples: %r vs %r" % (a, b))
    return "sampler-trainer max |gap| %.1e mean %.1e" % (gaps.max(), gaps.mean())


def check_eos_and_concurrent_training(wire, sid, base, eos=257):
    """SFT teaches prompt -> x, EOS; the snapshot's greedy sample is [x, EOS] with stop_reason
    "stop" (EOS stops without being asked for). Meanwhile the base sampler and an older snapshot,
    sampled while the steps run, give their seeded tokens unchanged."""
    prompt, x = [20, 21, 22, 23], 150
    tc = new_client(wire, rank=8, session_id=sid, model_seq_id=5, seed=2)
    old = SamplingClient.snapshot(tc, sid)
    kw = dict(max_tokens=8, temperature=1.0, seed=8)
    ref_base, ref_old = base.sample(prompt, 2, **kw).tokens, old.sample(prompt, 2, **kw).tokens
    datum = wc.Datum(prompt + [x], target_tokens=prompt[1:] + [x, eos], weights=[0, 0, 0, 1, 1])
    pending = [(tc.forward_backward_async([datum] * 4), tc.optim_step_async(LR)) for _ in range(12)]
    during = [(base.sample_async(prompt, 2, **kw), old.sample_async(prompt, 2, **kw)) for _ in range(3)]
    for fb, opt in pending:
        fb.result()
        opt.result()
    for b, o in during:
        check(b.result().tokens == ref_base, "base sampler changed while a LoRA trained")
        check(o.result().tokens == ref_old, "an older snapshot changed while its model trained")
    snap = SamplingClient.snapshot(tc, sid)
    (toks, lps, reason), = snap.sample_seqs(prompt, 1, max_tokens=8, temperature=0.0)
    check(toks == [x, eos] and reason == "stop" and len(lps) == 2,
          "greedy after learning [x, EOS]: %r %s (want [%d, %d] stop)" % (toks, reason, x, eos))
    for toks, lps, reason in snap.sample_seqs(prompt, 8, max_tokens=8, temperature=1.0, seed=1):
        check(eos not in toks[:-1] and (reason == "stop") == (toks[-1] == eos or len(toks) < 8)
              and (reason == "length") == (len(toks) == 8 and toks[-1] != eos),
              "EOS handling at T=1: %r %s" % (toks, reason))
    return "EOS stop ok"


# ---------------------------------------------------------------- stories260K

def stories_paths():
    shared = shared_dir()
    if not shared:
        return None, None
    root = os.path.join(shared, "models", "stories260K")
    hf = os.path.join(root, "hf-f32")
    if not (os.path.exists(os.path.join(hf, "tokenizer.json")) and os.path.exists(os.path.join(root, "expected.json"))):
        return None, None
    return hf, root


class Detok:
    """Decodes stories260K ids with tokenizer.json's vocab: '▁' -> ' ', <0xNN> byte fallback."""

    def __init__(self, path):
        vocab = json.load(open(path))["model"]["vocab"]
        self.inv = {v: k for k, v in vocab.items()}

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
    hf, root = stories_paths()
    if hf is None:
        return "stories260K not found: skipped"
    expected = json.load(open(os.path.join(root, "expected.json")))
    detok = Detok(os.path.join(hf, "tokenizer.json"))
    srv = ctx.start_server(extra=["--model", "stories260K=" + hf], name="tinkerd-stories")
    wire = srv.wire()
    sid = wire.create_session(tags=["e2e-sample-stories"])
    sc = SamplingClient.create(wire, sid, base_model="stories260K")
    gen = expected["generation"]["<empty prompt>"]
    prompt, want = gen["prompt_ids"], gen["greedy_48_ids"]
    (toks, lps, reason), = sc.sample_seqs(prompt, 1, max_tokens=48, temperature=0.0)
    check(toks == want, "greedy from %r: %r (golden %r)" % (prompt, toks, want))
    check(reason == "length" and len(lps) == 48, "greedy 48: stop_reason %r" % reason)
    text = detok(toks)
    check(gen["text"].startswith(text), "decoded greedy %r vs golden text %r" % (text, gen["text"]))
    # golden logits after "Once upon a time": the full next-token distribution via top-512
    g2 = expected["generation"]["Once upon a time"]
    res = sc.sample(g2["prompt_ids"] + [0], 1, max_tokens=1, prompt_logprobs=True, topk_prompt_logprobs=512)
    row = dict(res.topk_prompt_logprobs[-1])
    lg = g2["logits_at_last_prompt_position"]
    check(max(row, key=row.get) == lg["argmax"], "argmax after 'Once upon a time'")
    check_abs([row[t] for t in range(8)], np.asarray(lg["first8"]) - lg["logsumexp"], 2e-3, "golden logprobs")
    # stop strings: the text ends with the stop string (once), the tokens are a greedy prefix
    stops = []
    for stop in (["park"], ["red ball", "Lily"], "She loved"):
        (s, slp, sr), = sc.sample_seqs(prompt, 1, max_tokens=48, temperature=0.0, stop=stop)
        words = [stop] if isinstance(stop, str) else stop
        first = min(words, key=lambda w: text.find(w) + len(w))
        got = detok(s)
        check(sr == "stop" and s == want[:len(s)], "stop=%r: %r %s" % (stop, s, sr))
        check(got.endswith(first) and got.count(first) == 1 and len(s) < 48,
              "stop=%r: text %r should end with %r once" % (stop, got, first))
        check(len(slp) == len(s), "stop=%r: %d logprobs for %d tokens" % (stop, len(slp), len(s)))
        stops.append("%r->%d tokens" % (first, len(s)))
    # a stop string that occurs only in the prompt does not stop the generation
    once = expected["generation"]["Once upon a time"]
    (s, _, sr), = sc.sample_seqs(once["prompt_ids"], 1, max_tokens=12, temperature=0.0, stop=["upon"])
    check(sr == "length" and s == once["greedy_48_ids"][:12], "stop string only in the prompt: %r %s" % (s, sr))
    # a LoRA snapshot of the real model agrees with its trainer
    tc = new_client(wire, base_model="stories260K", rank=8, session_id=sid, model_seq_id=0, seed=0)
    tc.step(sft_batch(seed=5, vocab=512), LR)
    snap = SamplingClient.snapshot(tc, sid)
    seqs = snap.sample_seqs([1], 4, max_tokens=12, temperature=1.0, seed=2)
    trainer = trainer_logprobs(tc, [[1] + t for t, _, _ in seqs])
    gap = max(float(np.max(np.abs(np.asarray(lps) - tl))) for (_, lps, _), tl in zip(seqs, trainer))
    check(gap < 1e-3, "stories260K snapshot vs trainer: max |gap| %.3g" % gap)
    srv.stop()
    return "stories260K golden greedy ok (%r...), stops %s, LoRA gap %.1e" % (text[:30], ", ".join(stops), gap)
