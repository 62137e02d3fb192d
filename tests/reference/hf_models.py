# Hugging Face second reference, model side: seeded tiny random Llama / Qwen2 / Qwen3 / Qwen3-MoE / Qwen3.5 /
# Qwen3.5-MoE built by `transformers` from configs (save_pretrained, fp32), stories260K, PEFT LoRA adapters with
# seeded non-zero weights (plus Tinker's three LoRAs on Qwen3.5's fused in_proj_qkv, as forward hooks, and the
# shared-outer expert LoRA of Qwen3.5-MoE, as a replaced experts forward: PEFT has no such modules),
# and the cross-entropy-sum forward/backward through transformers + peft (float64 by default).
import json
import os
import warnings

import torch
from peft import LoraConfig, PeftModel, get_peft_model
from transformers import (AutoModelForCausalLM, LlamaConfig, LlamaForCausalLM, Qwen2Config,
                          Qwen2ForCausalLM, Qwen3_5ForCausalLM, Qwen3_5MoeForCausalLM, Qwen3_5MoeTextConfig,
                          Qwen3_5TextConfig, Qwen3Config, Qwen3ForCausalLM, Qwen3MoeConfig, Qwen3MoeForCausalLM)

ALL_TARGETS = ["q_proj", "k_proj", "v_proj", "o_proj", "gate_proj", "up_proj", "down_proj"]
_COMMON = dict(num_hidden_layers=2, num_key_value_heads=2, max_position_embeddings=128, bos_token_id=1,
               eos_token_id=2, hidden_act="silu")

# name -> (seed, config class, model class, config kwargs, LoRA rank, LoRA targets)
CASES = {
    "hf_llama_tiny": (1101, LlamaConfig, LlamaForCausalLM, dict(
        vocab_size=101, hidden_size=32, intermediate_size=48, num_attention_heads=4, head_dim=8,
        rms_norm_eps=1e-5, tie_word_embeddings=False, rope_parameters={
            "rope_type": "llama3", "rope_theta": 500000.0, "factor": 8.0, "low_freq_factor": 1.0,
            "high_freq_factor": 4.0, "original_max_position_embeddings": 16}), 4, ALL_TARGETS + ["lm_head"]),
    "hf_qwen2_tiny": (1202, Qwen2Config, Qwen2ForCausalLM, dict(
        vocab_size=89, hidden_size=24, intermediate_size=40, num_attention_heads=6, rms_norm_eps=1e-6,
        tie_word_embeddings=False, rope_parameters={"rope_type": "default", "rope_theta": 10000.0}),
        8, ALL_TARGETS),
    "hf_qwen3_tiny": (1303, Qwen3Config, Qwen3ForCausalLM, dict(
        vocab_size=97, hidden_size=32, intermediate_size=40, num_attention_heads=4, head_dim=16,
        rms_norm_eps=1e-6, tie_word_embeddings=True,
        rope_parameters={"rope_type": "default", "rope_theta": 1000000.0}), 4, ALL_TARGETS + ["lm_head"]),
    # Layer 0 sparse (4 experts, top 2, renormalised), layer 1 dense. PEFT has no shared-outer expert LoRA,
    # so the adapter is attention + lm_head here (expert LoRA: finite differences in gradcheck_test).
    "hf_qwen3_moe_tiny": (1505, Qwen3MoeConfig, Qwen3MoeForCausalLM, dict(
        vocab_size=97, hidden_size=32, intermediate_size=40, moe_intermediate_size=24, num_experts=4,
        num_experts_per_tok=2, norm_topk_prob=True, decoder_sparse_step=1, mlp_only_layers=[1],
        num_attention_heads=4, head_dim=16, rms_norm_eps=1e-6, tie_word_embeddings=False,
        rope_parameters={"rope_type": "default", "rope_theta": 1000000.0}), 4,
        ["q_proj", "k_proj", "v_proj", "o_proj", "lm_head"]),
    # Qwen3.5 dense: three Gated DeltaNet layers (HV = 2·HK) then one gated full-attention layer (partial
    # rotary: 8 of 16 dims), tied embeddings. PEFT's targets exclude the fused in_proj_qkv (one PEFT LoRA there
    # is not Tinker's three); add_split_qkv_lora adds those three as hooks.
    "hf_qwen3_5_tiny": (1606, Qwen3_5TextConfig, Qwen3_5ForCausalLM, dict(
        vocab_size=97, hidden_size=32, intermediate_size=40, num_hidden_layers=4, num_attention_heads=4,
        head_dim=16, rms_norm_eps=1e-6, tie_word_embeddings=True,
        layer_types=["linear_attention"] * 3 + ["full_attention"], linear_num_key_heads=2,
        linear_num_value_heads=4, linear_key_head_dim=8, linear_value_head_dim=8, linear_conv_kernel_dim=4,
        rope_parameters={"rope_type": "default", "rope_theta": 1000000.0, "partial_rotary_factor": 0.5}), 4,
        ALL_TARGETS + ["in_proj_z", "out_proj", "lm_head"]),
    # Qwen3.5-MoE: the same mixers, every layer sparse (4 experts of 24, top 2, always renormalised) with a
    # shared expert of 20 behind its sigmoid gate; untied. PEFT's gate/up/down_proj targets are the shared expert's;
    # the routed experts get Tinker's shared-outer LoRA from add_expert_lora (PEFT has no such module).
    "hf_qwen3_5_moe_tiny": (1707, Qwen3_5MoeTextConfig, Qwen3_5MoeForCausalLM, dict(
        vocab_size=97, hidden_size=32, num_hidden_layers=4, num_attention_heads=4, head_dim=16,
        rms_norm_eps=1e-6, tie_word_embeddings=False, moe_intermediate_size=24, shared_expert_intermediate_size=20,
        num_experts=4, num_experts_per_tok=2,
        layer_types=["linear_attention"] * 3 + ["full_attention"], linear_num_key_heads=2,
        linear_num_value_heads=4, linear_key_head_dim=8, linear_value_head_dim=8, linear_conv_kernel_dim=4,
        rope_parameters={"rope_type": "default", "rope_theta": 1000000.0, "partial_rotary_factor": 0.5}), 4,
        ALL_TARGETS + ["in_proj_z", "out_proj", "lm_head"]),
    "hf_stories260K": (1404, None, None, None, 8, ALL_TARGETS + ["lm_head"]),
}
SPLIT_QKV = ("in_proj_q", "in_proj_k", "in_proj_v")  # Tinker's LoRAs on the row slices of in_proj_qkv


