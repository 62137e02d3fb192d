#!/usr/bin/env python3
"""Writes the fuzz tier's seed corpus (fuzz/corpus/<target>/): a few small valid inputs per target, built
with the repo's own helpers (wire protobuf: tests/e2e/wire_codec.py; GGUF: tests/gguf/gguf_writer.py).
--qwen3 also rewrites fuzz/data (the cut-down Qwen3 tokenizer and its chat template). From the repo root:
    .venv/bin/python fuzz/make_corpus.py [--qwen3 ../shared/models/tokenizers/qwen3]"""
import argparse
import json
import os
import struct
import sys

HERE = os.path.dirname(os.path.abspath(__file__))
ROOT = os.path.dirname(HERE)
SMALL_VOCAB = 4000


def write(target, name, data):
    folder = os.path.join(HERE, "corpus", target)
    os.makedirs(folder, exist_ok=True)
    if isinstance(data, str):
        data = data.encode()
    with open(os.path.join(folder, name), "wb") as f:
        f.write(data)


def small_qwen3_tokenizer(qwen3_dir):
    """Qwen3's tokenizer.json cut to its first SMALL_VOCAB tokens (merges among them), added tokens renumbered."""
    with open(os.path.join(qwen3_dir, "tokenizer.json"), encoding="utf-8") as f:
        tok = json.load(f)
    model = tok["model"]
    vocab = {k: v for k, v in model["vocab"].items() if v < SMALL_VOCAB}
    merges = [m for m in model["merges"] if m[0] in vocab and m[1] in vocab and m[0] + m[1] in vocab]
    model["vocab"], model["merges"] = vocab, merges
    for i, added in enumerate(tok["added_tokens"]):
        added["id"] = SMALL_VOCAB + i
    tok["post_processor"] = tok.get("post_processor")
    with open(os.path.join(HERE, "data", "qwen3_small_tokenizer.json"), "w", encoding="utf-8") as f:
        json.dump(tok, f, ensure_ascii=False, separators=(",", ":"))
    with open(os.path.join(qwen3_dir, "tokenizer_config.json"), encoding="utf-8") as f:
        template = json.load(f)["chat_template"]
    with open(os.path.join(HERE, "data", "qwen3_chat_template.jinja"), "w", encoding="utf-8") as f:
        f.write(template)


