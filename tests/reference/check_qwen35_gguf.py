#!/usr/bin/env python3
# Qwen3.5 GGUF round trip (reference label): tiny random Qwen3.5 dense and MoE models (hf_models.py, HK=2 < HV=4
# so llama.cpp reorders the V heads; a dense one again with V heads of 32, one Q8_0 block) -> llama.cpp's own convert_hf_to_gguf.py (llamacpp_convert.py; F32 and
# Q8_0) -> tinkerd's converter (gguf_tool convert / convert-keep) -> compared with the original:
#   F32: every tensor bit-identical, except the two whose file value is a float32 function of the original that
#        loses bits: linear_attn.A_log (file: -exp(A_log)) must give exp(A_log) bit-identical, and the (1 + w)
#        norms must give 1 + w bit-identical (those are the only values the model uses); logits of the converted
#        directory in transformers must equal the original model's exactly;
#   Q8_0: quantised tensors within the Q8_0 bound of the original (per row: 0.5 + 127·2^-11 of max|row| / 127),
#        untransformed ones equal to gguf.quants.dequantize of the file's own blocks, F16 ones equal to the
#        original rounded to F16, F32 ones as for the F32 file;
#   kept (convert-keep): every weight, dequantised from its U8 blocks (safetensors or the GGUF byte ranges of
#        external_weights.json), equal to the dequantised conversion's; an out_proj whose V heads are not whole
#        blocks is kept in the file's tiled column order (name + ".v_heads_tiled"): untiled here before comparing;
#   config.json: the model-defining fields equal the original's;
#   with --tinkerd: the server on the F32 and Q8_0 GGUFs (its own conversion) and on the kept Q8_0 directory, its
#        logprobs (tinker SDK) vs transformers on the same weights within gguf_engine_check.py's 1e-4.
# Any missing input (the converter in .cache/llamacpp-convert, the tool) is a failure. Exit 1 on any mismatch.
# Usage: .venv/bin/python check_qwen35_gguf.py --tool GGUF_TOOL --converter DIR --workdir DIR [--tinkerd BIN]
import argparse
import json
import os
import subprocess
import sys

import numpy as np
import torch
from safetensors.numpy import load_file

HERE = os.path.dirname(os.path.abspath(__file__))
sys.path.insert(0, HERE)
sys.path.insert(0, os.path.join(os.path.dirname(HERE), "gguf"))  # gguf_engine_check (the server through the SDK)
import hf_models as hm  # noqa: E402

CASES = ["hf_qwen3_5_tiny", "hf_qwen3_5_moe_tiny", "hf_qwen3_5_wide_v_tiny"]
# hf_qwen3_5_tiny with V heads of 32 (one Q8_0 block): the kept Q8_0 out_proj has its columns moved as blocks.
_seed, _config, _model, _kwargs, _rank, _targets = hm.CASES["hf_qwen3_5_tiny"]
hm.CASES["hf_qwen3_5_wide_v_tiny"] = (1808, _config, _model, {**_kwargs, "linear_value_head_dim": 32}, _rank, _targets)
CONFIG_KEYS = ["architectures", "vocab_size", "hidden_size", "num_hidden_layers", "num_attention_heads",
               "num_key_value_heads", "head_dim", "tie_word_embeddings", "max_position_embeddings", "layer_types",
               "linear_num_key_heads", "linear_num_value_heads", "linear_key_head_dim", "linear_value_head_dim",
               "linear_conv_kernel_dim"]
DENSE_KEYS = ["intermediate_size"]
PROBE = [3, 17, 42, 5, 88, 60, 1, 23, 9, 71, 33, 2, 50]
MOE_KEYS = ["num_experts", "num_experts_per_tok", "moe_intermediate_size", "shared_expert_intermediate_size"]


def one_plus_norm(name):
    return name.endswith("norm.weight") and not name.endswith("linear_attn.norm.weight")


def run(cmd):
    res = subprocess.run([str(c) for c in cmd], capture_output=True, text=True)
    if res.returncode != 0:
        raise SystemExit(f"FAIL: {' '.join(map(str, cmd))}\n{res.stdout[-2000:]}\n{res.stderr[-4000:]}")
    return res.stdout


