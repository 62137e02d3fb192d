"""The Qwen3.5-35B-A3B-shaped headline file (issue 26): a qwen35moe GGUF with random but valid blocks, written by
headline_gguf.write like the Qwen3-30B-A3B one. Shapes from the real config (tests/data/model_configs/
Qwen3.5-35B-A3B.json): 40 layers, 3 Gated DeltaNet layers to 1 gated full-attention layer, hidden 2048, 256 experts
top-8 of width 512 plus a shared expert of 512, vocab 248320. Tensor names, order and metadata keys follow
llama.cpp's converter (as in the tiny file tests/reference/check_qwen35_gguf.py converts). The tokenizer is
Qwen3's, padded to 248320 rows (Qwen3.5's own tokenizer is not in ../shared; the weights are random anyway)."""
import gguf
import numpy as np

Q = gguf.GGMLQuantizationType
ARCH = "qwen35moe"

FULL = dict(family=ARCH, layers=40, hidden=2048, experts=256, used=8, expert_ffn=512, shared_ffn=512, heads=16,
            kv_heads=2, head_dim=256, lin_k_heads=16, lin_k_dim=128, lin_v_heads=32, lin_v_dim=128, conv=4,
            interval=4, rope_dims=64, vocab=248320, context=4096, rope_theta=1e7, rms_eps=1e-6)
TINY = dict(FULL, layers=4, hidden=256, experts=8, used=2, expert_ffn=256, shared_ffn=256, heads=4, kv_heads=2,
            head_dim=64, lin_k_heads=2, lin_k_dim=64, lin_v_heads=4, lin_v_dim=64)


def special_f32(name, shape, rng):
    """The F32 tensors whose values the model constrains: ssm_a = -exp(A_log) < 0 (A in [1, 16), as the model's
    own initialisation draws it); None for the others (headline_gguf's norms near 1, matrices N(0, 0.02))."""
    if name.endswith(".ssm_a"):
        return -rng.uniform(1.0, 16.0, size=shape).astype(np.float32)
    return None


def is_full_attention(s, layer):
    return (layer + 1) % s["interval"] == 0


def linear_attention_specs(s, p, main):
    """A Gated DeltaNet layer: fused q/k/v projection, output gate z, decay a / dt, beta, conv, norm, out."""
    h, kh, kd, vh, vd = s["hidden"], s["lin_k_heads"], s["lin_k_dim"], s["lin_v_heads"], s["lin_v_dim"]
    conv_channels = 2 * kh * kd + vh * vd
    return [(p + "ssm_a", (vh,), Q.F32), (p + "ssm_conv1d.weight", (conv_channels, s["conv"]), Q.F32),
            (p + "ssm_dt.bias", (vh,), Q.F32), (p + "ssm_alpha.weight", (vh, h), Q.F32),
            (p + "ssm_beta.weight", (vh, h), Q.F32), (p + "attn_qkv.weight", (conv_channels, h), main),
            (p + "attn_gate.weight", (vh * vd, h), main), (p + "ssm_norm.weight", (vd,), Q.F32),
            (p + "ssm_out.weight", (h, vh * vd), main)]


def full_attention_specs(s, p, main):
    """A gated full-attention layer: q carries its output gate (2 x heads x head_dim rows), q/k norms."""
    h, hd = s["hidden"], s["head_dim"]
    return [(p + "attn_k_norm.weight", (hd,), Q.F32), (p + "attn_k.weight", (s["kv_heads"] * hd, h), main),
            (p + "attn_output.weight", (h, s["heads"] * hd), main), (p + "attn_q_norm.weight", (hd,), Q.F32),
            (p + "attn_q.weight", (2 * s["heads"] * hd, h), main), (p + "attn_v.weight", (s["kv_heads"] * hd, h), main)]


def moe_specs(s, p, main, down):
    h, e, f, sf = s["hidden"], s["experts"], s["expert_ffn"], s["shared_ffn"]
    return [(p + "ffn_down_exps.weight", (e, h, f), down), (p + "ffn_gate_exps.weight", (e, f, h), main),
            (p + "ffn_up_exps.weight", (e, f, h), main), (p + "ffn_gate_inp.weight", (e, h), Q.F32),
            (p + "ffn_down_shexp.weight", (h, sf), down), (p + "ffn_gate_shexp.weight", (sf, h), main),
            (p + "ffn_up_shexp.weight", (sf, h), main), (p + "ffn_gate_inp_shexp.weight", (1, h), Q.F32)]


def tensor_specs(s, mix_types):
    """(name, shape outermost first, type) of every tensor, in the converter's order."""
    h, main = s["hidden"], mix_types["main"]
    specs = [("output.weight", (s["vocab"], h), mix_types["ends"]),
             ("token_embd.weight", (s["vocab"], h), mix_types["ends"])]
    for b in range(s["layers"]):
        p = f"blk.{b}."
        attention = full_attention_specs if is_full_attention(s, b) else linear_attention_specs
        specs += [(p + "attn_norm.weight", (h,), Q.F32)] + attention(s, p, main)
        specs += moe_specs(s, p, main, mix_types["down"]) + [(p + "post_attention_norm.weight", (h,), Q.F32)]
    return specs + [("output_norm.weight", (h,), Q.F32)]


def write_metadata(w, s):
    """The qwen35moe hyper-parameters (the tokenizer is written by headline_gguf)."""
    for key, value in [("context_length", s["context"]), ("embedding_length", s["hidden"]),
                       ("block_count", s["layers"]), ("attention.head_count", s["heads"]),
                       ("attention.head_count_kv", s["kv_heads"]), ("attention.key_length", s["head_dim"]),
                       ("attention.value_length", s["head_dim"]), ("expert_count", s["experts"]),
                       ("expert_used_count", s["used"]), ("expert_feed_forward_length", s["expert_ffn"]),
                       ("expert_shared_feed_forward_length", s["shared_ffn"]), ("ssm.conv_kernel", s["conv"]),
                       ("ssm.state_size", s["lin_k_dim"]), ("ssm.group_count", s["lin_k_heads"]),
                       ("ssm.time_step_rank", s["lin_v_heads"]), ("ssm.inner_size", s["lin_v_heads"] * s["lin_v_dim"]),
                       ("full_attention_interval", s["interval"]), ("rope.dimension_count", s["rope_dims"])]:
        w.add_uint32(f"{ARCH}.{key}", value)
    w.add_float32(f"{ARCH}.rope.freq_base", s["rope_theta"])
    w.add_float32(f"{ARCH}.attention.layer_norm_rms_epsilon", s["rms_eps"])
    w.add_array(f"{ARCH}.rope.dimension_sections", [11, 11, 10, 0])
    w.add_array(f"{ARCH}.attention.recurrent_layers", [not is_full_attention(s, b) for b in range(s["layers"])])
    w.add_name("qwen3.5-35b-a3b-shaped random (tinkerd bench)")