def json_seeds():
    bodies = {
        "create_model": {"base_model": "tinkerd/builtin-tiny", "lora_config": {"rank": 8, "train_mlp": True},
                         "user_metadata": {"a": "b"}, "optimizer_config": {"type": "adamw"}},
        "save_weights": {"model_id": "run-1", "path": "tinker://run-1/weights/step-2", "seq_id": 3,
                         "ttl_seconds": 60},
        "forward_backward": {"model_id": "run-1", "seq_id": 1, "forward_backward_input": {
            "loss_fn": "cross_entropy", "loss_fn_config": {"clip": 0.2}, "data": [{
                "model_input": {"chunks": [{"type": "encoded_text", "tokens": [1, 2, 3]}]},
                "loss_fn_inputs": {"target_tokens": {"data": [2, 3, 4], "dtype": "int64", "shape": [3]},
                                   "weights": {"data": [1.0, 0.5, 0], "dtype": "float32"}}}]}},
        "forward_sparse": {"model_id": "r", "seq_id": 2, "forward_input": {"loss_fn": "importance_sampling", "data": [{
            "model_input": {"chunks": [{"type": "encoded_text", "tokens": [5]}]},
            "loss_fn_inputs": {"target_tokens": {"data": [7, 9], "dtype": "int64", "shape": [1, 4],
                                                 "sparse_crow_indices": [0, 2], "sparse_col_indices": [1, 3]}}}]}},
    }
    for name, body in bodies.items():
        write("api_json_fuzz", name + ".json", json.dumps(body))
    chats = {
        "chat": {"model": "m", "messages": [{"role": "system", "content": "be brief"},
                                            {"role": "user", "content": [{"type": "text", "text": "hi"}]}],
                 "max_tokens": 5, "temperature": 0.7, "top_p": 0.9, "stop": ["\n", "END"], "logprobs": True,
                 "top_logprobs": 2, "n": 2, "seed": -3, "stream": True, "stream_options": {"include_usage": True}},
        "chat_tools": {"model": "m", "messages": [{"role": "user", "content": "weather?"},
                                                  {"role": "assistant", "content": None, "tool_calls": [
                                                      {"type": "function", "function": {"name": "w", "arguments": "{}"}}]},
                                                  {"role": "tool", "content": "sunny", "tool_call_id": "1"}],
                       "tools": [{"type": "function", "function": {"name": "w", "parameters": {}}}],
                       "chat_template_kwargs": {"enable_thinking": False}, "max_completion_tokens": 9},
        "completion": {"model": "m", "prompt": [[1, 2, 3], [4]], "logprobs": 3, "echo": True, "top_k": 5},
        "completion_text": {"model": "m", "prompt": "Once upon", "stop": "x", "max_tokens": 0, "user": "u"},
    }
    for name, body in chats.items():
        write("openai_request_fuzz", name + ".json", json.dumps(body))
    configs = {
        "llama": {"architectures": ["LlamaForCausalLM"], "vocab_size": 512, "hidden_size": 64,
                  "intermediate_size": 172, "num_hidden_layers": 5, "num_attention_heads": 8,
                  "num_key_value_heads": 4, "max_position_embeddings": 512, "rms_norm_eps": 1e-5,
                  "hidden_act": "silu", "tie_word_embeddings": True, "torch_dtype": "float32",
                  "rope_scaling": {"rope_type": "llama3", "factor": 8.0, "low_freq_factor": 1.0,
                                   "high_freq_factor": 4.0, "original_max_position_embeddings": 8192}},
        "qwen3": {"architectures": ["Qwen3ForCausalLM"], "vocab_size": 1000, "hidden_size": 32, "head_dim": 16,
                  "intermediate_size": 64, "num_hidden_layers": 2, "num_attention_heads": 4,
                  "num_key_value_heads": 2, "max_position_embeddings": 128, "hidden_act": "silu",
                  "rope_theta": 1000000.0, "bos_token_id": None, "eos_token_id": [1, 2]},
        "qwen2": {"architectures": ["Qwen2ForCausalLM"], "vocab_size": 10, "hidden_size": 8,
                  "intermediate_size": 8, "num_hidden_layers": 1, "num_attention_heads": 2,
                  "max_position_embeddings": 16, "rope_parameters": {"rope_theta": 10000.0}},
    }
    for name, body in configs.items():
        write("model_config_fuzz", name + ".json", json.dumps(body))


def chat_template_seeds():
    messages = [{"role": "system", "content": "sys"}, {"role": "user", "content": "hi <think>x</think>"},
                {"role": "assistant", "content": "<think>\nhm\n</think>\n\nyo"}, {"role": "user", "content": "2"}]
    write("chat_template_fuzz", "qwen3_messages.json", json.dumps(messages))
    write("chat_template_fuzz", "qwen3_tools.json", json.dumps(
        {"messages": messages[:2], "tools": [{"type": "function", "function": {"name": "f"}}],
         "kwargs": {"enable_thinking": False}}))
    templates = {
        "loop": "{% for m in messages %}{{ '<|' + m['role'] + '|>' + m['content'] | trim }}{% if not loop.last %}"
                "\n{% endif %}{% endfor %}{% if add_generation_prompt %}<|assistant|>{% endif %}",
        "macro": "{% macro r(x) %}[{{ x.role|upper }}:{{ x.content|tojson }}]{% endmacro %}{% set ns = "
                 "namespace(n=0) %}{% for m in messages %}{% set ns.n = ns.n + 1 %}{{ r(m) }}{% endfor %}{{ ns.n }}",
        "filters": "{{ bos_token }}{% for m in messages|selectattr('role', 'equalto', 'user') %}{{ m.content.split()"
                   "|join(',') }}{{ m.content[1:3] }}{{ (m.content|length) % 3 }}{% endfor %}{{ raise_exception("
                   "'no') if messages|length > 9 else eos_token }}{{ tools is none }}{{ '%d'|format(2) }}",
    }
    for name, source in templates.items():
        write("chat_template_fuzz", name + ".bin", source + "\0" + json.dumps(messages))


