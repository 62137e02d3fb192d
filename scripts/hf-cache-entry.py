#!/usr/bin/env python3
"""Writes a Hugging Face hub cache entry for a model NAME, so that clients which look a tokenizer up
by model name (`transformers.AutoTokenizer.from_pretrained(NAME)`, the tinker SDK's and the
tinker-cookbook's `get_tokenizer`) find it offline (HF_HUB_OFFLINE=1):

    HUB/models--ORG--NAME/snapshots/<rev>/{tokenizer.json, tokenizer_config.json, config.json, ...}
    HUB/models--ORG--NAME/refs/main            (= <rev>, a hash of the files)

    scripts/hf-cache-entry.py NAME SOURCE [--hub DIR]

SOURCE is a Hugging Face model directory (its tokenizer and config files are copied; weights are not)
or a GGUF file (tokenizer.json, tokenizer_config.json, special_tokens_map.json and config.json are
written from its metadata: byte-level BPE vocabularies, as in Llama-3 / Qwen2 / SmolLM / GPT-2 style
GGUFs). HUB is --hub, else $HF_HUB_CACHE, else $HF_HOME/hub, else ~/.cache/huggingface/hub: the
same lookup as the clients (and as `tinkerd --model ORG/NAME`). Prints the snapshot folder.

Example, for the model tinkerd serves as HuggingFaceTB/SmolLM2-135M-Instruct:
    scripts/hf-cache-entry.py HuggingFaceTB/SmolLM2-135M-Instruct SmolLM2-135M-Instruct.Q4_1.gguf
    HF_HUB_OFFLINE=1 python -c 'from transformers import AutoTokenizer as A; \
        print(A.from_pretrained("HuggingFaceTB/SmolLM2-135M-Instruct"))'
"""
import argparse
import hashlib
import json
import os
import shutil
import sys
import tempfile

# Files a tokenizer (and AutoConfig) may read; weights are never copied.
DIR_FILES = ("tokenizer.json", "tokenizer_config.json", "special_tokens_map.json", "added_tokens.json",
             "chat_template.jinja", "chat_template.json", "vocab.json", "merges.txt", "tokenizer.model",
             "config.json", "generation_config.json")

# GGUF tokenizer.ggml.pre -> the pre-tokenizer of the original tokenizer.json (as llama.cpp's
# llama-vocab.cpp maps them).
_GPT2_REGEX_DIGITS = {"type": "Sequence", "pretokenizers": [
    {"type": "Digits", "individual_digits": True},
    {"type": "ByteLevel", "add_prefix_space": False, "trim_offsets": True, "use_regex": True}]}
_LLAMA3_REGEX = (r"(?i:'s|'t|'re|'ve|'m|'ll|'d)|[^\r\n\p{L}\p{N}]?\p{L}+|\p{N}{1,3}| ?[^\s\p{L}\p{N}]+"
                 r"[\r\n]*|\s*[\r\n]+|\s+(?!\S)|\s+")
_QWEN2_REGEX = (r"(?i:'s|'t|'re|'ve|'m|'ll|'d)|[^\r\n\p{L}\p{N}]?\p{L}+|\p{N}| ?[^\s\p{L}\p{N}]+"
                r"[\r\n]*|\s*[\r\n]+|\s+(?!\S)|\s+")


def _split_then_bytes(regex):
    return {"type": "Sequence", "pretokenizers": [
        {"type": "Split", "pattern": {"Regex": regex}, "behavior": "Isolated", "invert": False},
        {"type": "ByteLevel", "add_prefix_space": False, "trim_offsets": False, "use_regex": False}]}


PRE_TOKENIZERS = {
    "smollm": _GPT2_REGEX_DIGITS, "starcoder": _GPT2_REGEX_DIGITS, "refact": _GPT2_REGEX_DIGITS,
    "gpt-2": {"type": "ByteLevel", "add_prefix_space": False, "trim_offsets": True, "use_regex": True},
    "default": {"type": "ByteLevel", "add_prefix_space": False, "trim_offsets": True, "use_regex": True},
    "llama-bpe": _split_then_bytes(_LLAMA3_REGEX), "llama3": _split_then_bytes(_LLAMA3_REGEX),
    "qwen2": _split_then_bytes(_QWEN2_REGEX),
}
CONTROL, USER_DEFINED = 3, 4  # GGUF token types of added tokens


