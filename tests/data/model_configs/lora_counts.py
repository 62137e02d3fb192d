#!/usr/bin/env python3
"""LoRA parameter count per rank, per component, from the real config.json files in this folder,
checked against tinker-cookbook's _LORA_PARAMS_PER_RANK_BY_COMPONENT (issue 12, section 2).

Standalone: needs only the Python standard library. When tinker_cookbook is importable (the repo's
.venv has 0.5.8), its table is read too and must agree with the copy below, and
get_lora_param_count(...) is checked for every flag combination.

    .venv/bin/python tests/data/model_configs/lora_counts.py

The target lists and formulas are documented in LORA_TARGETS.md next to this file. Exit status 0
means every computed number equals the cookbook's; any mismatch raises AssertionError.
"""

from __future__ import annotations

import itertools
import json
import sys
from dataclasses import dataclass
from pathlib import Path

HERE = Path(__file__).resolve().parent

# tinker-cookbook 0.5.8, tinker_cookbook/hyperparam_utils.py, _LORA_PARAMS_PER_RANK_BY_COMPONENT.
COOKBOOK = {
    "Qwen/Qwen3-8B": {"mlp": 1_769_472, "attn": 958_464, "unembed": 156_032},
    "Qwen/Qwen3-30B-A3B": {"mlp": 14_450_688, "attn": 835_584, "unembed": 153_984},
    "Qwen/Qwen3.5-4B": {"mlp": 1_130_496, "attn": 897_024, "unembed": 250_880},
    "Qwen/Qwen3.5-27B": {"mlp": 4_325_376, "attn": 2_965_504, "unembed": 253_440},
    "Qwen/Qwen3.5-35B-A3B": {"mlp": 16_281_600, "attn": 1_013_760, "unembed": 250_368},
}


@dataclass(frozen=True)
class Lora:
    """One trained projection. Per rank a LoRA on Linear(in, out) has A [r, in] and B [out, r].

    experts == 0: a plain Linear, in + out per rank.
    experts == E: a stack of E expert Linears with Tinker's "shared-outer" scheme: the factor that
    touches the model hidden size is one tensor shared by the E experts, the other factor is per
    expert. shared == "A" (gate/up: in = hidden): hidden + E*out. shared == "B" (down: out = hidden):
    E*in + hidden.
    """

    component: str  # "attn" | "mlp" | "unembed"
    layer: int  # -1 for the lm_head
    name: str  # module path under the layer, HF naming (Tinker's adapter names in LORA_TARGETS.md)
    fan_in: int
    fan_out: int
    experts: int = 0
    shared: str = ""  # "A" or "B" for experts

    def per_rank(self) -> int:
        if self.experts == 0:
            return self.fan_in + self.fan_out
        if self.shared == "A":
            return self.fan_in + self.experts * self.fan_out
        if self.shared == "B":
            return self.experts * self.fan_in + self.fan_out
        raise ValueError(self)


def text_config(config: dict) -> dict:
    """Qwen3.5 checkpoints (…ForConditionalGeneration) nest the language model under text_config."""
    return config.get("text_config", config)


def family(config: dict) -> str:
    mt = text_config(config)["model_type"]
    return {
        "qwen3": "qwen3",
        "qwen3_moe": "qwen3_moe",
        "qwen3_5_text": "qwen3_5",
        "qwen3_5_moe_text": "qwen3_5_moe",
    }[mt]


def layer_types(tc: dict) -> list[str]:
    if "layer_types" in tc:
        return list(tc["layer_types"])
    interval = tc.get("full_attention_interval", 4)  # transformers' default when layer_types is absent
    return [
        "full_attention" if (i + 1) % interval == 0 else "linear_attention"
        for i in range(tc["num_hidden_layers"])
    ]