def tokenizer_seeds():
    texts = {"english": "Hello world, it's 2026!\n  tabs\tand spaces", "specials": "<|im_start|>user\nhi<|im_end|>",
             "unicode": "naïve café 東京 🤗 e\u0301", "bytes": b"\xff\xfe invalid \xc3"}
    for name, text in texts.items():
        write("tokenizer_fuzz", name + ".txt", text)
    byte_vocab = {chr(0x100 + b) if b < 0x21 else chr(b): b for b in range(0x7F)}
    tiny = {"model": {"type": "BPE", "vocab": dict(byte_vocab, ab=200), "merges": ["a b"]},
            "pre_tokenizer": {"type": "ByteLevel", "add_prefix_space": False, "use_regex": True},
            "decoder": {"type": "ByteLevel"},
            "added_tokens": [{"id": 201, "content": "<x>", "special": True, "lstrip": True}]}
    write("tokenizer_fuzz", "tiny_bytelevel.bin", json.dumps(tiny) + "\0ab<x> ab")
    spm = {"model": {"type": "BPE", "unk_token": "<unk>", "byte_fallback": True,
                     "vocab": {"\u2581": 0, "a": 1, "b": 2, "\u2581a": 3, "<unk>": 4, "<0x41>": 5},
                     "merges": [["\u2581", "a"]]},
           "normalizer": {"type": "Sequence", "normalizers": [{"type": "Prepend", "prepend": "\u2581"},
                                                              {"type": "Replace", "pattern": {"String": " "},
                                                               "content": "\u2581"}]},
           "decoder": {"type": "Sequence", "decoders": [{"type": "ByteFallback"}, {"type": "Fuse"},
                                                        {"type": "Strip", "content": " ", "start": 1, "stop": 0}]}}
    write("tokenizer_fuzz", "tiny_spm.bin", json.dumps(spm) + "\0a bA")


def wire_seeds():
    sys.path.insert(0, os.path.join(ROOT, "tests", "e2e"))
    import numpy as np
    import subprocess
    import wire_codec as w
    datums = [w.Datum([1, 2, 3], target_tokens=[2, 3, 4], weights=[1, 1, 0.5]),
              w.Datum([7], sparse=("target_tokens",), target_tokens=np.array([[0, 5, 0, 6]]))]
    requests = {"fb": w.encode_fb_request("run-1", 1, datums, config={"clip_low": 0.8}),
                "forward": w.encode_fb_request("r", 9, datums[:1], loss_fn="importance_sampling",
                                               forward_only=True)}
    for name, body in requests.items():
        write("wire_fuzz", name + ".pb", body)
        packed = subprocess.run(["zstd", "-q", "-c", "-3"], input=body, stdout=subprocess.PIPE, check=True)
        write("wire_fuzz", name + ".pb.zst", packed.stdout)
    out = w.encode_fb_output([{"logprobs": np.array([-0.5, -1.0], np.float32)},
                              {"logprobs": np.array([-2.0], np.float32)}],
                             {"loss:sum": 1.5})
    write("wire_fuzz", "fb_output.pb", out)


def safetensors_bytes(tensors, metadata=None):
    header, data = {}, b""
    for name, (dtype, shape, raw) in tensors.items():
        header[name] = {"dtype": dtype, "shape": shape, "data_offsets": [len(data), len(data) + len(raw)]}
        data += raw
    if metadata is not None:
        header["__metadata__"] = metadata
    text = json.dumps(header).encode()
    text += b" " * (-len(text) % 8)
    return struct.pack("<Q", len(text)) + text + data