def use_eager_experts(model):
    """transformers 5 runs MoE experts with torch's grouped_mm, which has no float64: the references use
    the eager per-expert loop (the same math; routing and weighting are shared code)."""
    if getattr(model.config, "num_experts", None):
        model.config._experts_implementation = "eager"
    return model


def tie_router_rows(model):
    """Experts 1 and 2 of every sparse layer get the same router row, so their probabilities tie exactly
    for every token, and often at the top-k boundary: the engine must pick the expert transformers picks."""
    for layer in model.model.layers:
        gate = getattr(layer.mlp, "gate", None)
        if gate is not None and hasattr(gate, "top_k"):
            gate.weight[2].copy_(gate.weight[1])


def legacy_rope_config(config: dict) -> dict:
    """The same config with rope_theta / rope_scaling spelled the transformers-4 way (as on the Hub)."""
    out = dict(config)
    rope = dict(out.pop("rope_parameters"))
    out["rope_theta"] = rope.pop("rope_theta")
    if "partial_rotary_factor" in rope:  # Qwen3.5: top level in older configs; mrope is text-only identity
        out["partial_rotary_factor"] = rope.pop("partial_rotary_factor")
        rope.pop("mrope_section", None)
        rope.pop("mrope_interleaved", None)
    out["rope_scaling"] = rope if rope.get("rope_type", "default") != "default" else None
    return out


def build_tiny_model(case: str, out_dir: str):
    """Seeded random model written with save_pretrained (fp32) to out_dir/model, plus out_dir/model_compat
    (config.json with legacy rope keys, weights symlinked). -> (model in float32, model dir)."""
    seed, config_cls, model_cls, kwargs, _, _ = CASES[case]
    config = config_cls(**{**_COMMON, **kwargs})
    torch.manual_seed(seed)
    model = use_eager_experts(model_cls(config).float().eval())
    gen = torch.Generator().manual_seed(seed)
    with torch.no_grad():  # HF's N(0, 0.02) init gives near-uniform outputs; make every part matter
        for name, p in model.named_parameters():
            if name.endswith("norm.weight"):  # Qwen3_5RMSNorm scales by (1 + weight); its gated norm by weight
                one_plus = case.startswith("hf_qwen3_5") and not name.endswith("linear_attn.norm.weight")
                p.copy_((0 if one_plus else 1) + 0.1 * torch.randn(p.shape, generator=gen))
            elif p.dim() == 1:
                p.copy_(0.1 * torch.randn(p.shape, generator=gen))
            else:
                p.copy_(0.2 * torch.randn(p.shape, generator=gen))
        if case in ("hf_qwen3_moe_tiny", "hf_qwen3_5_moe_tiny"):
            tie_router_rows(model)
    model_dir = os.path.join(out_dir, "model")
    model.save_pretrained(model_dir, safe_serialization=True)
    compat = os.path.join(out_dir, "model_compat")
    os.makedirs(compat, exist_ok=True)
    with open(os.path.join(model_dir, "config.json")) as f:
        saved = json.load(f)
    with open(os.path.join(compat, "config.json"), "w") as f:
        json.dump(legacy_rope_config(saved), f, indent=2)
    link = os.path.join(compat, "model.safetensors")
    if os.path.lexists(link):
        os.remove(link)
    os.symlink(os.path.join("..", "model", "model.safetensors"), link)
    return model, os.path.abspath(model_dir)


