#!/usr/bin/env python3
# Writes the vision reference fixtures into OUT_DIR/vision/<case>/ (docs/vision.md): a seeded tiny random
# Qwen3-VL saved by transformers (fp32), images drawn by PIL and turned into pixel_values by transformers' own
# Qwen2-VL image processor, and transformers' float64 results: per-token logprobs of datums with 0-2 images of
# different grids, PEFT LoRA gradients of a cross-entropy sum, and greedy generate() tokens of image prompts.
# Usage: .venv/bin/python make_vision_fixtures.py OUT_DIR
import argparse
import json
import os
import sys
import warnings

import numpy as np
import torch
import transformers
from PIL import Image
from safetensors.torch import save_file
from transformers.models.qwen2_vl.image_processing_pil_qwen2_vl import Qwen2VLImageProcessorPil

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
import hf_models as hm  # noqa: E402

IMAGE, START, END = 100, 102, 103
VISION = dict(hidden_size=16, intermediate_size=24, num_heads=2, patch_size=4, spatial_merge_size=2,
              temporal_patch_size=2, out_hidden_size=32, num_position_embeddings=16)
TOKENS = dict(image_token_id=IMAGE, video_token_id=101, vision_start_token_id=START, vision_end_token_id=END,
              tie_word_embeddings=False)
TEXT = dict(vocab_size=120, hidden_size=32, intermediate_size=40, num_attention_heads=4, num_key_value_heads=2,
            head_dim=16, max_position_embeddings=256, rms_norm_eps=1e-6)
ROPE = {"rope_type": "default", "rope_theta": 10000.0, "mrope_section": [4, 2, 2], "mrope_interleaved": True}
DELTANET = dict(layer_types=["linear_attention"] * 3 + ["full_attention"], linear_num_key_heads=2,
                linear_num_value_heads=4, linear_key_head_dim=8, linear_value_head_dim=8, linear_conv_kernel_dim=4)
# name -> seed, config class, model class, config, LoRA targets (PEFT's; Qwen3.5's split in_proj_q/k/v LoRAs are
# hm.add_split_qkv_lora's hooks; no case trains the experts: PEFT has no shared-outer expert LoRA)
CASES = {
    # 3 text layers; 3 vision blocks, deepstack after blocks 0 and 2; a 4x4 position table interpolated to grids
    # of 4..12 patches; mrope sections (4, 2, 2) of head_dim 16's 8 rotary frequencies.
    "vision_qwen3_vl_tiny": (2101, "Qwen3VLConfig", "Qwen3VLForConditionalGeneration", dict(
        text_config=dict(TEXT, num_hidden_layers=3, rope_parameters=ROPE),
        vision_config=dict(VISION, depth=3, deepstack_visual_indexes=[0, 2]), **TOKENS),
        hm.ALL_TARGETS + ["lm_head"]),
    # Every text layer sparse: 4 experts of 24, top 2; deepstack after block 1 only.
    "vision_qwen3_vl_moe_tiny": (2202, "Qwen3VLMoeConfig", "Qwen3VLMoeForConditionalGeneration", dict(
        text_config=dict(TEXT, num_hidden_layers=2, moe_intermediate_size=24, num_experts=4, num_experts_per_tok=2,
                         decoder_sparse_step=1, rope_parameters=ROPE),
        vision_config=dict(VISION, depth=2, deepstack_visual_indexes=[1]), **TOKENS),
        ["q_proj", "k_proj", "v_proj", "o_proj", "lm_head"]),
    # Three Gated DeltaNet layers, one gated attention layer with partial rotary (8 of 16 dims: sections 2, 1, 1);
    # no deepstack.
    "vision_qwen3_5_tiny": (2303, "Qwen3_5Config", "Qwen3_5ForConditionalGeneration", dict(
        text_config=dict(TEXT, num_hidden_layers=4, **DELTANET, rope_parameters=dict(
            ROPE, mrope_section=[2, 1, 1], partial_rotary_factor=0.5)),
        vision_config=dict(VISION, depth=2), **TOKENS), hm.ALL_TARGETS + ["in_proj_z", "out_proj", "lm_head"]),
    # The same hybrid with every MLP sparse (4 experts of 24, top 2) and a shared expert of 20; attention LoRAs.
    "vision_qwen3_5_moe_tiny": (2404, "Qwen3_5MoeConfig", "Qwen3_5MoeForConditionalGeneration", dict(
        text_config=dict({k: v for k, v in TEXT.items() if k != "intermediate_size"}, num_hidden_layers=4,
                         moe_intermediate_size=24, shared_expert_intermediate_size=20, num_experts=4,
                         num_experts_per_tok=2, **DELTANET, rope_parameters=dict(
                             ROPE, mrope_section=[2, 1, 1], partial_rotary_factor=0.5)),
        vision_config=dict(VISION, depth=2), **TOKENS),
        ["q_proj", "k_proj", "v_proj", "o_proj", "in_proj_z", "out_proj", "lm_head"]),
}
RANK = 4


