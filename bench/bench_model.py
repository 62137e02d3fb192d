# Benchmark model files: minimal safetensors read/write (F32, BF16), loading an HF
# model dir into (config, weights), and a deterministic generator of a random
# SmolLM-135M-shaped LlamaForCausalLM dir (config.json + model.safetensors, tied).
# CLI: python3 bench/bench_model.py OUT_DIR --dtype f32|bf16 [--seed 0]
import argparse
import json
import math
import os
import struct
import sys
import time

import numpy as np
import torch

SEED_KEY = "bench_model_seed"
DTYPE_KEY = "bench_model_dtype"

# safetensors dtype tag -> (torch dtype, numpy storage dtype, bytes per element)
_ST_DTYPES = {
    "F32": (torch.float32, np.float32, 4),
    "BF16": (torch.bfloat16, np.int16, 2),
}
_TORCH_TO_ST = {torch.float32: "F32", torch.bfloat16: "BF16"}

SMOLLM_135M = {
    "architectures": ["LlamaForCausalLM"],
    "model_type": "llama",
    "hidden_size": 576,
    "num_attention_heads": 9,
    "num_key_value_heads": 3,
    "head_dim": 64,
    "intermediate_size": 1536,
    "num_hidden_layers": 30,
    "vocab_size": 49152,
    "tie_word_embeddings": True,
    "rms_norm_eps": 1e-5,
    "rope_theta": 10000.0,
    "max_position_embeddings": 2048,
    "hidden_act": "silu",
    "attention_bias": False,
    "mlp_bias": False,
    "bos_token_id": 1,
    "eos_token_id": 2,
}


# ---------------------------------------------------------------- safetensors

def _tensor_bytes(t):
    """Raw little-endian bytes of a CPU F32/BF16 tensor."""
    if t.dtype == torch.bfloat16:
        return t.contiguous().view(torch.int16).numpy().tobytes()
    if t.dtype == torch.float32:
        return t.contiguous().numpy().astype("<f4", copy=False).tobytes()
    raise ValueError(f"unsupported dtype {t.dtype}")


def _build_header(specs, metadata):
    """specs: list of (name, st_dtype, shape). Returns (header bytes, offsets)."""
    header, offsets, pos = {}, [], 0
    if metadata:
        header["__metadata__"] = {str(k): str(v) for k, v in metadata.items()}
    for name, st_dtype, shape in specs:
        nbytes = _ST_DTYPES[st_dtype][2] * math.prod(shape)
        header[name] = {"dtype": st_dtype, "shape": list(shape),
                        "data_offsets": [pos, pos + nbytes]}
        offsets.append((pos, pos + nbytes))
        pos += nbytes
    raw = json.dumps(header, separators=(",", ":")).encode("utf-8")
    raw += b" " * ((8 - len(raw) % 8) % 8)  # pad so tensor data is 8-aligned
    return raw, offsets


def write_safetensors_stream(path, specs, produce, metadata=None):
    """Write tensors one at a time: produce(i) returns tensor i of specs.

    Keeps only one tensor in memory; the header is built from specs up front.
    """
    raw, offsets = _build_header(specs, metadata)
    tmp = path + ".tmp"
    with open(tmp, "wb") as f:
        f.write(struct.pack("<Q", len(raw)))
        f.write(raw)
        for i, (name, st_dtype, shape) in enumerate(specs):
            t = produce(i)
            if _TORCH_TO_ST[t.dtype] != st_dtype or tuple(t.shape) != tuple(shape):
                raise ValueError(f"{name}: produced {t.dtype} {tuple(t.shape)}")
            data = _tensor_bytes(t)
            assert len(data) == offsets[i][1] - offsets[i][0]
            f.write(data)
    os.replace(tmp, path)


def write_safetensors(path, tensors, metadata=None):
    """tensors: dict name -> CPU tensor (float32 or bfloat16)."""
    names = list(tensors)
    specs = [(n, _TORCH_TO_ST[tensors[n].dtype], tuple(tensors[n].shape))
             for n in names]
    write_safetensors_stream(path, specs, lambda i: tensors[names[i]], metadata)


def read_safetensors_header(path):
    """Returns (header dict without __metadata__, metadata dict, data start)."""
    with open(path, "rb") as f:
        (n,) = struct.unpack("<Q", f.read(8))
        if n > 100_000_000:
            raise ValueError(f"{path}: implausible header length {n}")
        header = json.loads(f.read(n).decode("utf-8"))
    metadata = header.pop("__metadata__", {}) or {}
    return header, metadata, 8 + n


def read_safetensors(path, names=None):
    """Returns (dict name -> tensor in the stored dtype, metadata)."""
    header, metadata, start = read_safetensors_header(path)
    out = {}
    with open(path, "rb") as f:
        for name, info in header.items():
            if names is not None and name not in names:
                continue
            torch_dtype, np_dtype, esize = _ST_DTYPES[info["dtype"]]
            begin, end = info["data_offsets"]
            count = (end - begin) // esize
            f.seek(start + begin)
            arr = np.fromfile(f, dtype=np.dtype(np_dtype).newbyteorder("<"),
                              count=count)
            t = torch.from_numpy(arr.astype(np_dtype, copy=False))
            if torch_dtype == torch.bfloat16:
                t = t.view(torch.bfloat16)
            out[name] = t.reshape(info["shape"])
    return out, metadata


