"""The QLoRA headline benchmark's model file (bench/qlora_headline.py): a Qwen3-30B-A3B-shaped qwen3moe GGUF
with random but valid blocks, in one of two mixes (MIXES): "q4_k", every matrix Q4_K (17.6 GB), or "q4_k_m", a
Q4_K_M-like mix (Q4_K attention and expert gate/up, Q6_K expert down, embedding and output: 19.9 GB); F32 norms
and router, and the real Qwen3 tokenizer, streamed tensor by tensor with gguf.GGUFWriter so
Python never holds more than one tensor. A sidecar JSON records the shape and the finished size."""
import json
import os
import pathlib
import shutil
import sys
import time

import numpy as np

import gguf
import headline_qwen35

Q = gguf.GGMLQuantizationType
ARCH = "qwen3moe"
DISK_MARGIN_BYTES = 4 * 10**9  # free disk kept beside the file being written

# Qwen3-30B-A3B's text shapes, and a tiny cut of them (--tiny) for checking the writer and llama-bench quickly.
FULL = dict(layers=48, hidden=2048, experts=128, used=8, expert_ffn=768, ffn=6144, heads=32, kv_heads=4,
            head_dim=128, vocab=151936, context=4096, rope_theta=1e6, rms_eps=1e-6)
TINY = dict(FULL, layers=2, hidden=256, experts=8, used=2, expert_ffn=256, ffn=768, heads=4, kv_heads=2,
            head_dim=64)


def proxy(layers):
    """The full widths and type mix with fewer layers (bench/qlora_decode_proxy.py): a decode proxy that loads
    without the full file's 19.9 GB; a token's layer work scales with layers, the embedding and lm_head not."""
    return dict(FULL, layers=int(layers))


def is_qwen35(shape):
    return shape.get("family") == headline_qwen35.ARCH


def arch_of(shape):
    return headline_qwen35.ARCH if is_qwen35(shape) else ARCH


def file_name(shape, mix="q4_k_m"):
    """The cache file's name for a shape (FULL, TINY, a proxy(L), or headline_qwen35's FULL / TINY) and mix."""
    base = ("qwen3.5-35b-a3b-random-" if is_qwen35(shape) else "qwen3-30b-a3b-random-") + mix
    if shape in (TINY, headline_qwen35.TINY):
        return base + "-tiny.gguf"
    return base + ("" if shape in (FULL, headline_qwen35.FULL) else f"-{shape['layers']}l") + ".gguf"

# Per-block fp16 scales that give weights of roughly N(0, 0.02) magnitude from uniformly random blocks:
# Q4_K: w = d * sc * q - dmin * m with 6-bit sc, m (mean ~31.5) and 4-bit q (mean 7.5), so dmin = 7.5 d
# centres it; Q6_K: w = d * scale * (q - 32) with int8 scales (|mean| ~64) and 6-bit q.
Q4K_D, Q6K_D = 8e-5, 1.5e-5


def log(msg):
    print(f"headline_gguf: {msg}", file=sys.stderr, flush=True)


# The matrices' types per mix: attention and expert gate/up, expert down, embedding and output.
MIXES = {"q4_k": dict(main=Q.Q4_K, down=Q.Q4_K, ends=Q.Q4_K), "q4_k_m": dict(main=Q.Q4_K, down=Q.Q6_K, ends=Q.Q6_K)}


def tensor_specs(s, mix="q4_k_m"):
    """(name, shape outermost first, type) of every tensor, in llama.cpp's order."""
    m = MIXES[mix]
    if is_qwen35(s):
        return headline_qwen35.tensor_specs(s, m)
    h, e, f, hd = s["hidden"], s["experts"], s["expert_ffn"], s["head_dim"]
    specs = [("token_embd.weight", (s["vocab"], h), m["ends"])]
    for b in range(s["layers"]):
        p = f"blk.{b}."
        specs += [
            (p + "attn_norm.weight", (h,), Q.F32),
            (p + "attn_q.weight", (s["heads"] * hd, h), m["main"]),
            (p + "attn_k.weight", (s["kv_heads"] * hd, h), m["main"]),
            (p + "attn_v.weight", (s["kv_heads"] * hd, h), m["main"]),
            (p + "attn_output.weight", (h, s["heads"] * hd), m["main"]),
            (p + "attn_q_norm.weight", (hd,), Q.F32),
            (p + "attn_k_norm.weight", (hd,), Q.F32),
            (p + "ffn_norm.weight", (h,), Q.F32),
            (p + "ffn_gate_inp.weight", (e, h), Q.F32),
            (p + "ffn_gate_exps.weight", (e, f, h), m["main"]),
            (p + "ffn_up_exps.weight", (e, f, h), m["main"]),
            (p + "ffn_down_exps.weight", (e, h, f), m["down"]),
        ]
    specs += [("output_norm.weight", (h,), Q.F32), ("output.weight", (s["vocab"], h), m["ends"])]
    return specs