def hub_dir(explicit):
    if explicit:
        return explicit
    if os.environ.get("HF_HUB_CACHE"):
        return os.environ["HF_HUB_CACHE"]
    if os.environ.get("HF_HOME"):
        return os.path.join(os.environ["HF_HOME"], "hub")
    return os.path.join(os.path.expanduser("~"), ".cache", "huggingface", "hub")


def _field(reader, key, default=None):
    f = reader.fields.get(key)
    return default if f is None else f.contents()


def gguf_files(path):
    """{file name: bytes} for a GGUF file's tokenizer (byte-level BPE) and a config.json."""
    try:
        from gguf import GGUFReader
    except ImportError:
        sys.exit("hf-cache-entry: reading a GGUF file needs the `gguf` package (pip install gguf)")
    r = GGUFReader(path)
    model = _field(r, "tokenizer.ggml.model")
    if model != "gpt2":
        sys.exit("hf-cache-entry: %s: tokenizer.ggml.model %r is not supported (only byte-level BPE, "
                 "'gpt2'); pass a Hugging Face model directory instead" % (path, model))
    pre = _field(r, "tokenizer.ggml.pre", "default")
    if pre not in PRE_TOKENIZERS:
        sys.exit("hf-cache-entry: %s: pre-tokenizer %r is not known here (known: %s); pass a Hugging "
                 "Face model directory instead" % (path, pre, ", ".join(sorted(PRE_TOKENIZERS))))
    tokens = _field(r, "tokenizer.ggml.tokens")
    types = _field(r, "tokenizer.ggml.token_type", [1] * len(tokens))
    merges = _field(r, "tokenizer.ggml.merges", [])
    arch = _field(r, "general.architecture", "llama")

    def token(key):
        i = _field(r, "tokenizer.ggml.%s_token_id" % key)
        return None if i is None else tokens[int(i)]

    bos, eos, unk, pad = token("bos"), token("eos"), token("unknown"), token("padding")
    add_bos = bool(_field(r, "tokenizer.ggml.add_bos_token", False))
    added = [{"id": i, "content": t, "single_word": False, "lstrip": False, "rstrip": False,
              "normalized": ty == USER_DEFINED, "special": ty == CONTROL}
             for i, (t, ty) in enumerate(zip(tokens, types)) if ty in (CONTROL, USER_DEFINED)]
    post = {"type": "ByteLevel", "add_prefix_space": True, "trim_offsets": False, "use_regex": True}
    if add_bos and bos is not None:
        bos_id = tokens.index(bos)
        post = {"type": "TemplateProcessing",
                "single": [{"SpecialToken": {"id": bos, "type_id": 0}}, {"Sequence": {"id": "A", "type_id": 0}}],
                "pair": [{"SpecialToken": {"id": bos, "type_id": 0}}, {"Sequence": {"id": "A", "type_id": 0}},
                         {"SpecialToken": {"id": bos, "type_id": 1}}, {"Sequence": {"id": "B", "type_id": 1}}],
                "special_tokens": {bos: {"id": bos, "ids": [bos_id], "tokens": [bos]}}}
    tokenizer = {
        "version": "1.0", "truncation": None, "padding": None, "added_tokens": added,
        "normalizer": None, "pre_tokenizer": PRE_TOKENIZERS[pre], "post_processor": post,
        "decoder": {"type": "ByteLevel", "add_prefix_space": True, "trim_offsets": True, "use_regex": True},
        "model": {"type": "BPE", "dropout": None, "unk_token": None, "continuing_subword_prefix": None,
                  "end_of_word_suffix": None, "fuse_unk": False, "byte_fallback": False,
                  "ignore_merges": False, "vocab": {t: i for i, t in enumerate(tokens)},
                  "merges": [m.split(" ", 1) for m in merges]},
    }
    specials = {k: v for k, v in (("bos_token", bos), ("eos_token", eos), ("unk_token", unk),
                                  ("pad_token", pad)) if v is not None}
    context = _field(r, arch + ".context_length")
    tokenizer_config = dict(specials, tokenizer_class="PreTrainedTokenizerFast", add_bos_token=add_bos,
                            add_eos_token=False, clean_up_tokenization_spaces=False,
                            model_max_length=int(context) if context else 131072)
    template = _field(r, "tokenizer.chat_template")
    if template:
        tokenizer_config["chat_template"] = template

    def arch_int(key):
        v = _field(r, "%s.%s" % (arch, key))
        return None if v is None else int(v)

    config = {"architectures": ["LlamaForCausalLM" if arch == "llama" else arch], "model_type": arch,
              "vocab_size": len(tokens), "hidden_size": arch_int("embedding_length"),
              "intermediate_size": arch_int("feed_forward_length"),
              "num_hidden_layers": arch_int("block_count"),
              "num_attention_heads": arch_int("attention.head_count"),
              "num_key_value_heads": arch_int("attention.head_count_kv"),
              "max_position_embeddings": int(context) if context else None,
              "bos_token_id": tokens.index(bos) if bos else None,
              "eos_token_id": tokens.index(eos) if eos else None}
    dump = lambda obj: (json.dumps(obj, indent=2, ensure_ascii=False) + "\n").encode()  # noqa: E731
    return {"tokenizer.json": dump(tokenizer), "tokenizer_config.json": dump(tokenizer_config),
            "special_tokens_map.json": dump(specials), "config.json": dump(config)}