def load_model_dir(model_dir, dtype=torch.float32):
    """HF model dir -> (config dict, weights dict converted to `dtype`)."""
    with open(os.path.join(model_dir, "config.json")) as f:
        cfg = json.load(f)
    cfg.setdefault("head_dim", cfg["hidden_size"] // cfg["num_attention_heads"])
    cfg.setdefault("rope_theta", 10000.0)
    w, _ = read_safetensors(os.path.join(model_dir, "model.safetensors"))
    return cfg, {k: v.to(dtype) for k, v in w.items()}


# ---------------------------------------------------------------- generator

def llama_param_specs(cfg):
    """HF LlamaForCausalLM parameter names and shapes, in file order."""
    d, i_sz = cfg["hidden_size"], cfg["intermediate_size"]
    hd = cfg.get("head_dim", d // cfg["num_attention_heads"])
    q_out = cfg["num_attention_heads"] * hd   # 576
    kv_out = cfg["num_key_value_heads"] * hd  # 192
    specs = [("model.embed_tokens.weight", (cfg["vocab_size"], d))]
    for li in range(cfg["num_hidden_layers"]):
        p = f"model.layers.{li}."
        specs += [
            (p + "input_layernorm.weight", (d,)),
            (p + "self_attn.q_proj.weight", (q_out, d)),
            (p + "self_attn.k_proj.weight", (kv_out, d)),
            (p + "self_attn.v_proj.weight", (kv_out, d)),
            (p + "self_attn.o_proj.weight", (d, q_out)),
            (p + "post_attention_layernorm.weight", (d,)),
            (p + "mlp.gate_proj.weight", (i_sz, d)),
            (p + "mlp.up_proj.weight", (i_sz, d)),
            (p + "mlp.down_proj.weight", (d, i_sz)),
        ]
    specs.append(("model.norm.weight", (d,)))
    if not cfg.get("tie_word_embeddings", False):
        specs.append(("lm_head.weight", (cfg["vocab_size"], d)))
    return specs


def _make_producer(specs, torch_dtype, seed, std=0.02):
    """Returns produce(i): tensors drawn in file order from one seeded stream."""
    gen = torch.Generator().manual_seed(seed)

    def produce(i):
        _, shape = specs[i]
        if len(shape) == 1:  # RMSNorm weights
            t = torch.ones(shape, dtype=torch.float32)
        else:                # matrices and embedding: N(0, std^2), fp32
            t = torch.empty(shape, dtype=torch.float32).normal_(
                0.0, std, generator=gen)
        return t.to(torch_dtype)
    return produce


def model_is_current(out_dir, seed, dtype_name):
    """True if out_dir holds both files generated with this seed and dtype."""
    st = os.path.join(out_dir, "model.safetensors")
    if not (os.path.isfile(st) and os.path.isfile(os.path.join(out_dir, "config.json"))):
        return False
    try:
        _, meta, _ = read_safetensors_header(st)
    except (OSError, ValueError):
        return False
    return meta.get(SEED_KEY) == str(seed) and meta.get(DTYPE_KEY, dtype_name) == dtype_name


def generate_model(out_dir, dtype_name="f32", seed=0, cfg=None):
    """Writes config.json + model.safetensors; returns False if skipped."""
    if model_is_current(out_dir, seed, dtype_name):
        return False
    cfg = dict(cfg or SMOLLM_135M)
    torch_dtype = {"f32": torch.float32, "bf16": torch.bfloat16}[dtype_name]
    cfg["torch_dtype"] = {"f32": "float32", "bf16": "bfloat16"}[dtype_name]
    os.makedirs(out_dir, exist_ok=True)
    specs = llama_param_specs(cfg)
    st_specs = [(n, _TORCH_TO_ST[torch_dtype], s) for n, s in specs]
    meta = {"format": "pt", SEED_KEY: str(seed), DTYPE_KEY: dtype_name}
    write_safetensors_stream(os.path.join(out_dir, "model.safetensors"),
                             st_specs, _make_producer(specs, torch_dtype, seed), meta)
    with open(os.path.join(out_dir, "config.json"), "w") as f:
        json.dump(cfg, f, indent=2)
        f.write("\n")
    return True


def main(argv=None):
    ap = argparse.ArgumentParser(
        description="Generate a random SmolLM-135M-shaped HF Llama directory.")
    ap.add_argument("out_dir")
    ap.add_argument("--dtype", choices=["f32", "bf16"], default="f32")
    ap.add_argument("--seed", type=int, default=0)
    args = ap.parse_args(argv)
    t0 = time.perf_counter()
    made = generate_model(args.out_dir, args.dtype, args.seed)
    verb = "generated" if made else "up to date, skipped"
    print(f"{args.out_dir}: {verb} ({args.dtype}, seed {args.seed}) "
          f"in {time.perf_counter() - t0:.1f} s", file=sys.stderr)
    return 0


if __name__ == "__main__":
    sys.exit(main())