def byte_shape(shape, qtype):
    block_elems, block_bytes = gguf.GGML_QUANT_SIZES[qtype]
    assert shape[-1] % block_elems == 0, f"last dim {shape[-1]} is not a multiple of {block_elems}"
    return (*shape[:-1], shape[-1] // block_elems * block_bytes)


def scale_bytes(rng, n, centre):
    """n positive fp16 values around centre (+-25 %), as uint8 pairs."""
    return (centre * rng.uniform(0.75, 1.25, size=n)).astype(np.float16).view(np.uint8).reshape(n, 2)


def random_tensor(rng, shape, qtype, name=""):
    """The tensor's bytes: F32 norms near 1 and router N(0, 0.02) (Qwen3.5's constrained ones by their own rule);
    quantised blocks random with finite scales."""
    special = headline_qwen35.special_f32(name, shape, rng) if qtype == Q.F32 else None
    if special is not None:
        return special
    if qtype == Q.F32:
        if len(shape) == 1:
            return (1.0 + 0.02 * rng.standard_normal(shape)).astype(np.float32)
        return (0.02 * rng.standard_normal(shape)).astype(np.float32)
    bshape = byte_shape(shape, qtype)
    raw = np.frombuffer(bytearray(rng.bytes(int(np.prod(bshape)))), dtype=np.uint8)
    blocks = raw.reshape(-1, gguf.GGML_QUANT_SIZES[qtype][1])
    if qtype == Q.Q4_K:  # d(fp16) dmin(fp16) scales[12] qs[128]
        blocks[:, 0:2] = scale_bytes(rng, len(blocks), Q4K_D)
        blocks[:, 2:4] = scale_bytes(rng, len(blocks), 7.5 * Q4K_D)
    elif qtype == Q.Q6_K:  # ql[128] qh[64] scales[16] d(fp16)
        blocks[:, 208:210] = scale_bytes(rng, len(blocks), Q6K_D)
    else:
        raise ValueError(f"unexpected type {qtype.name}")
    return raw.reshape(bshape)


def weight_stats(rng):
    """Mean and std of a dequantised sample of each quantised type (a sanity line in the log)."""
    out = {}
    for qtype in (Q.Q4_K, Q.Q6_K):
        sample = gguf.quants.dequantize(random_tensor(rng, (64, 1024), qtype), qtype)
        out[qtype.name] = (float(sample.mean()), float(sample.std()))
    return out


def qwen3_tokenizer(tokenizer_dir, vocab):
    """tokens, token types, merges, chat template and special ids of the real Qwen3 tokenizer, padded with
    unused "<|pad_N|>" tokens up to vocab (as llama.cpp's converter pads Qwen's embedding rows)."""
    tok = json.loads((tokenizer_dir / "tokenizer.json").read_text())
    cfg = json.loads((tokenizer_dir / "tokenizer_config.json").read_text())
    tokens, types = [None] * vocab, [5] * vocab  # 5: unused
    for text, i in tok["model"]["vocab"].items():
        tokens[i], types[i] = text, 1  # 1: normal
    for added in tok["added_tokens"]:
        tokens[added["id"]], types[added["id"]] = added["content"], 3 if added["special"] else 4
    for i, text in enumerate(tokens):
        if text is None:
            tokens[i] = f"<|pad_{i}|>"
    merges = [m if isinstance(m, str) else " ".join(m) for m in tok["model"]["merges"]]
    ids = {a["content"]: a["id"] for a in tok["added_tokens"]}
    return dict(tokens=tokens, types=types, merges=merges, template=cfg["chat_template"],
                eos=ids[cfg["eos_token"]], pad=ids[cfg["pad_token"]], bos=ids["<|endoftext|>"])


def write_metadata(w, s, tokenizer):
    if is_qwen35(s):
        headline_qwen35.write_metadata(w, s)
    else:
        write_qwen3moe_metadata(w, s)
    write_tokenizer(w, tokenizer)


def write_qwen3moe_metadata(w, s):
    for key, value in [("context_length", s["context"]), ("embedding_length", s["hidden"]),
                       ("block_count", s["layers"]), ("feed_forward_length", s["ffn"]),
                       ("attention.head_count", s["heads"]), ("attention.head_count_kv", s["kv_heads"]),
                       ("attention.key_length", s["head_dim"]), ("attention.value_length", s["head_dim"]),
                       ("expert_count", s["experts"]), ("expert_used_count", s["used"]),
                       ("expert_feed_forward_length", s["expert_ffn"])]:
        w.add_uint32(f"{ARCH}.{key}", value)
    w.add_float32(f"{ARCH}.rope.freq_base", s["rope_theta"])
    w.add_float32(f"{ARCH}.attention.layer_norm_rms_epsilon", s["rms_eps"])
    w.add_name("qwen3-30b-a3b-shaped random (tinkerd bench)")


def write_tokenizer(w, tokenizer):
    w.add_file_type(15)  # LLAMA_FTYPE_MOSTLY_Q4_K_M
    w.add_string("tokenizer.ggml.model", "gpt2")
    w.add_string("tokenizer.ggml.pre", "qwen2")
    w.add_array("tokenizer.ggml.tokens", tokenizer["tokens"])
    w.add_array("tokenizer.ggml.token_type", tokenizer["types"])
    w.add_array("tokenizer.ggml.merges", tokenizer["merges"])
    for key in ("bos", "eos"):
        w.add_uint32(f"tokenizer.ggml.{key}_token_id", tokenizer[key])
    w.add_uint32("tokenizer.ggml.padding_token_id", tokenizer["pad"])
    w.add_bool("tokenizer.ggml.add_bos_token", False)
    w.add_string("tokenizer.chat_template", tokenizer["template"])


def sidecar(path):
    return pathlib.Path(str(path) + ".json")


def is_complete(path, shape, mix):
    """The file is there, its sidecar names this shape and mix, and the file has the size the sidecar recorded."""
    info = sidecar(path)
    if not path.exists() or not info.exists():
        return False
    meta = json.loads(info.read_text())
    same = meta.get("shape") == shape and meta.get("mix", "q4_k_m") == mix
    return same and meta.get("size") == path.stat().st_size


def data_bytes(shape, mix):
    """The tensor data the file will hold (the header and tokenizer add a few MB)."""
    return sum(int(np.prod(dims)) * 4 if qtype == Q.F32 else int(np.prod(byte_shape(dims, qtype)))
               for _, dims, qtype in tensor_specs(shape, mix))


def check_disk(folder, shape, mix):
    free, need = shutil.disk_usage(folder).free, data_bytes(shape, mix) + DISK_MARGIN_BYTES
    if free < need:
        raise SystemExit(f"headline_gguf: only {free / 1e9:.1f} GB free in {folder}; the file needs "
                         f"{data_bytes(shape, mix) / 1e9:.1f} GB and this script keeps {DISK_MARGIN_BYTES / 1e9:.0f} GB "
                         "spare")


def write(path, shape, tokenizer_dir, seed=0, mix="q4_k_m"):
    """Writes the GGUF at path (via path.tmp, renamed when done) unless complete already; returns its size."""
    path = pathlib.Path(path)
    if is_complete(path, shape, mix):
        log(f"{path} is complete ({path.stat().st_size / 1e9:.2f} GB), not rewritten")
        return path.stat().st_size
    path.parent.mkdir(parents=True, exist_ok=True)
    check_disk(path.parent, shape, mix)
    rng = np.random.default_rng(seed)
    log("dequantised sample mean/std: " + ", ".join(f"{k} {m:+.4f}/{sd:.4f}" for k, (m, sd) in
                                                   weight_stats(rng).items()))
    tmp = path.with_name(path.name + ".tmp")
    w = gguf.GGUFWriter(str(tmp), arch_of(shape))
    write_metadata(w, shape, qwen3_tokenizer(pathlib.Path(tokenizer_dir), shape["vocab"]))
    specs = tensor_specs(shape, mix)
    for name, dims, qtype in specs:
        if qtype == Q.F32:
            w.add_tensor_info(name, dims, np.dtype(np.float32), int(np.prod(dims)) * 4)
        else:
            bshape = byte_shape(dims, qtype)
            w.add_tensor_info(name, bshape, np.dtype(np.uint8), int(np.prod(bshape)), raw_dtype=qtype)
    w.write_header_to_file()
    w.write_kv_data_to_file()
    w.write_ti_data_to_file()
    start = time.monotonic()
    for i, (name, dims, qtype) in enumerate(specs):
        w.write_tensor_data(random_tensor(rng, dims, qtype, name))
        if i % 24 == 0:
            log(f"{i + 1}/{len(specs)} tensors, {tmp.stat().st_size / 1e9:.2f} GB, {time.monotonic() - start:.0f} s")
    w.close()
    os.replace(tmp, path)
    size = path.stat().st_size
    sidecar(path).write_text(json.dumps({"shape": shape, "mix": mix, "size": size, "seed": seed}) + "\n")
    log(f"wrote {path}: {size / 1e9:.2f} GB in {time.monotonic() - start:.0f} s")
    return size
