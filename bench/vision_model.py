#!/usr/bin/env python3
# Writes a random Qwen3-VL-2B-shaped checkpoint for bench/vision_bench.cpp (docs/vision.md): the full vision
# tower of Qwen3-VL-2B-Instruct (24 blocks of 1024, patch 16, merge 2, deepstack after blocks 5, 11, 17, a 48x48
# position table) and its text model's widths with 4 layers (the tower is what is measured), tied embeddings,
# bf16, seeded. Written once. Usage: .venv/bin/python bench/vision_model.py OUT_DIR
import os
import sys

import torch
from transformers import Qwen3VLConfig, Qwen3VLForConditionalGeneration


def main():
    out = sys.argv[1]
    if os.path.isfile(os.path.join(out, "model.safetensors")):
        print(f"vision_model: {out} exists", file=sys.stderr)
        return
    config = Qwen3VLConfig(
        text_config=dict(vocab_size=151936, hidden_size=2048, intermediate_size=6144, num_hidden_layers=4,
                         num_attention_heads=16, num_key_value_heads=8, head_dim=128, max_position_embeddings=32768,
                         rms_norm_eps=1e-6, tie_word_embeddings=True,
                         rope_parameters={"rope_type": "default", "rope_theta": 5000000.0,
                                          "mrope_section": [24, 20, 20], "mrope_interleaved": True}),
        vision_config=dict(depth=24, hidden_size=1024, intermediate_size=4096, num_heads=16, patch_size=16,
                           spatial_merge_size=2, temporal_patch_size=2, out_hidden_size=2048,
                           num_position_embeddings=2304, deepstack_visual_indexes=[5, 11, 17]),
        image_token_id=151655, video_token_id=151656, vision_start_token_id=151652, vision_end_token_id=151653,
        tie_word_embeddings=True)
    torch.manual_seed(0)
    model = Qwen3VLForConditionalGeneration(config).to(torch.bfloat16)
    model.save_pretrained(out, safe_serialization=True)
    print(f"vision_model: wrote {out}", file=sys.stderr)


if __name__ == "__main__":
    main()