def safetensors_seeds():
    f32 = struct.pack("<4f", 1, 2, 3, 4)
    write("safetensors_fuzz", "two.safetensors", safetensors_bytes(
        {"a": ("F32", [2, 2], f32), "b": ("BF16", [3], b"\x80\x3f" * 3), "c": ("I64", [1], struct.pack("<q", 7))},
        {"format": "pt"}))
    write("safetensors_fuzz", "empty.safetensors", safetensors_bytes({"z": ("F16", [0, 3], b"")}))


def gguf_seeds(scratch):
    sys.path.insert(0, os.path.join(ROOT, "tests", "gguf"))
    import types
    import numpy as np
    import gguf
    import gguf_writer
    config = types.SimpleNamespace(max_position_embeddings=32, hidden_size=32, num_hidden_layers=1,
                                   intermediate_size=32, num_attention_heads=2, num_key_value_heads=1,
                                   rms_norm_eps=1e-5, rope_theta=10000.0, head_dim=16,
                                   vocab_size=len(gguf_writer.vocabulary()[0]))
    rng = np.random.default_rng(0)
    shapes = {"token_embd.weight": (config.vocab_size, 32), "blk.0.attn_q.weight": (32, 32),
              "blk.0.attn_k.weight": (16, 32), "blk.0.attn_v.weight": (16, 32), "blk.0.attn_output.weight": (32, 32),
              "blk.0.ffn_gate.weight": (32, 32), "blk.0.ffn_up.weight": (32, 32), "blk.0.ffn_down.weight": (32, 32)}
    Q = gguf.GGMLQuantizationType
    for name, qtype in {"llama_q4_0": Q.Q4_0, "llama_q8_0": Q.Q8_0}.items():
        path = os.path.join(scratch, name + ".gguf")
        w = gguf.GGUFWriter(path, "llama")
        gguf_writer.write_metadata(w, "llama", config)
        for tname, shape in shapes.items():
            q = gguf.quants.quantize(rng.standard_normal(shape).astype(np.float32), qtype)
            w.add_tensor(tname, q, raw_shape=q.shape, raw_dtype=qtype)
        for tname in ("blk.0.attn_norm.weight", "blk.0.ffn_norm.weight", "output_norm.weight"):
            w.add_tensor(tname, np.ones(32, np.float32))
        w.write_header_to_file()
        w.write_kv_data_to_file()
        w.write_tensors_to_file()
        w.close()
        with open(path, "rb") as f:
            write("gguf_fuzz", name + ".gguf", f.read())
    path = os.path.join(scratch, "kquants.gguf")
    w = gguf.GGUFWriter(path, "qwen3")
    for tname, qtype in {"h": Q.F16, "b": Q.BF16, "q41": Q.Q4_1}.items():
        q = gguf.quants.quantize(rng.standard_normal((2, 256)).astype(np.float32), qtype)
        w.add_tensor(tname, q, raw_shape=q.shape, raw_dtype=qtype)
    for tname, qtype in {"k4": Q.Q4_K, "k5": Q.Q5_K, "k6": Q.Q6_K}.items():  # gguf cannot quantise these
        block = gguf.GGML_QUANT_SIZES[qtype][1]
        w.add_tensor(tname, rng.integers(0, 256, (2, block), dtype=np.uint8), raw_shape=(2, block), raw_dtype=qtype)
    w.add_array("tokenizer.ggml.tokens", ["<unk>", "<s>", "a"])
    w.add_string("tokenizer.chat_template", "{{ messages[0]['content'] }}")
    w.write_header_to_file()
    w.write_kv_data_to_file()
    w.write_tensors_to_file()
    w.close()
    with open(path, "rb") as f:
        write("gguf_fuzz", "kquants.gguf", f.read())


def main():
    parser = argparse.ArgumentParser(description=__doc__)
    parser.add_argument("--qwen3", help="the real Qwen3 tokenizer folder: rewrites fuzz/data from it")
    args = parser.parse_args()
    if args.qwen3:
        small_qwen3_tokenizer(args.qwen3)
    import tempfile
    with tempfile.TemporaryDirectory() as scratch:
        json_seeds()
        chat_template_seeds()
        tokenizer_seeds()
        wire_seeds()
        safetensors_seeds()
        gguf_seeds(scratch)


if __name__ == "__main__":
    main()
