#!/usr/bin/env python3
# Runs llama.cpp's own convert_hf_to_gguf.py (from the llama-cpp-python sdist, extracted by
# scripts/install-deps.sh into .cache/llamacpp-convert/<version>) on a tiny Hugging Face model that has no
# tokenizer files: the Qwen3.5 classes' set_vocab is replaced by a fixed 97-token byte-level BPE vocabulary
# (the tensors and hyper-parameters, which are what check_qwen35_gguf.py compares, go through untouched).
# Usage: llamacpp_convert.py CONVERTER_DIR MODEL_DIR [convert_hf_to_gguf.py arguments ...]
import sys


def tiny_vocab(self):
    import gguf
    n = self.hparams["vocab_size"]
    tokens = ([chr(c) for c in range(33, 127)] + ["ab", "cd", "ef", "gh", "ij", "kl"])[:n]
    if len(tokens) != n:
        raise SystemExit(f"llamacpp_convert: the fixed vocabulary has {len(tokens)} tokens, the model {n}")
    w = self.gguf_writer
    w.add_tokenizer_model("gpt2")
    w.add_tokenizer_pre("qwen2")
    w.add_token_list(tokens)
    w.add_token_types([gguf.TokenType.NORMAL] * n)
    w.add_token_merges([f"{t[0]} {t[1]}" for t in tokens if len(t) == 2])


def main():
    if len(sys.argv) < 3:
        raise SystemExit("usage: llamacpp_convert.py CONVERTER_DIR MODEL_DIR [ARGS ...]")
    converter_dir = sys.argv[1]
    sys.argv = ["convert_hf_to_gguf.py"] + sys.argv[2:]
    sys.path[:0] = [converter_dir + "/gguf-py", converter_dir]  # its own gguf-py, as the converter does
    import conversion.qwen as qwen
    for cls in (qwen.Qwen3_5TextModel, qwen.Qwen3_5MoeTextModel):
        cls.set_vocab = tiny_vocab
    import convert_hf_to_gguf
    convert_hf_to_gguf.main()


if __name__ == "__main__":
    main()