def attn_loras(tc: dict, layer: int, gated_q: bool) -> list[Lora]:
    """Softmax attention: q, k, v, o. Qwen3.5's gated attention: q_proj emits query and gate (2x)."""
    h = tc["hidden_size"]
    d = tc.get("head_dim") or h // tc["num_attention_heads"]
    q = tc["num_attention_heads"] * d
    kv = tc["num_key_value_heads"] * d
    return [
        Lora("attn", layer, "self_attn.q_proj", h, q * (2 if gated_q else 1)),
        Lora("attn", layer, "self_attn.k_proj", h, kv),
        Lora("attn", layer, "self_attn.v_proj", h, kv),
        Lora("attn", layer, "self_attn.o_proj", q, h),
    ]


def gdn_loras(tc: dict, layer: int) -> list[Lora]:
    """Gated DeltaNet (Qwen3.5 linear attention). The checkpoint's fused in_proj_qkv is trained as
    three separate LoRAs in_proj_q / in_proj_k / in_proj_v (each with its own A on the hidden side);
    in_proj_z and out_proj are trained; in_proj_a, in_proj_b, conv1d, dt_bias, A_log, norm are not."""
    h = tc["hidden_size"]
    key_dim = tc["linear_num_key_heads"] * tc["linear_key_head_dim"]
    value_dim = tc["linear_num_value_heads"] * tc["linear_value_head_dim"]
    return [
        Lora("attn", layer, "linear_attn.in_proj_q", h, key_dim),
        Lora("attn", layer, "linear_attn.in_proj_k", h, key_dim),
        Lora("attn", layer, "linear_attn.in_proj_v", h, value_dim),
        Lora("attn", layer, "linear_attn.in_proj_z", h, value_dim),
        Lora("attn", layer, "linear_attn.out_proj", value_dim, h),
    ]


def dense_mlp_loras(tc: dict, layer: int, prefix: str, inter: int) -> list[Lora]:
    h = tc["hidden_size"]
    return [
        Lora("mlp", layer, f"{prefix}.gate_proj", h, inter),
        Lora("mlp", layer, f"{prefix}.up_proj", h, inter),
        Lora("mlp", layer, f"{prefix}.down_proj", inter, h),
    ]


def expert_loras(tc: dict, layer: int) -> list[Lora]:
    """Routed experts, shared-outer. The router (mlp.gate) is not trained."""
    h, f, e = tc["hidden_size"], tc["moe_intermediate_size"], tc["num_experts"]
    return [
        Lora("mlp", layer, "mlp.experts.gate_proj", h, f, e, "A"),
        Lora("mlp", layer, "mlp.experts.up_proj", h, f, e, "A"),
        Lora("mlp", layer, "mlp.experts.down_proj", f, h, e, "B"),
    ]


def qwen3_moe_is_sparse(tc: dict, layer: int) -> bool:
    # transformers Qwen3MoeDecoderLayer: sparse iff not in mlp_only_layers and
    # num_experts > 0 and (layer + 1) % decoder_sparse_step == 0.
    return (
        layer not in tc.get("mlp_only_layers", [])
        and tc.get("num_experts", 0) > 0
        and (layer + 1) % tc.get("decoder_sparse_step", 1) == 0
    )


