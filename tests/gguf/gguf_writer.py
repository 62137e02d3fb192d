"""Tiny seeded Hugging Face models (llama, qwen2, qwen3, qwen3moe) and our own small writer of them as
GGUF files with gguf.GGUFWriter, in the layout llama.cpp's converter produces: GGUF tensor names, llama's
q/k rows interleaved per head, qwen3moe's experts stacked [E, out, in] per projection, 2-D and 3-D
weights in F32 or a quantised type, norms, biases and the MoE router in F32, and a small byte-level BPE
vocabulary."""
import numpy as np
import torch

import gguf

HIDDEN, FFN, LAYERS, HEADS, KV_HEADS, CONTEXT = 64, 128, 2, 4, 2, 128
EXPERTS, EXPERTS_USED, EXPERT_FFN = 8, 2, 32


def byte_chars():
    """GPT-2's printable stand-in for every byte (printable Latin-1 bytes stand for themselves)."""
    keep = list(range(0x21, 0x7F)) + list(range(0xA1, 0xAD)) + list(range(0xAE, 0x100))
    table, extra = {}, 0
    for b in range(256):
        if b in keep:
            table[b] = chr(b)
        else:
            table[b] = chr(256 + extra)
            extra += 1
    return [table[b] for b in range(256)]


SPECIALS = ["<|endoftext|>", "<|im_start|>", "<|im_end|>"]
MERGES = ["Ġ t", "h e", "Ġt he", "i n", "Ġ a"]


def vocabulary():
    tokens = SPECIALS + byte_chars() + [m.replace(" ", "") for m in MERGES]
    types = [3] * len(SPECIALS) + [1] * (len(tokens) - len(SPECIALS))
    return tokens, types


def tiny_model(arch, seed):
    from transformers import LlamaConfig, LlamaForCausalLM, Qwen2Config, Qwen2ForCausalLM, Qwen3Config, \
        Qwen3ForCausalLM, Qwen3MoeConfig, Qwen3MoeForCausalLM
    vocab = len(vocabulary()[0])
    common = dict(vocab_size=vocab, hidden_size=HIDDEN, intermediate_size=FFN, num_hidden_layers=LAYERS,
                  num_attention_heads=HEADS, num_key_value_heads=KV_HEADS, max_position_embeddings=CONTEXT,
                  rms_norm_eps=1e-5, bos_token_id=1, eos_token_id=2)
    torch.manual_seed(seed)
    if arch == "llama":
        model = LlamaForCausalLM(LlamaConfig(**common, rope_theta=10000.0, tie_word_embeddings=False))
    elif arch == "qwen2":
        model = Qwen2ForCausalLM(Qwen2Config(**common, rope_theta=1000000.0, tie_word_embeddings=True))
    elif arch == "qwen3moe":  # llama.cpp's qwen3moe always renormalises the top-k routing weights
        model = Qwen3MoeForCausalLM(Qwen3MoeConfig(
            **common, head_dim=128, rope_theta=1000000.0, tie_word_embeddings=False, num_experts=EXPERTS,
            num_experts_per_tok=EXPERTS_USED, moe_intermediate_size=EXPERT_FFN, norm_topk_prob=True))
    else:  # head_dim 128 != hidden / heads: transformers' GGUF reader assumes Qwen3's 128
        model = Qwen3ForCausalLM(Qwen3Config(**common, head_dim=128, rope_theta=1000000.0, tie_word_embeddings=False))
    with torch.no_grad():  # weights large enough that a misplaced row shows in the logits
        for name, p in model.named_parameters():
            if "norm" in name:
                p.copy_(1 + 0.2 * torch.randn_like(p))
            else:
                p.copy_(0.3 * torch.randn_like(p) / (p.shape[-1] ** 0.25))
    return model.float().eval()


def gguf_name(hf_name):
    table = {
        "model.embed_tokens.weight": "token_embd.weight", "model.norm.weight": "output_norm.weight",
        "lm_head.weight": "output.weight",
    }
    if hf_name in table:
        return table[hf_name]
    parts = hf_name.split(".")  # model.layers.N.<rest>
    rest = ".".join(parts[3:])
    layer = {
        "input_layernorm.weight": "attn_norm.weight", "post_attention_layernorm.weight": "ffn_norm.weight",
        "self_attn.q_proj.weight": "attn_q.weight", "self_attn.k_proj.weight": "attn_k.weight",
        "self_attn.v_proj.weight": "attn_v.weight", "self_attn.o_proj.weight": "attn_output.weight",
        "self_attn.q_proj.bias": "attn_q.bias", "self_attn.k_proj.bias": "attn_k.bias",
        "self_attn.v_proj.bias": "attn_v.bias", "self_attn.q_norm.weight": "attn_q_norm.weight",
        "self_attn.k_norm.weight": "attn_k_norm.weight", "mlp.gate_proj.weight": "ffn_gate.weight",
        "mlp.up_proj.weight": "ffn_up.weight", "mlp.down_proj.weight": "ffn_down.weight",
        "mlp.gate.weight": "ffn_gate_inp.weight", "mlp.experts.gate_proj": "ffn_gate_exps.weight",
        "mlp.experts.up_proj": "ffn_up_exps.weight", "mlp.experts.down_proj": "ffn_down_exps.weight",
    }[rest]
    return f"blk.{parts[2]}.{layer}"


