# Deterministic construction of fixture inputs: tiny HF configs and random weights, LoRA adapter
# specs, and the 10 calls of every case (datums, loss inputs, sampler logprobs with controlled
# clipping). Everything random comes from a numpy Generator passed in, so reruns are identical.
import numpy as np
import torch

import losses
import reference_model as rm

ADAPTER_SPECS = [
    {"name": "a", "rank": 4, "alpha": 32, "targets": list(rm.ALL_TARGETS)},
    {"name": "b", "rank": 8, "alpha": 32, "targets": list(rm.ATTN_TARGETS)},
    {"name": "c", "rank": 2, "alpha": 32, "targets": list(rm.MLP_TARGETS) + ["lm_head"]},
]
_COMMON = {
    "hidden_act": "silu", "attention_dropout": 0.0, "initializer_range": 0.02, "use_cache": True,
    "torch_dtype": "float32", "max_position_embeddings": 128, "bos_token_id": 1, "eos_token_id": 2,
    "num_hidden_layers": 2, "num_key_value_heads": 2,
}


def tiny_config(case: str) -> dict:
    """Full HF-style config.json contents for a generated case."""
    if case == "llama_tiny":
        specific = {
            "architectures": ["LlamaForCausalLM"], "model_type": "llama", "vocab_size": 101,
            "hidden_size": 32, "intermediate_size": 48, "num_attention_heads": 4, "head_dim": 8,
            "rms_norm_eps": 1e-5, "rope_theta": 10000.0, "tie_word_embeddings": False,
            "rope_scaling": {"rope_type": "llama3", "factor": 8.0, "low_freq_factor": 1.0,
                             "high_freq_factor": 4.0, "original_max_position_embeddings": 16},
            "attention_bias": False, "mlp_bias": False, "pretraining_tp": 1,
        }
    elif case == "qwen3_tiny":
        specific = {
            "architectures": ["Qwen3ForCausalLM"], "model_type": "qwen3", "vocab_size": 97,
            "hidden_size": 32, "intermediate_size": 40, "num_attention_heads": 4, "head_dim": 16,
            "rms_norm_eps": 1e-6, "rope_theta": 1000000.0, "tie_word_embeddings": True,
            "rope_scaling": None, "attention_bias": False, "use_sliding_window": False,
            "sliding_window": None, "max_window_layers": 2,
        }
    elif case == "qwen2_tiny":  # no head_dim key on purpose: 24 / 6 = 4
        specific = {
            "architectures": ["Qwen2ForCausalLM"], "model_type": "qwen2", "vocab_size": 89,
            "hidden_size": 24, "intermediate_size": 40, "num_attention_heads": 6,
            "rms_norm_eps": 1e-6, "rope_theta": 10000.0, "tie_word_embeddings": False,
            "rope_scaling": None, "use_sliding_window": False, "sliding_window": None,
            "max_window_layers": 2,
        }
    else:
        raise ValueError(case)
    return {**specific, **_COMMON}


def tiny_weights(cfg: rm.ModelConfig, rng: np.random.Generator) -> dict:
    """Random fp32 HF-named weights: matrices N(0, 0.2), norms 1 + N(0, 0.1), biases N(0, 0.1)."""
    w = {}

    def put(name, arr):
        w[name] = torch.from_numpy(np.asarray(arr, dtype=np.float32))

    q, kv = cfg.heads * cfg.head_dim, cfg.kv_heads * cfg.head_dim
    put("model.embed_tokens.weight", rng.normal(0, 0.2, (cfg.vocab, cfg.hidden)))
    for i in range(cfg.layers):
        p = f"model.layers.{i}"
        put(f"{p}.input_layernorm.weight", 1 + rng.normal(0, 0.1, cfg.hidden))
        for t in rm.ATTN_TARGETS:
            put(f"{p}.self_attn.{t}.weight", rng.normal(0, 0.2, rm.module_shape(cfg, t)))
        if cfg.qkv_bias:
            for t, n in (("q_proj", q), ("k_proj", kv), ("v_proj", kv)):
                put(f"{p}.self_attn.{t}.bias", rng.normal(0, 0.1, n))
        if cfg.qk_norm:
            put(f"{p}.self_attn.q_norm.weight", 1 + rng.normal(0, 0.1, cfg.head_dim))
            put(f"{p}.self_attn.k_norm.weight", 1 + rng.normal(0, 0.1, cfg.head_dim))
        put(f"{p}.post_attention_layernorm.weight", 1 + rng.normal(0, 0.1, cfg.hidden))
        for t in rm.MLP_TARGETS:
            put(f"{p}.mlp.{t}.weight", rng.normal(0, 0.2, rm.module_shape(cfg, t)))
    put("model.norm.weight", 1 + rng.normal(0, 0.1, cfg.hidden))
    if not cfg.tie:
        put("lm_head.weight", rng.normal(0, 0.2, (cfg.vocab, cfg.hidden)))
    return w