def lora_modules(config: dict) -> list[Lora]:
    tc = text_config(config)
    fam = family(config)
    n = tc["num_hidden_layers"]
    mods: list[Lora] = []
    for i in range(n):
        if fam in ("qwen3", "qwen3_moe"):
            mods += attn_loras(tc, i, gated_q=False)
        else:
            kind = layer_types(tc)[i]
            if kind == "full_attention":
                # attn_output_gate is true in every Qwen3.5 checkpoint; transformers 5.5.4 always
                # builds q_proj with 2x outputs for qwen3_5 / qwen3_5_moe.
                mods += attn_loras(tc, i, gated_q=tc.get("attn_output_gate", True))
            elif kind == "linear_attention":
                mods += gdn_loras(tc, i)
            else:
                raise ValueError(f"unknown layer type {kind!r}")
        if fam == "qwen3" or (fam == "qwen3_moe" and not qwen3_moe_is_sparse(tc, i)):
            mods += dense_mlp_loras(tc, i, "mlp", tc["intermediate_size"])
        elif fam == "qwen3_moe":
            mods += expert_loras(tc, i)
        elif fam == "qwen3_5":
            mods += dense_mlp_loras(tc, i, "mlp", tc["intermediate_size"])
        else:  # qwen3_5_moe: every layer is sparse (Qwen3_5MoeDecoderLayer), plus a shared expert
            assert not tc.get("mlp_only_layers"), "qwen3_5_moe with dense layers: not modelled"
            mods += expert_loras(tc, i)
            # The shared expert is a plain SwiGLU MLP: trained like a dense MLP.
            # Its sigmoid gate (mlp.shared_expert_gate, Linear(hidden, 1)) is not trained.
            mods += dense_mlp_loras(tc, i, "mlp.shared_expert", tc["shared_expert_intermediate_size"])
    # Unembedding (lm_head; Tinker calls it unembed_tokens). Trained even where the checkpoint ties it
    # to embed_tokens (Qwen3.5-4B): the count is the same hidden + vocab.
    mods.append(Lora("unembed", -1, "lm_head", tc["hidden_size"], tc["vocab_size"]))
    return mods


def per_component(mods: list[Lora]) -> dict[str, int]:
    out = {"mlp": 0, "attn": 0, "unembed": 0}
    for m in mods:
        out[m.component] += m.per_rank()
    return out


# ---------------------------------------------------------------------------------------------
# Alternatives that the table rules out (printed so the choice above is shown to be forced).
# Each returns per-component counts under a different assumption.
# ---------------------------------------------------------------------------------------------


