# Plain float64 PyTorch reference of HF Llama / Qwen2 / Qwen3 causal LMs with PEFT-style LoRA.
# Owns: config parsing (head_dim, rope_scaling incl. llama3), weight loading, RoPE, the forward pass
# (one sequence at a time, positions from 0) and the LoRA adapter (PEFT key names, shapes, init).
# Independent of the C++ engine; written from the HF modelling equations, not copied.
import json
import math
import os
from dataclasses import dataclass

import numpy as np
import torch

import safetensors_io

ATTN_TARGETS = ("q_proj", "k_proj", "v_proj", "o_proj")
MLP_TARGETS = ("gate_proj", "up_proj", "down_proj")
ALL_TARGETS = ATTN_TARGETS + MLP_TARGETS + ("lm_head",)
_ARCHS = {"LlamaForCausalLM": "llama", "Qwen2ForCausalLM": "qwen2", "Qwen3ForCausalLM": "qwen3"}


@dataclass
class ModelConfig:
    arch: str  # "llama" | "qwen2" | "qwen3"
    vocab: int
    hidden: int
    inter: int
    layers: int
    heads: int
    kv_heads: int
    head_dim: int
    eps: float
    rope_theta: float
    rope_scaling: dict  # None or HF rope_scaling dict
    tie: bool

    @property
    def qkv_bias(self) -> bool:
        return self.arch == "qwen2"

    @property
    def qk_norm(self) -> bool:
        return self.arch == "qwen3"

    @staticmethod
    def from_dict(d: dict) -> "ModelConfig":
        arch = _ARCHS.get((d.get("architectures") or [None])[0]) or d["model_type"]
        if arch not in ("llama", "qwen2", "qwen3"):
            raise ValueError(f"unsupported architecture {arch}")
        heads = d["num_attention_heads"]
        head_dim = d.get("head_dim") or d["hidden_size"] // heads
        return ModelConfig(
            arch=arch, vocab=d["vocab_size"], hidden=d["hidden_size"],
            inter=d["intermediate_size"], layers=d["num_hidden_layers"], heads=heads,
            kv_heads=d.get("num_key_value_heads") or heads, head_dim=head_dim,
            eps=d["rms_norm_eps"], rope_theta=d.get("rope_theta", 10000.0),
            rope_scaling=d.get("rope_scaling"), tie=bool(d.get("tie_word_embeddings", False)))


def rope_inv_freq(cfg: ModelConfig) -> torch.Tensor:
    """-> [head_dim/2] float64 inverse frequencies, with HF's llama3 rescaling when configured."""
    dim = cfg.head_dim
    inv = 1.0 / (cfg.rope_theta ** (torch.arange(0, dim, 2, dtype=torch.float64) / dim))
    rs = cfg.rope_scaling
    kind = (rs or {}).get("rope_type", (rs or {}).get("type", "default"))
    if kind == "default":
        return inv
    if kind != "llama3":
        raise ValueError(f"unsupported rope_scaling {rs}")
    factor, lo, hi = rs["factor"], rs["low_freq_factor"], rs["high_freq_factor"]
    old_ctx = rs["original_max_position_embeddings"]
    low_freq_wavelen, high_freq_wavelen = old_ctx / lo, old_ctx / hi
    wavelen = 2 * math.pi / inv
    # long wavelengths (low frequency) are divided by factor; short ones kept; in between blended
    scaled = torch.where(wavelen > low_freq_wavelen, inv / factor, inv)
    smooth = (old_ctx / wavelen - lo) / (hi - lo)
    blended = (1 - smooth) * scaled / factor + smooth * scaled
    medium = (wavelen >= high_freq_wavelen) & (wavelen <= low_freq_wavelen)
    return torch.where(medium, blended, scaled)


def rope_cos_sin(cfg: ModelConfig, seq_len: int):
    """-> cos, sin each [T, head_dim] (frequencies duplicated over the two halves)."""
    pos = torch.arange(seq_len, dtype=torch.float64)
    freqs = torch.outer(pos, rope_inv_freq(cfg))  # [T, hd/2]
    emb = torch.cat([freqs, freqs], dim=-1)  # [T, hd]
    return emb.cos(), emb.sin()


