# Writes a tiny random Qwen3ForCausalLM model dir for the OpenAI scenario: hidden 32, 2 layers, 4/2
# heads of dim 8, tied embeddings, the full Qwen3 vocab, plus the real Qwen3 tokenizer.json and
# tokenizer_config.json (chat template). Config and weights come from tests/reference/case_builder.py.
# Also decodes token ids the way the server should (byte-level BPE, special tokens skipped).
import json
import os
import shutil
import sys

import numpy as np

sys.path.insert(0, os.path.join(os.path.dirname(os.path.abspath(__file__)), "..", "reference"))
import case_builder  # noqa: E402
import reference_model  # noqa: E402
import safetensors_io  # noqa: E402

TOKENIZER_FILES = ("tokenizer.json", "tokenizer_config.json")
IM_END, ENDOFTEXT = 151645, 151643


def vocab_size(tokenizer_json):
    """Ids of the BPE vocab and the added tokens together (151669 for Qwen3)."""
    with open(tokenizer_json) as f:
        tok = json.load(f)
    ids = list(tok["model"]["vocab"].values()) + [a["id"] for a in tok.get("added_tokens", [])]
    return max(ids) + 1


def tiny_config(vocab, context):
    config = case_builder.tiny_config("qwen3_tiny")
    config.update({"vocab_size": vocab, "head_dim": 8, "max_position_embeddings": context,
                   "bos_token_id": ENDOFTEXT, "eos_token_id": IM_END})
    return config


def write(out_dir, tokenizer_dir, seed=7, context=512):
    """Writes config.json, model.safetensors (F32) and the tokenizer files into out_dir."""
    os.makedirs(out_dir, exist_ok=True)
    config = tiny_config(vocab_size(os.path.join(tokenizer_dir, "tokenizer.json")), context)
    with open(os.path.join(out_dir, "config.json"), "w") as f:
        json.dump(config, f, indent=1)
    cfg = reference_model.ModelConfig.from_dict(config)
    weights = case_builder.tiny_weights(cfg, np.random.default_rng(seed))
    safetensors_io.save(os.path.join(out_dir, "model.safetensors"), weights, {"format": "pt"})
    for name in TOKENIZER_FILES:
        shutil.copyfile(os.path.join(tokenizer_dir, name), os.path.join(out_dir, name))
    return out_dir


def _byte_of_char():
    """The inverse of byte-level BPE's byte -> printable character map: printable Latin-1 bytes stand
    for themselves, the other 68 bytes for chr(256), chr(257), ... in byte order."""
    keep = set(range(33, 127)) | set(range(161, 173)) | set(range(174, 256))
    table, extra = {}, 0
    for b in range(256):
        if b in keep:
            table[chr(b)] = b
        else:
            table[chr(256 + extra)] = b
            extra += 1
    return table


class ByteLevelDecoder:
    """ids -> text for a ByteLevel tokenizer.json (Qwen3): special added tokens skipped."""

    def __init__(self, tokenizer_json):
        with open(tokenizer_json) as f:
            tok = json.load(f)
        self.pieces = {i: p for p, i in tok["model"]["vocab"].items()}
        self.special = {a["id"] for a in tok["added_tokens"] if a.get("special")}
        for a in tok["added_tokens"]:
            self.pieces[a["id"]] = a["content"]
        self.added = {a["id"] for a in tok["added_tokens"]}
        self.byte_of = _byte_of_char()

    def token_bytes(self, i):
        piece = self.pieces[i]
        return piece.encode() if i in self.added else bytes(self.byte_of[c] for c in piece)

    def __call__(self, ids):
        data = b"".join(self.token_bytes(i) for i in ids if i not in self.special)
        return data.decode("utf-8", errors="replace")