def original_tensors(model_dir):
    """The saved model's tensors under "model.*" names (transformers 5 saves "model.language_model.*")."""
    raw = load_file(os.path.join(model_dir, "model.safetensors"))
    return {k.replace("model.language_model.", "model.", 1): v for k, v in raw.items()}


def our_tensors(out_dir):
    """The converted tensors, qwen35moe's stacked experts gate/up fused back into HF's gate_up_proj."""
    return our_tensors_from(load_file(os.path.join(out_dir, "model.safetensors")))


def same_bits(a, b):
    return a.dtype == b.dtype and a.shape == b.shape and np.array_equal(a.view(np.uint32), b.view(np.uint32))


def check_exact(name, ours, orig, failures, stats):
    """The F32 rules: bits, or the value the model uses (exp(A_log), 1 + w) bit-identical."""
    if ours.shape != orig.shape:
        failures.append(f"{name}: shape {ours.shape} != {orig.shape}")
    elif name.endswith("linear_attn.A_log"):
        used_o, used_r = torch.from_numpy(ours).exp().numpy(), torch.from_numpy(orig).exp().numpy()
        if not same_bits(used_o, used_r):
            failures.append(f"{name}: exp(A_log) differs: {used_o} vs {used_r}")
        stats["A_log values bit-identical"] += int((ours.view(np.uint32) == orig.view(np.uint32)).sum())
        stats["A_log values"] += ours.size
    elif one_plus_norm(name):
        if not same_bits(np.float32(1) + ours, np.float32(1) + orig):
            failures.append(f"{name}: 1 + w differs (max |diff| {np.abs(ours - orig).max():.3g})")
        stats["(1 + w) norm values bit-identical"] += int((ours.view(np.uint32) == orig.view(np.uint32)).sum())
        stats["(1 + w) norm values"] += ours.size
    elif not same_bits(ours, orig):
        failures.append(f"{name}: not bit-identical (max |diff| {np.abs(ours - orig).max():.3g})")
    else:
        stats["tensors bit-identical"] += 1


def file_types(tool, gguf_path):
    """GGUF name -> ggml type name, from gguf_tool info."""
    lines = run([tool, "info", gguf_path]).splitlines()[1:]
    return {ln.split()[0]: ln.split()[1] for ln in lines}


def gguf_name_of(hf_name):
    """The GGUF name of an untransformed HF tensor whose data is stored as is (None for the others)."""
    plain = {"self_attn.q_proj.weight": "attn_q.weight", "self_attn.k_proj.weight": "attn_k.weight",
             "self_attn.v_proj.weight": "attn_v.weight", "self_attn.o_proj.weight": "attn_output.weight",
             "mlp.gate_proj.weight": "ffn_gate.weight", "mlp.up_proj.weight": "ffn_up.weight",
             "mlp.down_proj.weight": "ffn_down.weight", "mlp.shared_expert.gate_proj.weight": "ffn_gate_shexp.weight",
             "mlp.shared_expert.up_proj.weight": "ffn_up_shexp.weight",
             "mlp.shared_expert.down_proj.weight": "ffn_down_shexp.weight", "mlp.gate.weight": "ffn_gate_inp.weight",
             "mlp.experts.gate_proj": "ffn_gate_exps.weight", "mlp.experts.up_proj": "ffn_up_exps.weight",
             "mlp.experts.down_proj": "ffn_down_exps.weight"}
    if hf_name == "model.embed_tokens.weight":
        return "token_embd.weight"
    if hf_name == "lm_head.weight":
        return "output.weight"
    parts = hf_name.split(".", 3)
    return f"blk.{parts[2]}.{plain[parts[3]]}" if len(parts) == 4 and parts[3] in plain else None


def dequantize_file_tensor(gguf_path, name):
    import gguf
    reader = gguf.GGUFReader(gguf_path)
    t = next(t for t in reader.tensors if t.name == name)
    return gguf.quants.dequantize(t.data, t.tensor_type).reshape([int(d) for d in reversed(t.shape)])