def build_model(case, case_dir):
    seed, config_cls, model_cls, config, _ = CASES[case]
    torch.manual_seed(seed)
    model = getattr(transformers, model_cls)(getattr(transformers, config_cls)(**config)).float().eval()
    for sub in (model.config, model.config.text_config):
        sub._experts_implementation = "eager"  # grouped_mm has no float64
    gen = torch.Generator().manual_seed(seed)
    one_plus = case.startswith("vision_qwen3_5")  # Qwen3_5RMSNorm scales by (1 + weight)
    with torch.no_grad():  # N(0, 0.02) gives near-uniform outputs; make every part matter
        for name, p in model.named_parameters():
            if name.endswith(("norm.weight", "norm1.weight", "norm2.weight")):
                rms = one_plus and "visual" not in name and not name.endswith("linear_attn.norm.weight")
                p.copy_((0 if rms else 1) + 0.1 * torch.randn(p.shape, generator=gen))
            elif p.dim() == 1:
                p.copy_(0.1 * torch.randn(p.shape, generator=gen))
            else:
                p.copy_(0.2 * torch.randn(p.shape, generator=gen))
    model_dir = os.path.abspath(os.path.join(case_dir, "model"))  # the test runs from another directory
    model.save_pretrained(model_dir, safe_serialization=True)
    return model, model_dir


def make_images(seed):
    """Three images with different grids (patch 4, merge 2: sides multiples of 8, no resize): smooth colour
    gradients plus noise, so neighbouring patches differ."""
    rng = np.random.default_rng(seed)
    images = []
    for h, w in [(32, 32), (32, 48), (16, 32)]:
        yy, xx = np.mgrid[0:h, 0:w]
        base = np.stack([xx * 255 / w, yy * 255 / h, (xx + yy) * 127 / (h + w)], -1)
        images.append(Image.fromarray(np.clip(base + rng.normal(0, 40, base.shape), 0, 255).astype(np.uint8)))
    processor = Qwen2VLImageProcessorPil(patch_size=4, temporal_patch_size=2, merge_size=2,
                                         size={"shortest_edge": 64, "longest_edge": 64 * 64})
    out = processor(images=images, return_tensors="pt")
    grids = out["image_grid_thw"].tolist()
    assert grids == [[1, 8, 8], [1, 8, 12], [1, 4, 8]], grids
    sizes = [t * h * w for t, h, w in grids]
    return list(torch.split(out["pixel_values"].float(), sizes)), grids


def sequence(gen, vocab_text, parts):
    """tokens and image placements from parts: an int n (n random text tokens) or an image index."""
    tokens, images = [], []
    for kind, value in parts:
        if kind == "text":
            tokens += torch.randint(0, vocab_text, (value,), generator=gen).tolist()
        else:
            index, count = value
            tokens.append(START)
            images.append({"image": index, "token_offset": len(tokens)})
            tokens += [IMAGE] * count
            tokens.append(END)
    return tokens, images


def hf_forward(model, tokens, images, pixels, grids):
    kwargs = dict(input_ids=torch.tensor([tokens]))
    if images:
        idx = [im["image"] for im in images]
        kwargs["pixel_values"] = torch.cat([pixels[i] for i in idx]).to(model.dtype)
        kwargs["image_grid_thw"] = torch.tensor([grids[i] for i in idx])
        kwargs["mm_token_type_ids"] = (torch.tensor([tokens]) == IMAGE).int()
    return torch.log_softmax(model(**kwargs).logits[0], dim=-1)