def load_model(model_dir: str):
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        return use_eager_experts(AutoModelForCausalLM.from_pretrained(model_dir, dtype=torch.float32).eval())


def peft_key(param_name: str) -> str:
    """named_parameters name -> PEFT adapter file key (the adapter name dropped)."""
    return param_name.replace(".default.", ".")


def add_seeded_lora(model, rank: int, targets, seed: int):
    """PEFT LoRA (alpha 32, no dropout) with seeded A ~ N(0, 1/sqrt(fan_in)) and B ~ N(0, 0.05), B non-zero
    so the gradients of A are non-trivial. -> (peft model, {PEFT key: initial weight})."""
    cfg = LoraConfig(r=rank, lora_alpha=32, target_modules=list(targets), lora_dropout=0.0, bias="none")
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")  # tied lm_head: PEFT warns about ensure_weight_tying
        peft_model = get_peft_model(model, cfg)
    gen = torch.Generator().manual_seed(seed)
    init = {}
    with torch.no_grad():
        for name, p in peft_model.named_parameters():
            if not p.requires_grad:
                continue
            if ".lora_A." in name:
                p.copy_(torch.randn(p.shape, generator=gen) / p.shape[1] ** 0.5)
            else:
                assert ".lora_B." in name, name
                p.copy_(0.05 * torch.randn(p.shape, generator=gen))
            init[peft_key(name)] = p.detach().float().clone()
    return peft_model, init


def add_split_qkv_lora(peft_model, rank: int, seed: int, alpha: float = 32):
    """Tinker's LoRA of every Gated DeltaNet in_proj_qkv: three LoRAs (in_proj_q/k/v) whose deltas are added to
    the q, k and v row slices of its output, as forward hooks; A ~ N(0, 1/sqrt(fan_in)), B ~ N(0, 0.05).
    -> ({adapter key: leaf tensor requiring grad}, state dict: state["on"] = False turns the hooks off)."""
    gen = torch.Generator().manual_seed(seed)
    params, state = {}, {"on": True}
    for name, module in list(peft_model.named_modules()):
        if not name.endswith("linear_attn.in_proj_qkv"):
            continue
        mixer = peft_model.get_submodule(name.rsplit(".", 1)[0])
        w = module.weight
        pairs = []
        for proj, out in zip(SPLIT_QKV, (mixer.key_dim, mixer.key_dim, mixer.value_dim)):
            a = (torch.randn(rank, w.shape[1], generator=gen) / w.shape[1] ** 0.5).to(w.dtype).requires_grad_()
            b = (0.05 * torch.randn(out, rank, generator=gen)).to(w.dtype).requires_grad_()
            key = name.replace("in_proj_qkv", proj)
            params[peft_key(key + ".lora_A.weight")], params[peft_key(key + ".lora_B.weight")] = a, b
            pairs.append((a, b))

        def hook(_module, inputs, output, pairs=pairs):
            if not state["on"]:
                return output
            x = inputs[0]
            return output + (alpha / rank) * torch.cat([(x @ a.T) @ b.T for a, b in pairs], dim=-1)
        module.register_forward_hook(hook)
    return params, state


def expert_lora_forward(experts, factors, scale):
    """transformers' eager Qwen3_5MoeExperts loop (fused gate_up_proj [E, 2F, C], down_proj [E, C, F]) with the
    shared-outer LoRA deltas: gate/up += s·(x A[0]ᵀ) B[e]ᵀ, down += s·(act A[e]ᵀ) B[0]ᵀ, before the routing weight."""
    (a_gate, b_gate), (a_up, b_up), (a_down, b_down) = factors

    def forward(hidden_states, top_k_index, top_k_weights):
        out = torch.zeros_like(hidden_states)
        for e in range(experts.num_experts):
            token_idx, top_k_pos = torch.where(top_k_index == e)
            if token_idx.numel() == 0:
                continue
            x = hidden_states[token_idx]
            gate, up = torch.nn.functional.linear(x, experts.gate_up_proj[e]).chunk(2, dim=-1)
            gate = gate + scale * (x @ a_gate[0].T) @ b_gate[e].T
            up = up + scale * (x @ a_up[0].T) @ b_up[e].T
            act = experts.act_fn(gate) * up
            y = torch.nn.functional.linear(act, experts.down_proj[e]) + scale * (act @ a_down[e].T) @ b_down[0].T
            out.index_add_(0, token_idx, y * top_k_weights[token_idx, top_k_pos, None])
        return out
    return forward