def check_q8(tool, gguf_path, ours_raw, orig, failures, stats):
    """Q8_0 file: bound for quantised tensors, exact vs the file's own blocks where stored as is."""
    types = file_types(tool, gguf_path)
    for name, value in sorted(ours_raw.items()):
        gname = gguf_name_of(name)
        if gname is not None and types.get(gname) == "Q8_0":
            want = dequantize_file_tensor(gguf_path, gname).astype(np.float32)
            if not same_bits(np.ascontiguousarray(want), value):
                failures.append(f"q8_0 {name}: differs from gguf.quants.dequantize of {gname}")
            else:
                stats["q8_0 tensors == gguf.quants.dequantize"] += 1
    ours = our_tensors_from(ours_raw)
    for name, o in sorted(orig.items()):
        if name not in ours:
            continue  # reported by the key comparison
        x = ours[name]
        amax = np.abs(o).max(axis=-1, keepdims=True) if o.ndim >= 2 else None
        if x.shape != o.shape or x.dtype not in (np.float32, np.float16):
            failures.append(f"q8_0 {name}: {x.dtype} {x.shape} vs {o.dtype} {o.shape}")
        elif x.dtype == np.float16:  # rows not a whole number of Q8_0 blocks: the converter wrote F16
            if not np.array_equal(x.view(np.uint16), o.astype(np.float16).view(np.uint16)):
                failures.append(f"q8_0 {name}: not the original rounded to F16")
            else:
                stats["q8_0-file F16 tensors == original in F16"] += 1
        elif o.ndim >= 2 and o.shape[-1] % 32 == 0 and not same_bits(x, o):
            bound = amax / 127 * (0.5 + 127 * 2.0**-11) + 1e-12
            if np.any(np.abs(x - o) > bound):
                failures.append(f"q8_0 {name}: outside the Q8_0 bound (max excess "
                                f"{(np.abs(x - o) - bound).max():.3g})")
            else:
                stats["q8_0 tensors within the Q8_0 bound"] += 1
        else:
            check_exact("q8_0 " + name, x, o, failures, stats)


def our_tensors_from(raw):
    t = dict(raw)
    for k in [k for k in t if k.endswith(".mlp.experts.gate_proj")]:
        base = k[: -len("gate_proj")]
        t[base + "gate_up_proj"] = np.concatenate([t.pop(k), t.pop(base + "up_proj")], axis=1)
    return t


TILED_SUFFIX = ".v_heads_tiled"  # gguf/qwen35.h kTiledColumnsSuffix