def rotate_half(x: torch.Tensor) -> torch.Tensor:
    half = x.shape[-1] // 2
    return torch.cat([-x[..., half:], x[..., :half]], dim=-1)


def rms_norm(x: torch.Tensor, w: torch.Tensor, eps: float) -> torch.Tensor:
    """x [..., D], w [D] -> x * rsqrt(mean(x^2) + eps) * w."""
    return x * torch.rsqrt(x.pow(2).mean(-1, keepdim=True) + eps) * w


def lora_module_path(target: str, layer: int) -> str:
    if target == "lm_head":
        return "lm_head"
    group = "self_attn" if target in ATTN_TARGETS else "mlp"
    return f"model.layers.{layer}.{group}.{target}"


def peft_key(module_path: str, which: str) -> str:
    """which in {"A","B"} -> PEFT adapter_model.safetensors key."""
    return f"base_model.model.{module_path}.lora_{which}.weight"


def module_shape(cfg: ModelConfig, target: str):
    """-> (out_features, in_features) of the base linear."""
    q, kv = cfg.heads * cfg.head_dim, cfg.kv_heads * cfg.head_dim
    return {
        "q_proj": (q, cfg.hidden), "k_proj": (kv, cfg.hidden), "v_proj": (kv, cfg.hidden),
        "o_proj": (cfg.hidden, q), "gate_proj": (cfg.inter, cfg.hidden),
        "up_proj": (cfg.inter, cfg.hidden), "down_proj": (cfg.hidden, cfg.inter),
        "lm_head": (cfg.vocab, cfg.hidden),
    }[target]


class LoraAdapter:
    """PEFT LoRA: y += (alpha/r) * (x A^T) B^T with A [r,in], B [out,r]; params keyed by PEFT key."""

    def __init__(self, name, rank, alpha, targets, params):
        self.name, self.rank, self.alpha, self.targets = name, rank, alpha, list(targets)
        self.params = params  # dict peft key -> float64 leaf tensor

    @property
    def scale(self) -> float:
        return self.alpha / self.rank

    def pair(self, module_path: str):
        """-> (A, B) for a module, or None when this module is not adapted."""
        a = self.params.get(peft_key(module_path, "A"))
        return None if a is None else (a, self.params[peft_key(module_path, "B")])

    def clone(self, requires_grad=True, dtype=torch.float64) -> "LoraAdapter":
        ps = {k: v.detach().to(dtype).clone().requires_grad_(requires_grad)
              for k, v in self.params.items()}
        return LoraAdapter(self.name, self.rank, self.alpha, self.targets, ps)


def lora_keys_and_shapes(cfg: ModelConfig, rank: int, targets):
    """-> ordered list of (peft key, shape) for all A/B matrices of an adapter."""
    out = []
    for t in ALL_TARGETS:  # canonical order, independent of the order given in targets
        if t not in targets:
            continue
        paths = ["lm_head"] if t == "lm_head" else [lora_module_path(t, i) for i in range(cfg.layers)]
        fout, fin = module_shape(cfg, t)
        for p in paths:
            out.append((peft_key(p, "A"), (rank, fin)))
            out.append((peft_key(p, "B"), (fout, rank)))
    return out


def init_lora_fp32(cfg, rank, targets, rng: np.random.Generator, b_std=0.05):
    """A ~ U(-1/sqrt(in), 1/sqrt(in)) (PEFT kaiming_uniform a=sqrt(5)), B ~ N(0, b_std); fp32 tensors."""
    params = {}
    for key, shape in lora_keys_and_shapes(cfg, rank, targets):
        if key.endswith("lora_A.weight"):
            bound = 1.0 / math.sqrt(shape[1])
            arr = rng.uniform(-bound, bound, size=shape)
        else:
            arr = rng.normal(0.0, b_std, size=shape)
        params[key] = torch.from_numpy(arr.astype(np.float32))
    return params


