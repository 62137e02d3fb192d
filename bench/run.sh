#!/usr/bin/env bash
# `make bench`: generates the seeded SmolLM-135M-shaped models (fp32 and bf16), runs the engine's
# training benchmark and the plain PyTorch (HF+PEFT-style) baseline on the same models and batches,
# and prints one comparison table (bench/report.py). Raw JSON lines are kept in BUILD/bench/results.jsonl.
set -euo pipefail
cd "$(dirname "$0")/.."
BUILD=${1:-build}
PYTHON=${PYTHON:-/usr/bin/python3}
STEPS=${BENCH_STEPS:-3}
MODELS=${BENCH_MODELS:-$BUILD/bench-models}
OUT=$BUILD/bench/results.jsonl
mkdir -p "$MODELS" "$(dirname "$OUT")"
: > "$OUT"

echo "bench: generating models in $MODELS" >&2
"$PYTHON" bench/bench_model.py "$MODELS/smollm135m-f32" --dtype f32 --seed 0
"$PYTHON" bench/bench_model.py "$MODELS/smollm135m-bf16" --dtype bf16 --seed 0

echo "bench: tinkerd engine, bf16 base weights" >&2
"$BUILD/bench/train_bench" "$MODELS/smollm135m-bf16" auto "$STEPS" 2 | tee -a "$OUT"
echo "bench: tinkerd engine, fp32 base weights" >&2
"$BUILD/bench/train_bench" "$MODELS/smollm135m-f32" auto "$STEPS" 2 | tee -a "$OUT"
echo "bench: plain PyTorch eager LoRA step (padded, HF+PEFT style)" >&2
"$PYTHON" bench/pytorch_baseline.py "$MODELS/smollm135m-f32" --steps "$STEPS" | tee -a "$OUT"

"$PYTHON" bench/report.py "$OUT"

echo "bench: Tinker API round trip and 1,000 held retrieve_future polls (tests/e2e load scenario)" >&2
"$PYTHON" tests/e2e/run.py --build "$BUILD" load
