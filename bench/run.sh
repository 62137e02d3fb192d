#!/usr/bin/env bash
# `make bench`: builds llama.cpp's benchmark tools once (scripts/build-llamacpp.sh: PyPI's llama-cpp-python
# sdist, cached in ~/.cache/tinkerd; BENCH_LLAMACPP=0 skips llama.cpp), writes the bench models from the
# real SmolLM2-135M-Instruct weights (bench/real_model.py: the pinned Q4_1 GGUF dequantised, as fp32 and
# bf16 HF dirs for tinkerd/PyTorch and bf16/f32 GGUFs for llama.cpp), runs the engine's training
# benchmark and the plain PyTorch (HF+PEFT-style) baseline on the same models and batches, and prints one
# comparison table (bench/report.py); then the sampling benchmark of tinkerd, plain PyTorch and llama.cpp
# on the same weights in this run, and its table (bench/sample_report.py); the server's streamed decode against
# the engine alone (bench/openai_stream_bench.py). Raw JSON lines:
# BUILD/bench/results.jsonl and BUILD/bench/sample_results.jsonl.
# Opt-in parts (env vars, off by default): BENCH_MOE=1 (Qwen3-MoE, 2 layers), BENCH_QWEN35=1 (Qwen3.5, 4 layers),
# BENCH_HEADLINE=1 (the QLoRA headline, bench/qlora_headline.py: a Qwen3-30B-A3B-shaped all-Q4_K GGUF, ~18 GB
# written once into ~/.cache/tinkerd/bench/ (needs its size + 4 GB free), llama-bench decode vs tinkerd serving it with
# quantised base weights through the tinker SDK; BENCH_HEADLINE_ARGS adds flags, e.g. "--tiny", or "--family
# qwen35moe" for the Qwen3.5-35B-A3B-shaped file, 19.6 GB), BENCH_VISION=1
# (the Qwen3-VL-2B-shaped vision tower, bench/vision_bench.cpp).
set -euo pipefail
cd "$(dirname "$0")/.."
BUILD=${1:-build}
PYTHON=${PYTHON:-.venv/bin/python}
STEPS=${BENCH_STEPS:-3}
MODELS=${BENCH_MODELS:-$BUILD/bench-models}
OUT=$BUILD/bench/results.jsonl
mkdir -p "$MODELS" "$(dirname "$OUT")"
: > "$OUT"

LLAMACPP=${BENCH_LLAMACPP:-1}
if [[ "$LLAMACPP" != 0 ]]; then
    echo "bench: llama.cpp benchmark tools (built once from PyPI's llama-cpp-python sdist)" >&2
    LLAMACPP_BIN=$(scripts/build-llamacpp.sh | tail -1)
fi

echo "bench: SmolLM2-135M-Instruct (the pinned default model, Q4_1 GGUF dequantised) in $MODELS" >&2
GGUF=$(scripts/fetch-default-model.sh | tail -1)
"$PYTHON" bench/real_model.py "$MODELS" --gguf "$GGUF" --gguf-tool "$BUILD/src/gguf/gguf_tool"

echo "bench: tinkerd engine, bf16 base weights (--matmul auto: the path chosen by timing, printed)" >&2
"$BUILD/bench/train_bench" "$MODELS/smollm135m-bf16" auto "$STEPS" 2 | tee -a "$OUT"
echo "bench: tinkerd engine, bf16 base weights, --matmul exact (fp32 math)" >&2
TINKERD_MATMUL=exact "$BUILD/bench/train_bench" "$MODELS/smollm135m-bf16" auto "$STEPS" 2 | tee -a "$OUT"
echo "bench: tinkerd engine, fp32 base weights" >&2
"$BUILD/bench/train_bench" "$MODELS/smollm135m-f32" auto "$STEPS" 2 | tee -a "$OUT"
echo "bench: optim_step (AdamW) alone on a rank-32 SmolLM2-135M adapter (goal <= 10 ms)" >&2
"$BUILD/bench/optim_bench" 20 2 >&2
echo "bench: plain PyTorch eager LoRA step (padded, HF+PEFT style)" >&2
"$PYTHON" bench/pytorch_baseline.py "$MODELS/smollm135m-f32" --steps "$STEPS" | tee -a "$OUT"

"$PYTHON" bench/report.py "$OUT"

# Sampling (issue 4): decode at batch 1/8/32 (base, one adapter, 8 adapters mixed), prefill 256/512 and
# time to first token, against the read-bandwidth bound measured in the same run, plain PyTorch and llama.cpp
# (same weights, same run).
SAMPLE_OUT=$BUILD/bench/sample_results.jsonl
SAMPLE_TOKENS=${BENCH_SAMPLE_TOKENS:-128}
: > "$SAMPLE_OUT"
for w in bf16 f32; do
    echo "bench: tinkerd sampling, $w base weights" >&2
    "$BUILD/bench/sample_bench" "$MODELS/smollm135m-$w" auto --max-tokens "$SAMPLE_TOKENS" | tee -a "$SAMPLE_OUT"
done
for w in bf16 f32; do
    echo "bench: plain PyTorch greedy loop with a KV cache, $w weights" >&2
    "$PYTHON" bench/pytorch_sample_baseline.py "$MODELS/smollm135m-$w" --max-tokens "$SAMPLE_TOKENS" \
        --check "$SAMPLE_OUT" | tee -a "$SAMPLE_OUT"