def add_expert_lora(peft_model, rank: int, seed: int, state, alpha: float = 32):
    """Tinker's shared-outer LoRA on every fused expert stack (mlp.experts with gate_up_proj; transformers 5 fuses
    Qwen3-MoE's too, so call it only for an adapter that trains the MLP): w1 (gate) and w3 (up)
    A [1, R, C] shared, B [E, F, R]; w2 (down) A [E, R, F], B [1, C, R] shared. A ~ N(0, 1/sqrt(fan_in)), B ~
    N(0, 0.05); the experts' forward is replaced while state["on"]. -> {adapter key: leaf tensor requiring grad}."""
    gen = torch.Generator().manual_seed(seed)
    params = {}
    for name, module in list(peft_model.named_modules()):
        if not name.endswith("mlp.experts") or not hasattr(module, "gate_up_proj"):
            continue
        E, two_f, C = module.gate_up_proj.shape
        F, dtype = two_f // 2, module.gate_up_proj.dtype
        shapes = {"w1": ((1, rank, C), (E, F, rank)), "w3": ((1, rank, C), (E, F, rank)),
                  "w2": ((E, rank, F), (1, C, rank))}
        factors = []
        for proj in ("w1", "w3", "w2"):
            a_shape, b_shape = shapes[proj]
            a = (torch.randn(a_shape, generator=gen) / a_shape[-1] ** 0.5).to(dtype).requires_grad_()
            b = (0.05 * torch.randn(b_shape, generator=gen)).to(dtype).requires_grad_()
            params[peft_key(f"{name}.{proj}.lora_A.weight")] = a
            params[peft_key(f"{name}.{proj}.lora_B.weight")] = b
            factors.append((a, b))
        lora_forward, plain_forward = expert_lora_forward(module, factors, alpha / rank), module.forward
        module.forward = lambda *args, f=lora_forward, p=plain_forward: f(*args) if state["on"] else p(*args)
    return params


def load_peft(base_model, adapter_dir: str):
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        return PeftModel.from_pretrained(base_model, adapter_dir).eval()


def full_logprobs(model, tokens):
    """log_softmax of the logits [N, V] and the logits [N, V] for one sequence, in the model's dtype."""
    logits = model(input_ids=torch.tensor([tokens])).logits[0]
    return torch.log_softmax(logits, dim=-1), logits


def ce_sum_and_grads(peft_model, datums, extra=None):
    """loss = -sum over datums of sum_i w_i * logprob(target_i); one forward per datum (no padding).
    extra: {adapter key: leaf tensor} trained outside PEFT (add_split_qkv_lora).
    -> (loss, [per-datum target logprobs], {PEFT key: gradient})."""
    peft_model.zero_grad(set_to_none=True)
    extra = extra or {}
    for t in extra.values():
        t.grad = None
    loss = 0
    lps = []
    for d in datums:
        lp, _ = full_logprobs(peft_model, d["tokens"])
        picked = lp.gather(1, torch.tensor(d["targets"])[:, None])[:, 0]
        loss = loss - (picked * torch.tensor(d["weights"], dtype=lp.dtype)).sum()
        lps.append(picked.detach().clone())
    loss.backward()
    grads = {peft_key(n): p.grad.detach().clone() for n, p in peft_model.named_parameters() if p.requires_grad}
    grads.update({k: t.grad.detach().clone() for k, t in extra.items()})
    return float(loss.detach()), lps, grads


def random_datums(vocab: int, seed: int, lengths=(9, 5, 14)):
    gen = torch.Generator().manual_seed(seed)
    out = []
    for n in lengths:
        w = torch.rand(n, generator=gen)
        w[torch.rand(n, generator=gen) < 0.2] = 0.0
        out.append({"tokens": torch.randint(0, vocab, (n,), generator=gen).tolist(),
                    "targets": torch.randint(0, vocab, (n,), generator=gen).tolist(),
                    "weights": [round(float(x), 6) for x in w]})
    return out