class Model:
    """Decoder in float64 (the reference); dtype=float32 only for precision diagnostics."""

    def __init__(self, cfg: ModelConfig, weights: dict, dtype=torch.float64):
        self.cfg, self.dtype = cfg, dtype
        self.w = {k: v.to(dtype) for k, v in weights.items()}
        if cfg.tie or "lm_head.weight" not in self.w:
            self.w["lm_head.weight"] = self.w["model.embed_tokens.weight"]

    def linear(self, x, path, adapter):
        """x [T, in] -> [T, out]; base weight (+bias) plus optional LoRA delta."""
        y = x @ self.w[path + ".weight"].T
        bias = self.w.get(path + ".bias")
        if bias is not None:
            y = y + bias
        pair = adapter.pair(path) if adapter is not None else None
        if pair is not None:
            a, b = pair
            y = y + adapter.scale * ((x @ a.T) @ b.T)
        return y

    def attention(self, x, i, cos, sin, adapter):
        """x [T, hidden] (already normed) -> [T, hidden]."""
        c, T = self.cfg, x.shape[0]
        p = f"model.layers.{i}.self_attn"
        q = self.linear(x, p + ".q_proj", adapter).view(T, c.heads, c.head_dim).transpose(0, 1)
        k = self.linear(x, p + ".k_proj", adapter).view(T, c.kv_heads, c.head_dim).transpose(0, 1)
        v = self.linear(x, p + ".v_proj", adapter).view(T, c.kv_heads, c.head_dim).transpose(0, 1)
        if c.qk_norm:  # per-head RMSNorm over head_dim, before RoPE
            q = rms_norm(q, self.w[p + ".q_norm.weight"], c.eps)
            k = rms_norm(k, self.w[p + ".k_norm.weight"], c.eps)
        q = q * cos + rotate_half(q) * sin  # [H, T, hd]
        k = k * cos + rotate_half(k) * sin  # [KV, T, hd]
        rep = c.heads // c.kv_heads  # query head h uses kv head h // rep
        k, v = k.repeat_interleave(rep, dim=0), v.repeat_interleave(rep, dim=0)
        scores = (q @ k.transpose(1, 2)) / math.sqrt(c.head_dim)  # [H, T, T]
        mask = torch.ones(T, T, dtype=torch.bool).triu(1)
        scores = scores.masked_fill(mask, float("-inf"))
        out = torch.softmax(scores, dim=-1) @ v  # [H, T, hd]
        out = out.transpose(0, 1).reshape(T, c.heads * c.head_dim)
        return self.linear(out, p + ".o_proj", adapter)

    def mlp(self, x, i, adapter):
        p = f"model.layers.{i}.mlp"
        gate = self.linear(x, p + ".gate_proj", adapter)
        up = self.linear(x, p + ".up_proj", adapter)
        return self.linear(torch.nn.functional.silu(gate) * up, p + ".down_proj", adapter)

    def forward(self, tokens, adapter=None) -> torch.Tensor:
        """tokens: list of ints (one sequence) -> logits [T, vocab] float64."""
        c = self.cfg
        ids = torch.as_tensor(list(tokens), dtype=torch.int64)
        h = self.w["model.embed_tokens.weight"][ids]  # [T, hidden]; never adapted
        cos, sin = (t.to(self.dtype) for t in rope_cos_sin(c, len(ids)))
        for i in range(c.layers):
            ln1 = self.w[f"model.layers.{i}.input_layernorm.weight"]
            h = h + self.attention(rms_norm(h, ln1, c.eps), i, cos, sin, adapter)
            ln2 = self.w[f"model.layers.{i}.post_attention_layernorm.weight"]
            h = h + self.mlp(rms_norm(h, ln2, c.eps), i, adapter)
        h = rms_norm(h, self.w["model.norm.weight"], c.eps)
        return self.linear(h, "lm_head", adapter)


def load_model(model_dir: str) -> Model:
    with open(os.path.join(model_dir, "config.json")) as f:
        cfg = ModelConfig.from_dict(json.load(f))
    weights, _ = safetensors_io.load(os.path.join(model_dir, "model.safetensors"))
    return Model(cfg, {k: v.float() if v.dtype == torch.bfloat16 else v for k, v in weights.items()})