done
if [[ "$LLAMACPP" != 0 ]]; then
    echo "bench: llama.cpp on the same weights (bf16 and f32 GGUF), decode batch 1/8/32 and prefill" >&2
    "$PYTHON" bench/llamacpp_bench.py "$LLAMACPP_BIN" "$MODELS" --max-tokens "$SAMPLE_TOKENS" | tee -a "$SAMPLE_OUT"
    echo "bench: greedy text of llama.cpp and tinkerd on the same weights" >&2
    "$PYTHON" bench/llamacpp_check.py "$BUILD" "$LLAMACPP_BIN" "$MODELS" | tee -a "$SAMPLE_OUT"
fi
"$PYTHON" bench/sample_report.py "$SAMPLE_OUT"

echo "bench: Tinker API round trip and 1,000 held retrieve_future polls (tests/e2e load scenario)" >&2
"$PYTHON" tests/e2e/run.py --build "$BUILD" load

echo "bench: OpenAI /v1/completions, 1/16/64 concurrent clients (stories260K, 8 tokens each)" >&2
"$PYTHON" bench/openai_load.py "$BUILD" --seconds "${BENCH_OPENAI_SECONDS:-10}"

# The server's own decode against the engine alone (sample_bench) on the same weights: the in-process benchmarks
# above cannot see the server's threads (the OpenMP pools that halved its decode: docs/benchmarks.md).
echo "bench: streamed /v1/completions vs the engine alone, SmolLM2-135M bf16 (bench/openai_stream_bench.py)" >&2
"$PYTHON" bench/openai_stream_bench.py "$BUILD" --models "$MODELS" --weights bf16 --max-tokens 128 --concurrency 1,16

# Qwen3-MoE (issue 12): a Qwen3-30B-A3B-shaped model cut to 2 layers, bf16 (~3.7 GB written once, ~10 min per
# run on 2 cores), tinkerd vs transformers eager and grouped_mm in the same run. Opt in with BENCH_MOE=1.
if [[ "${BENCH_MOE:-0}" != 0 ]]; then
    echo "bench: Qwen3-MoE, 2 layers of Qwen3-30B-A3B (bench/moe_bench.py)" >&2
    "$PYTHON" bench/moe_bench.py "$MODELS/qwen3moe-30b-a3b-2l" --build "$BUILD" --steps "$STEPS"
fi

# Qwen3.5 (issue 12): the Qwen3.5-4B text config cut to 4 layers (3 Gated DeltaNet + 1 gated attention), bf16
# (~2.1 GB written once), tinkerd vs transformers eager in the same run, and the Gated DeltaNet layer's time for
# 256..4096 tokens (linear growth). Opt in with BENCH_QWEN35=1 (BENCH_QWEN35_CONFIG=27B for the 27B shapes).
if [[ "${BENCH_QWEN35:-0}" != 0 ]]; then
    Q35_CONFIG="${BENCH_QWEN35_CONFIG:-4B}"
    echo "bench: Qwen3.5-$Q35_CONFIG, 4 layers (bench/qwen35_bench.py)" >&2
    "$PYTHON" bench/qwen35_bench.py "$MODELS/qwen35-${Q35_CONFIG,,}-4l" --config "$Q35_CONFIG" --build "$BUILD" \
        --steps "$STEPS"
fi

# The QLoRA headline (Qwen3-30B-A3B-shaped Q4_K_M-like GGUF, random weights): llama.cpp's llama-bench decode and
# tinkerd's load / LoRA step / decode / peak RSS with the GGUF's base weights kept quantised. Opt in with
# BENCH_HEADLINE=1 (~18 GB file written once; BENCH_HEADLINE_ARGS="--tiny" for a 2-layer check of the pipeline,
# "--mix q4_k_m" for the 19.9 GB Q4_K_M-like file).
if [[ "${BENCH_HEADLINE:-0}" != 0 ]]; then
    echo "bench: QLoRA headline, Qwen3-30B-A3B-shaped Q4_K GGUF (bench/qlora_headline.py)" >&2
    HEADLINE_BIN=()
    if [[ "$LLAMACPP" != 0 ]]; then
        HEADLINE_BIN=(--llamacpp-bin "$LLAMACPP_BIN")
    else
        HEADLINE_BIN=(--skip-llamacpp)
    fi
    # shellcheck disable=SC2086 # BENCH_HEADLINE_ARGS is a list of flags
    "$PYTHON" bench/qlora_headline.py --build "$BUILD" "${HEADLINE_BIN[@]}" ${BENCH_HEADLINE_ARGS:-}
fi

# The vision tower (issue 27, docs/vision.md): a Qwen3-VL-2B-shaped random checkpoint (the full vision tower, 4 text
# layers; ~2 GB bf16 written once), base forwards with a 224² / 448² / 896² image (BENCH_VISION_SIDES) against the
# same datum in text, and the peak RSS. Opt in with BENCH_VISION=1.
if [[ "${BENCH_VISION:-0}" != 0 ]]; then
    echo "bench: Qwen3-VL-2B-shaped vision tower (bench/vision_model.py, bench/vision_bench)" >&2
    "$PYTHON" bench/vision_model.py "$MODELS/qwen3-vl-2b-shaped"
    # shellcheck disable=SC2086 # a list of sides
    "$BUILD/bench/vision_bench" "$MODELS/qwen3-vl-2b-shaped" 3 ${BENCH_VISION_SIDES:-224 448 896} |
        tee "$BUILD/bench/vision_results.jsonl"
fi