def make_adapters(cfg: rm.ModelConfig, rng: np.random.Generator):
    """-> (dict name -> LoraAdapter with float64 params, dict name -> fp32 init params)."""
    adapters, inits = {}, {}
    for spec in ADAPTER_SPECS:
        fp32 = rm.init_lora_fp32(cfg, spec["rank"], spec["targets"], rng)
        inits[spec["name"]] = fp32
        params = {k: v.to(torch.float64) for k, v in fp32.items()}  # exact widening
        adapters[spec["name"]] = rm.LoraAdapter(spec["name"], spec["rank"], spec["alpha"],
                                                spec["targets"], params)
    return adapters, inits


def _f32(arr):
    return np.asarray(arr, dtype=np.float32)


def _ce_weights_1d(rng, n, first: bool):
    """[n] fractional weights, a masked prefix of zeros; `first` datum also gets one negative."""
    w = _f32(rng.uniform(0.1, 2.0, n))
    w[: max(1, n // 4)] = 0.0
    if first:
        w[-1] = -0.75
    return w


def _datum(tokens, inputs: dict):
    return {"tokens": [int(t) for t in tokens], "loss_inputs": inputs}


def ce_datums(rng, vocab, lengths, mode: str):
    """mode: "w1d" | "w2d" | "noweights" | "mask" -> datums for cross_entropy."""
    out = []
    for j, n in enumerate(lengths):
        tokens = rng.integers(0, vocab, n)
        if mode == "w2d":
            tgt = rng.integers(0, vocab, (n, 3))
            w = _f32(rng.uniform(0.0, 1.0, (n, 3)))
            w[0, :] = 0.0
            w[n // 2, 1] = 0.0
        else:
            tgt = np.concatenate([tokens[1:], rng.integers(0, vocab, 1)])  # next-token targets
            w = _ce_weights_1d(rng, n, j == 0) if mode == "w1d" else _f32((np.arange(n) >= 2) * 1.0)
        inputs = {"target_tokens": losses.spec_from_array(tgt, "int64")}
        if mode != "noweights":
            inputs["weights"] = losses.spec_from_array(w, "float32")
        out.append(_datum(tokens, inputs))
    return out


def _rl_ok(loss_fn, cfg, ratio, adv) -> bool:
    """Clipping conditions that make the ppo/cispo/stable_reinforce fixtures meaningful and branch-stable
    (gspo's per-datum ratios are checked by _gspo_ok)."""
    if loss_fn == "stable_reinforce":
        hi = cfg["clip_high_threshold"]
        return np.abs(ratio - hi).min() >= 1e-3 and (ratio > hi).any() and (ratio < hi).any()
    if loss_fn not in ("ppo", "cispo"):
        return True
    lo, hi = cfg["clip_low_threshold"], cfg["clip_high_threshold"]
    margin = np.minimum(np.abs(ratio - lo), np.abs(ratio - hi)).min()
    if margin < 1e-3:  # an fp32 engine must take the same side of every clip boundary
        return False
    below, above = ratio < lo, ratio > hi
    if loss_fn == "cispo":
        return below.any() and above.any()
    pos, neg = adv > 0, adv < 0
    return all((m & s).any() for m in (below, above) for s in (pos, neg))


def _gspo_ok(cfg, lps, qs, advs) -> bool:
    """Some datum's sequence ratio clipped for its positive advantages, another's inside, none near a bound."""
    lo, hi = cfg["clip_low_threshold"], cfg["clip_high_threshold"]
    s = np.array([np.exp(np.mean(lp[1:] - q[1:].astype(np.float64))) for lp, q in zip(lps, qs)])  # mask from 1
    margin = np.minimum(np.abs(s - lo), np.abs(s - hi)).min()
    return margin >= 1e-3 and ((s > hi) | (s < lo)).any() and ((s > lo) & (s < hi)).any()


def _rl_inputs(loss_fn, g, q, a):
    """A datum's loss inputs; gspo marks every target but the first, stable_reinforce gets the record."""
    inputs = {"target_tokens": losses.spec_from_array(g, "int64"), "advantages": losses.spec_from_array(a, "float32")}
    if loss_fn == "stable_reinforce":
        inputs["sampler_record"] = losses.spec_from_array(q, "float32")
        return inputs
    inputs["logprobs"] = losses.spec_from_array(q, "float32")
    if loss_fn == "gspo":
        inputs["sequence_ratio_mask"] = losses.spec_from_array((np.arange(len(g)) >= 1) * 1.0, "float32")
    return inputs


def rl_datums(rng, model, adapter, loss_fn, loss_cfg, lengths):
    """Datums whose sampler logprobs q = reference lp (adapter at init) + N(0, 0.3), fp32."""
    vocab, cfg = model.cfg.vocab, losses.merged_config(loss_fn, loss_cfg)
    toks = [rng.integers(0, vocab, n) for n in lengths]
    tgts = [np.concatenate([t[1:], rng.integers(0, vocab, 1)]) for t in toks]
    with torch.no_grad():
        lps = [losses.target_logprobs(model.forward(t, adapter), torch.as_tensor(g)).numpy()
               for t, g in zip(toks, tgts)]
    for _ in range(100):  # deterministic retries until the clipping conditions hold
        qs = [_f32(np.minimum(lp + rng.normal(0, 0.3, lp.shape), -1e-3)) for lp in lps]
        advs = [_f32(rng.normal(0, 1.0, lp.shape)) for lp in lps]
        ratio = np.exp(np.concatenate(lps) - np.concatenate(qs).astype(np.float64))
        ok = _gspo_ok(cfg, lps, qs, advs) if loss_fn == "gspo" else _rl_ok(loss_fn, cfg, ratio, np.concatenate(advs))
        if ok:
            break
    else:
        raise AssertionError(f"could not draw sampler logprobs for {loss_fn}")
    return [_datum(t, _rl_inputs(loss_fn, g, q, a)) for t, g, q, a in zip(toks, tgts, qs, advs)]


def build_calls(rng, model, adapters):
    """The 10 calls of a case, in the fixed order (without expected_loss)."""
    v = model.cfg.vocab

    def call(adapter, loss_fn, cfg, datums):
        return {"adapter": adapter, "loss_fn": loss_fn, "loss_fn_config": cfg, "datums": datums}

    def rl(name, loss_fn, cfg, lengths):
        return call(name, loss_fn, cfg, rl_datums(rng, model, adapters[name], loss_fn, cfg, lengths))

    return [
        call("a", "cross_entropy", {}, ce_datums(rng, v, [5, 13, 3], "w1d")),
        call("a", "cross_entropy", {}, ce_datums(rng, v, [4, 9, 6], "w2d")),
        call("b", "cross_entropy", {}, ce_datums(rng, v, [7, 3, 12], "noweights")),
        rl("a", "importance_sampling", {}, [8, 11, 4]),
        rl("a", "ppo", {}, [13, 10, 12]),
        rl("c", "cispo", {"clip_low_threshold": 0.5, "clip_high_threshold": 1.5}, [12, 9, 13]),
        rl("a", "dro", {"beta": 0.3}, [6, 13, 5]),
        rl("b", "gspo", {"clip_low_threshold": 0.9, "clip_high_threshold": 1.1}, [9, 12, 7, 10]),
        rl("c", "stable_reinforce", {"clip_high_threshold": 1.5, "kl_coeff": 0.2}, [11, 8, 10]),
        call(None, "cross_entropy", {}, ce_datums(rng, v, [10, 3, 8], "mask")),
    ]


ADAM_SPECS = [
    {"adapter": "a", "call": 0, "steps": 5,
     "params": {"learning_rate": 1e-2, "beta1": 0.9, "beta2": 0.95, "eps": 1e-8,
                "weight_decay": 0.01, "grad_clip_norm": 0.0}},
    {"adapter": "b", "call": 2, "steps": 5,  # grad_clip_norm is filled in from the grad norm
     "params": {"learning_rate": 5e-3, "beta1": 0.9, "beta2": 0.95, "eps": 1e-12,
                "weight_decay": 0.0, "grad_clip_norm": None}},
    {"adapter": "a", "call": 0, "steps": 4,  # Dimuon (docs/sdk-0.38.md); beta2/eps/weight_decay unused
     "params": {"optimizer": "dimuon", "learning_rate": 5e-3, "beta1": 0.9, "beta2": 0.0, "eps": 0.0,
                "weight_decay": 0.0, "grad_clip_norm": 0.0, "damping": 1e-4, "rank_lr_correction_exponent": 0.175}},
]