def dir_files(path):
    files = {}
    for name in DIR_FILES:
        p = os.path.join(path, name)
        if os.path.isfile(p):
            with open(p, "rb") as f:
                files[name] = f.read()
    if "tokenizer.json" not in files and "tokenizer.model" not in files and "vocab.json" not in files:
        ggufs = sorted(n for n in os.listdir(path) if n.endswith(".gguf"))
        if len(ggufs) == 1:
            return gguf_files(os.path.join(path, ggufs[0]))
        sys.exit("hf-cache-entry: %s has no tokenizer files (tokenizer.json, tokenizer.model or "
                 "vocab.json)" % path)
    return files


def write_entry(name, files, hub):
    if name.count("/") != 1 or not all(name.split("/")):
        sys.exit("hf-cache-entry: NAME must look like ORG/NAME, got %r" % name)
    digest = hashlib.sha1()
    for fname in sorted(files):
        digest.update(fname.encode() + b"\0" + files[fname] + b"\0")
    rev = digest.hexdigest()
    repo = os.path.join(hub, "models--" + name.replace("/", "--"))
    snapshot = os.path.join(repo, "snapshots", rev)
    os.makedirs(os.path.join(repo, "refs"), exist_ok=True)
    if not os.path.isdir(snapshot):  # written whole under a temporary name, then renamed
        os.makedirs(os.path.dirname(snapshot), exist_ok=True)
        tmp = tempfile.mkdtemp(prefix=".tmp-", dir=os.path.dirname(snapshot))
        for fname, data in files.items():
            with open(os.path.join(tmp, fname), "wb") as f:
                f.write(data)
        os.chmod(tmp, 0o755)
        try:
            os.rename(tmp, snapshot)
        except OSError:  # written meanwhile by another process
            shutil.rmtree(tmp, ignore_errors=True)
    ref = os.path.join(repo, "refs", "main")
    with open(ref + ".tmp", "w") as f:
        f.write(rev)
    os.replace(ref + ".tmp", ref)
    return snapshot


def main(argv=None):
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0],
                                 formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("name", help="the model name clients use, ORG/NAME (tinkerd's --model NAME)")
    ap.add_argument("source", help="a Hugging Face model directory or a .gguf file")
    ap.add_argument("--hub", help="the hub cache folder (default: $HF_HUB_CACHE, $HF_HOME/hub, "
                                  "~/.cache/huggingface/hub)")
    args = ap.parse_args(argv)
    if os.path.isdir(args.source):
        files = dir_files(args.source)
    elif args.source.endswith(".gguf") and os.path.isfile(args.source):
        files = gguf_files(args.source)
    else:
        sys.exit("hf-cache-entry: %s is neither a model directory nor a .gguf file" % args.source)
    print(write_entry(args.name, files, hub_dir(args.hub)))


if __name__ == "__main__":
    main()