def make_case(case, out_dir):
    case_dir = os.path.join(out_dir, case)
    os.makedirs(case_dir, exist_ok=True)
    model, model_dir = build_model(case, case_dir)
    seed, targets = CASES[case][0], CASES[case][4]
    pixels, grids = make_images(seed + 1)
    gen = torch.Generator().manual_seed(seed + 2)
    layouts = [[("text", 3), ("image", (0, 16)), ("text", 5)],
               [("text", 2), ("image", (1, 24)), ("text", 1), ("image", (2, 8)), ("text", 4)],
               [("text", 11)]]
    datums = []
    for parts in layouts:
        tokens, images = sequence(gen, 100, parts)
        n = len(tokens)
        w = torch.rand(n, generator=gen)
        datums.append({"tokens": tokens, "images": images,
                       "targets": torch.randint(0, 100, (n,), generator=gen).tolist(),
                       "weights": [round(float(x), 6) for x in w]})
    model64 = model.double()
    tensors = {}
    with torch.no_grad():
        for d, datum in enumerate(datums):
            tensors[f"base_logprobs/{d}"] = hf_forward(model64, datum["tokens"], datum["images"], pixels, grids)
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        peft64, init = hm.add_seeded_lora(model64, RANK, targets, seed + 3)
    extra, hooks = hm.add_split_qkv_lora(peft64, RANK, seed + 4)  # Qwen3.5's in_proj_q/k/v; else none
    init.update({k: t.detach().float().clone() for k, t in extra.items()})
    loss = lora_grads(peft64, init, extra, datums, pixels, grids, tensors)
    for i, px in enumerate(pixels):
        tensors[f"pixels/{i}"] = px
    samples = make_samples(peft64, hooks, gen, pixels, grids)
    save_file({k: v.float().contiguous() for k, v in tensors.items()}, os.path.join(case_dir, "tensors.safetensors"))
    with open(os.path.join(case_dir, "case.json"), "w") as f:
        json.dump({"model_dir": model_dir, "rank": RANK, "alpha": 32, "targets": targets, "grids": grids,
                   "datums": datums, "expected_loss": float(loss), "samples": samples}, f, indent=1)
    print(f"make_vision_fixtures: {case} written to {case_dir}")


def lora_grads(peft64, init, extra, datums, pixels, grids, tensors):
    """PEFT's float64 LoRA logprobs and cross-entropy-sum gradients (with the extra hooked LoRAs') into tensors
    (engine key names); the loss."""
    peft64.zero_grad(set_to_none=True)
    loss = 0
    for d, datum in enumerate(datums):
        lp = hf_forward(peft64, datum["tokens"], datum["images"], pixels, grids)
        picked = lp.gather(1, torch.tensor(datum["targets"])[:, None])[:, 0]
        loss = loss - (picked * torch.tensor(datum["weights"], dtype=lp.dtype)).sum()
        tensors[f"logprobs/{d}"] = picked.detach().clone()
    loss.backward()
    rename = lambda k: k.replace("model.language_model.layers.", "model.layers.")  # noqa: E731 (engine's keys)
    for name, p in peft64.named_parameters():
        if p.requires_grad:
            tensors["grad/" + rename(hm.peft_key(name))] = p.grad.detach().clone()
    tensors.update({"grad/" + rename(k): t.grad.detach().clone() for k, t in extra.items()})
    tensors.update({"init/" + k: v for k, v in init.items()})  # PEFT's own names: import_adapter accepts them
    return float(loss.detach())


def make_samples(peft64, hooks, gen, pixels, grids):
    """Greedy generate() of two image prompts, base model and adapted, in float64: 8 new tokens each, and the
    smallest gap between the best and second-best logit along the way (how safe the fp32 argmax is)."""
    out = []
    for parts in ([("text", 2), ("image", (0, 16)), ("text", 3)], [("image", (2, 8)), ("text", 2), ("image", (1, 24))]):
        tokens, images = sequence(gen, 100, parts)
        for adapted in (False, True):
            kwargs = dict(input_ids=torch.tensor([tokens]), max_new_tokens=8, do_sample=False,
                          pixel_values=torch.cat([pixels[im["image"]] for im in images]).double(),
                          image_grid_thw=torch.tensor([grids[im["image"]] for im in images]),
                          mm_token_type_ids=(torch.tensor([tokens]) == IMAGE).int(), output_scores=True,
                          return_dict_in_generate=True, eos_token_id=None, pad_token_id=0)
            with torch.no_grad():
                if adapted:
                    result = peft64.generate(**kwargs)
                else:
                    hooks["on"] = False
                    with peft64.disable_adapter():
                        result = peft64.generate(**kwargs)
                    hooks["on"] = True
            gaps = [float(s[0].topk(2).values[0] - s[0].topk(2).values[1]) for s in result.scores]
            out.append({"tokens": tokens, "images": images, "adapted": adapted,
                        "generated": result.sequences[0, len(tokens):].tolist(), "min_gap": min(gaps)})
    return out


def main():
    parser = argparse.ArgumentParser()
    parser.add_argument("out_dir")
    args = parser.parse_args()
    torch.set_num_threads(2)
    out_dir = os.path.join(os.path.abspath(args.out_dir), "vision")  # case.json names the model dir absolutely
    for case in CASES:
        make_case(case, out_dir)


if __name__ == "__main__":
    main()
