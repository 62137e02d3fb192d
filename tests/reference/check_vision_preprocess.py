"""Image chunk preprocessing vs Hugging Face's own Qwen-VL image processor (its PIL backend,
Qwen2VLImageProcessorPil, which Qwen3-VL and Qwen3.5 use too). Images are made here with PIL (seeded noise and gradients,
every PNG colour mode, JPEG 4:2:0 / 4:4:4 / greyscale), at sizes that upscale, downscale and keep; each
goes through vision_preprocess_tool and through the processor. PNGs must match to the bit; JPEGs are
decoded by two builds of libjpeg-turbo (Debian's and PIL's wheel), whose ISLOW IDCT agree, so they must too.

usage: check_vision_preprocess.py TOOL WORK_DIR
"""
import json
import subprocess
import sys
from pathlib import Path

import numpy as np
from PIL import Image
from transformers.models.qwen2_vl.image_processing_pil_qwen2_vl import Qwen2VLImageProcessorPil

CONFIGS = {
    # Qwen3-VL's processor, with a small pixel budget so that large images are scaled down.
    "qwen3vl": ({"patch_size": 16, "spatial_merge_size": 2, "temporal_patch_size": 2},
                {"image_processor_type": "Qwen2VLImageProcessor", "patch_size": 16, "merge_size": 2,
                 "temporal_patch_size": 2, "image_mean": [0.5, 0.5, 0.5], "image_std": [0.5, 0.5, 0.5],
                 "size": {"shortest_edge": 4096, "longest_edge": 65536}}),
    # Qwen2-VL's: patch 14, CLIP normalisation, min/max_pixels spelt the old way.
    "qwen2vl": ({"patch_size": 14, "spatial_merge_size": 2, "temporal_patch_size": 2},
                {"image_processor_type": "Qwen2VLImageProcessor", "patch_size": 14, "merge_size": 2,
                 "temporal_patch_size": 2, "min_pixels": 3136, "max_pixels": 50176,
                 "image_mean": [0.48145466, 0.4578275, 0.40821073],
                 "image_std": [0.26862954, 0.26130258, 0.27577711]}),
}


def make_model_dir(root: Path, name: str) -> Path:
    vision, pre = CONFIGS[name]
    d = root / name
    d.mkdir(parents=True, exist_ok=True)
    (d / "config.json").write_text(json.dumps({"model_type": "qwen3_vl", "image_token_id": 151655,
                                               "vision_start_token_id": 151652, "vision_config": vision}))
    (d / "preprocessor_config.json").write_text(json.dumps(pre))
    return d


def make_images(root: Path):
    rng = np.random.default_rng(1234)
    out = []
    for w, h in [(37, 53), (300, 200), (64, 64), (211, 97), (90, 512)]:
        yy, xx = np.mgrid[0:h, 0:w]
        base = np.stack([xx * 255 // max(w - 1, 1), yy * 255 // max(h - 1, 1), (xx + yy) % 256], -1)
        noise = rng.integers(0, 64, size=(h, w, 3))
        rgb = Image.fromarray(((base + noise) % 256).astype(np.uint8), "RGB")
        variants = {
            "rgb.png": (rgb, "PNG", {}), "rgba.png": (rgb.convert("RGBA"), "PNG", {}),
            "l.png": (rgb.convert("L"), "PNG", {}), "la.png": (rgb.convert("LA"), "PNG", {}),
            "p.png": (rgb.convert("P"), "PNG", {}),
            "q90.jpeg": (rgb, "JPEG", {"quality": 90}),
            "444.jpeg": (rgb, "JPEG", {"quality": 95, "subsampling": 0}),
            "grey.jpeg": (rgb.convert("L"), "JPEG", {"quality": 85}),
        }
        for suffix, (img, fmt, kw) in variants.items():
            path = root / f"{w}x{h}-{suffix}"
            img.save(path, fmt, **kw)
            out.append((path, "png" if fmt == "PNG" else "jpeg"))
    return out


def run_tool(tool: str, model_dir: Path, image: Path, fmt: str, out: Path):
    subprocess.run([tool, str(model_dir), str(image), fmt, str(out)], check=True)
    raw = out.read_bytes()
    grid_t, grid_h, grid_w, tokens = np.frombuffer(raw[:32], dtype=np.int64)
    pixels = np.frombuffer(raw[32:], dtype=np.float32).reshape(grid_t * grid_h * grid_w, -1)
    return (int(grid_t), int(grid_h), int(grid_w)), int(tokens), pixels


def main() -> int:
    tool, root = sys.argv[1], Path(sys.argv[2])
    root.mkdir(parents=True, exist_ok=True)
    images = make_images(root)
    failures, checked, worst = 0, 0, 0.0
    for name in CONFIGS:
        model_dir = make_model_dir(root, name)
        processor = Qwen2VLImageProcessorPil.from_pretrained(str(model_dir))
        for path, fmt in images:
            ref = processor(images=[Image.open(path)], return_tensors="np")
            ref_grid = tuple(int(v) for v in ref["image_grid_thw"][0])
            grid, tokens, pixels = run_tool(tool, model_dir, path, fmt, root / "out.bin")
            diff = float(np.abs(pixels - ref["pixel_values"]).max()) if grid == ref_grid else float("inf")
            expected_tokens = processor.get_number_of_image_patches(
                Image.open(path).height, Image.open(path).width, {}) // processor.merge_size ** 2
            checked += 1
            worst = max(worst, diff)
            if grid != ref_grid or diff != 0.0 or tokens != expected_tokens:
                failures += 1
                print(f"MISMATCH {name} {path.name}: grid {grid} vs {ref_grid}, tokens {tokens} vs "
                      f"{expected_tokens}, max |diff| {diff}")
    print(f"vision preprocessing: {checked} image/processor pairs, {failures} mismatches, max |diff| {worst}")
    if checked == 0:
        print("no images were checked")
        return 1
    return 1 if failures else 0


if __name__ == "__main__":
    sys.exit(main())