def untiled_columns(values, config):
    """[rows, HV·Dv] in llama.cpp's tiled V-head order (slot j·HK + k holds grouped head k·r + j) -> grouped."""
    hk, hv, dv = config["linear_num_key_heads"], config["linear_num_value_heads"], config["linear_value_head_dim"]
    rows = values.shape[0]
    return values.reshape(rows, hv // hk, hk, dv).transpose(0, 2, 1, 3).reshape(rows, hv * dv)


def kept_values(keep_dir):
    """Every weight of a convert-keep directory as float32: U8 blocks (safetensors or GGUF ranges) dequantised,
    tiled out_proj columns put back in grouped order under the plain name."""
    import gguf
    with open(os.path.join(keep_dir, "external_weights.json")) as f:
        manifest = json.load(f)
    with open(os.path.join(keep_dir, "config.json")) as f:
        config = json.load(f)
    out = {}
    local = load_file(os.path.join(keep_dir, "model.safetensors"))
    blob = np.fromfile(manifest["file"], dtype=np.uint8)
    ext = {k: blob[v["offset"]: v["offset"] + v["n_bytes"]].reshape(v["shape"]) for k, v in
           manifest["tensors"].items()}
    for k, v in list(local.items()) + list(ext.items()):
        if v.dtype == np.uint8:  # [..., blocks, 34] Q8_0 blocks -> [..., blocks * 32]
            flat = gguf.quants.dequantize(v.reshape(-1, v.shape[-1] * v.shape[-2]), gguf.GGMLQuantizationType.Q8_0)
            v = flat.reshape(list(v.shape[:-2]) + [v.shape[-2] * 32]).astype(np.float32)
        if k.endswith(TILED_SUFFIX):
            k, v = k[: -len(TILED_SUFFIX)], untiled_columns(v, config.get("text_config", config))
        out[k] = v
    return out, manifest


def transformers_of(out_dir, failures, what):
    """transformers' model built from a converted directory's config.json and tensors (None on a failure)."""
    from transformers import AutoConfig, AutoModelForCausalLM
    config = AutoConfig.from_pretrained(out_dir)
    model = hm.use_eager_experts(AutoModelForCausalLM.from_config(config).float().eval())
    state = {k: torch.from_numpy(v).float() for k, v in our_tensors(out_dir).items()}
    if config.tie_word_embeddings:
        state.setdefault("lm_head.weight", state["model.embed_tokens.weight"])
    missing, unexpected = model.load_state_dict(state, strict=False)
    if missing or unexpected:
        failures.append(f"{what}: transformers state dict: missing {missing}, unexpected {unexpected}")
        return None
    return model


def check_logits(out_dir, orig_model, failures, case):
    """transformers on our config.json + tensors vs the original model: identical logits (F32)."""
    model = transformers_of(out_dir, failures, case)
    if model is None:
        return
    tokens = torch.tensor([PROBE])
    with torch.no_grad():
        want, got = orig_model(tokens).logits, model(tokens).logits
    diff = (want - got).abs().max().item()
    print(f"  {case} f32 logits: max |diff| vs the original = {diff}")
    if diff != 0.0:
        failures.append(f"{case}: logits differ by {diff} (F32 round trip must be exact)")


def check_config(out_dir, model_dir, failures, case):
    with open(os.path.join(out_dir, "config.json")) as f:
        ours = json.load(f)
    with open(os.path.join(model_dir, "config.json")) as f:
        orig = json.load(f)
    keys = CONFIG_KEYS + (MOE_KEYS if "moe" in case else DENSE_KEYS)
    for key in keys:
        if ours.get(key) != orig.get(key):
            failures.append(f"{case} config.json {key}: {ours.get(key)} != {orig.get(key)}")
    rope_o, rope_r = ours.get("rope_parameters", {}), orig["rope_parameters"]
    for key in ("rope_theta", "partial_rotary_factor"):
        if rope_o.get(key) != rope_r.get(key):
            failures.append(f"{case} config.json rope_parameters.{key}: {rope_o.get(key)} != {rope_r.get(key)}")
    if np.float32(ours.get("rms_norm_eps", 0)) != np.float32(orig["rms_norm_eps"]):
        failures.append(f"{case} config.json rms_norm_eps: {ours.get('rms_norm_eps')} != {orig['rms_norm_eps']}")


def with_mtp_layer(model_dir, out_dir):
    """A copy of a dense model with one multi-token-prediction layer (mtp.*: the last layer's tensors and four
    random ones, as Qwen3.5 checkpoints carry them), which llama.cpp writes as an extra block."""
    from safetensors.torch import load_file as load_torch, save_file
    os.makedirs(out_dir, exist_ok=True)
    t = load_torch(os.path.join(model_dir, "model.safetensors"))
    with open(os.path.join(model_dir, "config.json")) as f:
        config = json.load(f)
    c, last = config["hidden_size"], f"model.language_model.layers.{config['num_hidden_layers'] - 1}."
    g = torch.Generator().manual_seed(7)
    extra = {"mtp.fc.weight": torch.randn(c, 2 * c, generator=g)}
    for norm in ("pre_fc_norm_embedding", "pre_fc_norm_hidden", "norm"):
        extra[f"mtp.{norm}.weight"] = torch.randn(c, generator=g)
    extra.update({"mtp.layers.0." + k[len(last):]: v.clone() for k, v in t.items() if k.startswith(last)})
    save_file({**t, **extra}, os.path.join(out_dir, "model.safetensors"), metadata={"format": "pt"})
    config["mtp_num_hidden_layers"] = 1
    with open(os.path.join(out_dir, "config.json"), "w") as f:
        json.dump(config, f, indent=2)


def same_dirs(a, b, what, failures):
    """Two converted directories with the same tensors (bits) and config.json."""
    ta, tb = load_file(os.path.join(a, "model.safetensors")), load_file(os.path.join(b, "model.safetensors"))
    if sorted(ta) != sorted(tb) or any(ta[k].dtype != tb[k].dtype or not np.array_equal(ta[k], tb[k]) for k in ta):
        failures.append(f"{what}: tensors differ from the plain conversion's")
    for name in ("config.json", "external_weights.json"):
        pa, pb = os.path.join(a, name), os.path.join(b, name)
        if os.path.exists(pa) or os.path.exists(pb):
            ja, jb = (json.load(open(p)) if os.path.exists(p) else None for p in (pa, pb))
            if name == "external_weights.json" and ja and jb:
                ja, jb = sorted(ja["tensors"]), sorted(jb["tensors"])
            if ja != jb:
                failures.append(f"{what}: {name} differs from the plain conversion's")


def check_variants(case, args, work, model_dir, orig, failures):
    """Dense: a file with an MTP layer converts to the same directory (the layer skipped, F32 and kept Q8_0);
    MoE: --fuse-gate-up-exps (ffn_gate_up_exps) gives HF's gate_up_proj bit-identical."""
    conv = [sys.executable, os.path.join(HERE, "llamacpp_convert.py"), args.converter]
    if "wide_v" in case:
        return
    if "moe" in case:
        path = os.path.join(work, "fused.gguf")
        run(conv + [model_dir, "--outtype", "f32", "--no-mtp", "--fuse-gate-up-exps", "--outfile", path])
        run([args.tool, "convert", path, os.path.join(work, "ours_fused")])
        fused = load_file(os.path.join(work, "ours_fused", "model.safetensors"))
        keys = [k for k in orig if k.endswith("gate_up_proj")]
        if not keys or any(k not in fused or not same_bits(fused[k], orig[k]) for k in keys):
            failures.append(f"{case} --fuse-gate-up-exps: gate_up_proj not bit-identical to the original")
        print(f"  {case} --fuse-gate-up-exps: {len(keys)} gate_up_proj tensors compared")
        return
    mtp_dir = os.path.join(work, "model_mtp")
    with_mtp_layer(model_dir, mtp_dir)
    for qtype, cmd, plain in (("f32", "convert", "ours_f32"), ("q8_0", "convert-keep", "kept_q8_0")):
        path = os.path.join(work, f"mtp_{qtype}.gguf")
        run(conv + [mtp_dir, "--outtype", qtype, "--outfile", path])
        if "nextn" not in run([args.tool, "info", path]):
            failures.append(f"{case} MTP: llama.cpp wrote no nextn tensors into {path}")
        run([args.tool, cmd, path, os.path.join(work, f"mtp_{plain}")])
        same_dirs(os.path.join(work, f"mtp_{plain}"), os.path.join(work, plain), f"{case} MTP {cmd}", failures)
        print(f"  {case} with an MTP layer ({qtype}, {cmd}): compared with the plain conversion")


def check_case(case, args, failures):
    from collections import Counter
    stats = Counter()
    work = os.path.join(args.workdir, case)
    orig_model, model_dir = hm.build_tiny_model(case, work)
    orig = original_tensors(model_dir)
    files = {}
    for qtype in ("f32", "q8_0"):
        files[qtype] = os.path.join(work, f"{qtype}.gguf")
        run([sys.executable, os.path.join(HERE, "llamacpp_convert.py"), args.converter, model_dir, "--outtype", qtype,
             "--no-mtp", "--outfile", files[qtype]])
        run([args.tool, "convert", files[qtype], os.path.join(work, f"ours_{qtype}")])
    ours = our_tensors(os.path.join(work, "ours_f32"))
    if sorted(ours) != sorted(orig):
        failures.append(f"{case}: tensor names differ: only ours {sorted(set(ours) - set(orig))}, "
                        f"only original {sorted(set(orig) - set(ours))}")
    for name in sorted(set(ours) & set(orig)):
        check_exact(name, ours[name], orig[name], failures, stats)
    check_config(os.path.join(work, "ours_f32"), model_dir, failures, case)
    check_logits(os.path.join(work, "ours_f32"), orig_model, failures, case)
    q8_raw = load_file(os.path.join(work, "ours_q8_0", "model.safetensors"))
    check_q8(args.tool, files["q8_0"], q8_raw, orig, failures, stats)
    keep_dir = os.path.join(work, "kept_q8_0")
    run([args.tool, "convert-keep", files["q8_0"], keep_dir])
    kept, manifest = kept_values(keep_dir)
    if sorted(kept) != sorted(q8_raw):
        failures.append(f"{case} kept: names differ from the dequantised conversion's")
    for name in sorted(set(kept) & set(q8_raw)):
        if not same_bits(kept[name], q8_raw[name]):
            failures.append(f"{case} kept: {name} differs from the dequantised conversion")
        else:
            stats["kept tensors == dequantised conversion"] += 1
    stats["kept in place (GGUF byte ranges)"] = len(manifest["tensors"])
    stats["kept in place in tiled column order"] = sum(k.endswith(TILED_SUFFIX) for k in manifest["tensors"])
    if "wide_v" not in case and stats["kept in place in tiled column order"] == 0:
        failures.append(f"{case}: no out_proj kept in tiled column order (V heads of 8 split Q8_0 blocks)")
    kept_raw = load_file(os.path.join(keep_dir, "model.safetensors"))
    stats["kept as U8 blocks in model.safetensors (rows/columns moved)"] = sum(v.dtype == np.uint8 for v in
                                                                                kept_raw.values())
    if "wide_v" in case and any(kept_raw[k].dtype != np.uint8 for k in kept_raw if k.endswith("out_proj.weight")):
        failures.append(f"{case}: out_proj (V heads of one Q8_0 block) was not kept as blocks")
    check_variants(case, args, work, model_dir, orig, failures)
    print(f"  {case}: " + ", ".join(f"{k}: {v}" for k, v in sorted(stats.items())))
    return orig_model


def check_tinkerd(tinkerd, workdir, originals, failures):
    """tinkerd serving the F32 and Q8_0 GGUFs themselves (--model NAME=FILE.gguf: its own conversion, dequantised)
    and the kept Q8_0 directory (blocks used in place): its logprobs through the tinker SDK vs transformers on the
    same weights (the original model; the dequantised Q8_0 directory)."""
    import gguf_engine_check as engine
    models, references = {}, {}
    for case, orig_model in originals.items():
        work = os.path.join(workdir, case)
        q8 = transformers_of(os.path.join(work, "ours_q8_0"), failures, case + " q8_0")
        for kind, ref in (("f32.gguf", orig_model), ("q8_0.gguf", q8), ("kept_q8_0", q8)):
            models[f"{case}-{kind.replace('.', '_')}"] = os.path.join(work, kind)
            references[os.path.join(work, kind)] = ref
    try:
        engine.check_engine(tinkerd, workdir, PROBE, models, lambda path: references[path])
    except AssertionError as e:
        failures.append(str(e))


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--tool", required=True)
    ap.add_argument("--converter", required=True, help="the extracted llama.cpp converter (install-deps.sh)")
    ap.add_argument("--workdir", required=True)
    ap.add_argument("--tinkerd", help="also serve the converted directories with this server binary")
    args = ap.parse_args()
    script = os.path.join(args.converter, "convert_hf_to_gguf.py")
    if not os.path.isfile(script) or not os.path.isdir(os.path.join(args.converter, "gguf-py")):
        sys.exit(f"FAIL: llama.cpp's converter is not at {args.converter} (run scripts/install-deps.sh)")
    if not os.access(args.tool, os.X_OK):
        sys.exit(f"FAIL: no gguf_tool at {args.tool}")
    sys.path.insert(0, os.path.join(args.converter, "gguf-py"))  # the gguf package the converter wrote with
    torch.set_num_threads(min(2, torch.get_num_threads()))
    os.makedirs(args.workdir, exist_ok=True)
    failures = []
    originals = {case: check_case(case, args, failures) for case in CASES}
    if args.tinkerd:
        check_tinkerd(args.tinkerd, args.workdir, originals, failures)
    for f in failures:
        print("FAIL", f)
    print("qwen35 gguf round trip:", "FAILED" if failures else "ok")
    sys.exit(1 if failures else 0)


if __name__ == "__main__":
    main()