def interleave_heads(w, heads):
    """llama.cpp's order for llama q/k: per head, row 2i+j holds Hugging Face row j*D/2+i."""
    rest = w.shape[1:]
    return w.reshape(heads, 2, w.shape[0] // heads // 2, *rest).swapaxes(1, 2).reshape(w.shape)


def write_metadata(w, arch, config):
    w.add_uint32(f"{arch}.context_length", config.max_position_embeddings)
    w.add_uint32(f"{arch}.embedding_length", config.hidden_size)
    w.add_uint32(f"{arch}.block_count", config.num_hidden_layers)
    w.add_uint32(f"{arch}.feed_forward_length", config.intermediate_size)
    w.add_uint32(f"{arch}.attention.head_count", config.num_attention_heads)
    w.add_uint32(f"{arch}.attention.head_count_kv", config.num_key_value_heads)
    w.add_float32(f"{arch}.attention.layer_norm_rms_epsilon", config.rms_norm_eps)
    w.add_float32(f"{arch}.rope.freq_base", config.rope_theta if hasattr(config, "rope_theta")
                  else config.rope_parameters["rope_theta"])
    head_dim = getattr(config, "head_dim", None) or config.hidden_size // config.num_attention_heads
    w.add_uint32(f"{arch}.attention.key_length", head_dim)
    w.add_uint32(f"{arch}.attention.value_length", head_dim)
    w.add_uint32(f"{arch}.rope.dimension_count", head_dim)
    w.add_uint32(f"{arch}.vocab_size", config.vocab_size)
    if arch == "qwen3moe":
        w.add_uint32(f"{arch}.expert_count", config.num_experts)
        w.add_uint32(f"{arch}.expert_used_count", config.num_experts_per_tok)
        w.add_uint32(f"{arch}.expert_feed_forward_length", config.moe_intermediate_size)
    tokens, types = vocabulary()
    w.add_string("tokenizer.ggml.model", "gpt2")
    w.add_string("tokenizer.ggml.pre", "qwen2" if arch.startswith("qwen") else "default")
    w.add_array("tokenizer.ggml.tokens", tokens)
    w.add_array("tokenizer.ggml.token_type", types)
    w.add_array("tokenizer.ggml.merges", MERGES)
    w.add_uint32("tokenizer.ggml.bos_token_id", 1)
    w.add_uint32("tokenizer.ggml.eos_token_id", 2)


def split_gate_up(state):
    """transformers' fused experts.gate_up_proj [E, 2F, H] -> GGUF's separate gate and up stacks [E, F, H]."""
    out = {}
    for name, t in state.items():
        if name.endswith(".mlp.experts.gate_up_proj"):
            base = name[: -len("gate_up_proj")]
            gate, up = t.chunk(2, dim=1)
            out[base + "gate_proj"], out[base + "up_proj"] = gate, up
        else:
            out[name] = t
    return out


def write_gguf(model, arch, path, qtype):
    config = model.config
    w = gguf.GGUFWriter(str(path), arch)
    write_metadata(w, arch, config)
    state = split_gate_up(model.state_dict())
    if config.tie_word_embeddings:
        state.pop("lm_head.weight", None)
    for name, t in state.items():
        a = t.detach().float().numpy()
        if arch == "llama" and ".q_proj." in name:
            a = interleave_heads(a, config.num_attention_heads)
        elif arch == "llama" and ".k_proj." in name:
            a = interleave_heads(a, config.num_key_value_heads)
        if a.ndim in (2, 3) and qtype != gguf.GGMLQuantizationType.F32 and not name.endswith(".mlp.gate.weight"):
            q = gguf.quants.quantize(a, qtype)
            w.add_tensor(gguf_name(name), q, raw_shape=q.shape, raw_dtype=qtype)
        else:
            w.add_tensor(gguf_name(name), np.ascontiguousarray(a, dtype=np.float32))
    w.write_header_to_file()
    w.write_kv_data_to_file()
    w.write_tensors_to_file()
    w.close()


SPM_PIECES = ["▁", "t", "h", "e", "a", "n", "d", "▁t", "he", "▁the", "▁a", "an", "▁and", "nd"]


def write_sentencepiece_gguf(path):
    """A tokenizer-only llama GGUF with a SentencePiece-style vocabulary: <unk>, <s>, </s>, the 256 byte
    tokens, then pieces with falling scores (no merges: they come from the scores)."""
    tokens = ["<unk>", "<s>", "</s>"] + [f"<0x{b:02X}>" for b in range(256)] + SPM_PIECES
    types = [2, 3, 3] + [6] * 256 + [1] * len(SPM_PIECES)
    scores = [0.0] * 259 + [-float(i) for i in range(len(SPM_PIECES))]
    w = gguf.GGUFWriter(str(path), "llama")
    for key, value in [("context_length", CONTEXT), ("embedding_length", HIDDEN), ("block_count", 1),
                       ("feed_forward_length", FFN), ("attention.head_count", HEADS), ("vocab_size", len(tokens))]:
        w.add_uint32(f"llama.{key}", value)
    w.add_string("tokenizer.ggml.model", "llama")
    w.add_array("tokenizer.ggml.tokens", tokens)
    w.add_array("tokenizer.ggml.token_type", types)
    w.add_array("tokenizer.ggml.scores", scores)
    for key, value in [("bos", 1), ("eos", 2), ("unknown", 0)]:
        w.add_uint32(f"tokenizer.ggml.{key}_token_id", value)
    w.add_tensor("token_embd.weight", np.zeros((len(tokens), HIDDEN), np.float32))
    w.write_header_to_file()
    w.write_kv_data_to_file()
    w.write_tensors_to_file()
    w.close()