def alternatives(config: dict) -> dict[str, dict[str, int]]:
    tc = text_config(config)
    fam = family(config)
    base = lora_modules(config)
    h = tc["hidden_size"]
    alts: dict[str, dict[str, int]] = {}

    def counts(mods):
        return per_component(mods)

    if fam in ("qwen3_moe", "qwen3_5_moe"):
        e = tc["num_experts"]
        # experts without sharing: every expert has its own A and B
        alts["experts: no sharing (E*(in+out))"] = counts(
            [
                Lora(m.component, m.layer, m.name, m.fan_in * m.experts, m.fan_out * m.experts)
                if m.experts
                else m
                for m in base
            ]
        )
        n_sparse = sum(1 for m in base if m.name == "mlp.experts.gate_proj")
        c = counts(base)
        c["mlp"] += n_sparse * (h + e)
        alts["+ router mlp.gate Linear(hidden, E)"] = c
    if fam == "qwen3_5_moe":
        n = tc["num_hidden_layers"]
        c = counts(base)
        c["mlp"] += n * (h + 1)
        alts["+ mlp.shared_expert_gate Linear(hidden, 1)"] = c
        alts["shared expert not trained"] = counts(
            [m for m in base if not m.name.startswith("mlp.shared_expert.")]
        )
    if fam in ("qwen3_5", "qwen3_5_moe"):
        nv = tc["linear_num_value_heads"]
        key_dim = tc["linear_num_key_heads"] * tc["linear_key_head_dim"]
        value_dim = nv * tc["linear_value_head_dim"]
        fused: list[Lora] = []
        for m in base:
            if m.name == "linear_attn.in_proj_q":
                fused.append(Lora("attn", m.layer, "linear_attn.in_proj_qkv", h, 2 * key_dim + value_dim))
            elif m.name in ("linear_attn.in_proj_k", "linear_attn.in_proj_v"):
                continue
            else:
                fused.append(m)
        alts["GDN: one fused in_proj_qkv LoRA (not split q/k/v)"] = counts(fused)
        ab = [Lora("attn", m.layer, f"linear_attn.in_proj_{x}", h, nv) for m in base
              if m.name == "linear_attn.out_proj" for x in ("a", "b")]
        alts["GDN: fused in_proj_qkv + in_proj_a + in_proj_b"] = counts(fused + ab)
        alts["GDN: split q/k/v + in_proj_a + in_proj_b"] = counts(base + ab)
        alts["GDN: in_proj_z not trained"] = counts([m for m in base if m.name != "linear_attn.in_proj_z"])
        alts["GDN: out_proj not trained"] = counts([m for m in base if m.name != "linear_attn.out_proj"])
        alts["full attn: q_proj without the 2x gate"] = counts(
            [
                Lora(m.component, m.layer, m.name, m.fan_in, m.fan_out // 2)
                if m.name == "self_attn.q_proj"
                else m
                for m in base
            ]
        )
    return alts


MODELS = [
    ("Qwen/Qwen3-8B", "Qwen3-8B.json"),
    ("Qwen/Qwen3-30B-A3B", "Qwen3-30B-A3B.json"),
    ("Qwen/Qwen3.5-4B", "Qwen3.5-4B.json"),
    ("Qwen/Qwen3.5-27B", "Qwen3.5-27B.json"),
    ("Qwen/Qwen3.5-35B-A3B", "Qwen3.5-35B-A3B.json"),
]


def cookbook_table() -> tuple[dict, object]:
    """The installed cookbook's table and get_lora_param_count, or (COOKBOOK, None) without it."""
    try:
        from tinker_cookbook import hyperparam_utils as hp  # type: ignore
    except Exception as exc:  # noqa: BLE001 - standalone fallback
        print(f"(tinker_cookbook not importable: {exc!r}; using the inline copy of the table)")
        return COOKBOOK, None
    table = hp._LORA_PARAMS_PER_RANK_BY_COMPONENT
    for name, row in COOKBOOK.items():
        assert table[name] == row, f"inline copy differs from installed cookbook for {name}"
    return table, hp.get_lora_param_count


def breakdown(mods: list[Lora]) -> list[str]:
    """One line per (layer kind, module): count of layers and per-rank size, for the log."""
    seen: dict[tuple[str, str, int], int] = {}
    for m in mods:
        key = (m.component, m.name, m.per_rank())
        seen[key] = seen.get(key, 0) + 1
    lines = []
    for (comp, name, size), count in seen.items():
        lines.append(f"      {comp:7s} {name:32s} x{count:3d}  {size:>10,d}/rank  = {size * count:>12,d}")
    return lines


def main() -> int:
    table, get_count = cookbook_table()
    failures = 0
    for model, fname in MODELS:
        config = json.loads((HERE / fname).read_text())
        mods = lora_modules(config)
        got = per_component(mods)
        want = table[model]
        tc = text_config(config)
        print(f"\n{model}  ({fname}, family {family(config)}, {tc['num_hidden_layers']} layers)")
        for line in breakdown(mods):
            print(line)
        for comp in ("mlp", "attn", "unembed"):
            ok = got[comp] == want[comp]
            failures += not ok
            print(f"   {comp:8s} computed {got[comp]:>12,d}   cookbook {want[comp]:>12,d}   {'OK' if ok else 'MISMATCH'}")
        if get_count is not None:
            for flags in itertools.product([False, True], repeat=3):
                if not any(flags):
                    continue
                mlp, attn, unembed = flags
                expected = get_count(model, lora_rank=32, train_mlp=mlp, train_attn=attn, train_unembed=unembed)
                computed = 32 * (mlp * got["mlp"] + attn * got["attn"] + unembed * got["unembed"])
                assert computed == expected, (model, flags, computed, expected)
            print("   get_lora_param_count(rank=32) equal for all 7 flag combinations")
        for label, alt in alternatives(config).items():
            hit = all(alt[c] == want[c] for c in want)
            print(f"   rejected? {label:52s} mlp {alt['mlp']:>11,d} attn {alt['attn']:>10,d}  "
                  f"{'ALSO MATCHES' if hit else 'no match'}")
    assert failures == 0, f"{failures} component(s) differ from the cookbook table"
    print("\nall 15 components equal the cookbook table")
    return 0


if __name__ == "__main__":
    sys.exit(main())
