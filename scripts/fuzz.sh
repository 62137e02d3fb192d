#!/usr/bin/env bash
# Runs the libFuzzer targets of a TINKERD_FUZZ build: each for SECONDS over its seed corpus
# (fuzz/corpus/<target>/, read only) with its dictionary (fuzz/dict/<target>.dict) when there is one.
# New inputs go to OUT/<target>/ (a scratch folder; pass fuzz/corpus to grow the repo's corpus), crash,
# leak and timeout inputs to OUT/artifacts/. FUZZ_JOBS targets run at once (default 1). Exits non-zero
# when any target fails.
#   scripts/fuzz.sh BUILD_DIR SECONDS OUT [TARGET...]
set -uo pipefail
cd "$(dirname "$0")/.."

BUILD=${1:?build dir}
SECONDS_EACH=${2:?seconds per target}
OUT=${3:?scratch corpus dir}
shift 3
TARGETS=("$@")
if [ ${#TARGETS[@]} -eq 0 ]; then
  TARGETS=(api_json_fuzz openai_request_fuzz wire_fuzz chat_template_fuzz tokenizer_fuzz gguf_fuzz
           safetensors_fuzz model_config_fuzz image_fuzz)
fi

# Longest input per target: the file formats and the tokenizer.json loader need more room than a body.
max_len() {
  case "$1" in
    gguf_fuzz | safetensors_fuzz) echo 32768 ;;
    tokenizer_fuzz | chat_template_fuzz) echo 8192 ;;
    *) echo 4096 ;;
  esac
}

# One target: libFuzzer over its corpus; its log and a "FAILED" marker file stay in OUT for the summary.
run_target() {
  local target=$1 dict=()
  mkdir -p "$OUT/$target"
  rm -f "$OUT/$target.failed"
  [ -f "fuzz/dict/$target.dict" ] && dict=("-dict=fuzz/dict/$target.dict")
  echo "fuzz: $target for ${SECONDS_EACH}s"
  if ! nice -n 10 "$BUILD/fuzz/$target" "$OUT/$target" "fuzz/corpus/$target" "${dict[@]}" \
      -max_total_time="$SECONDS_EACH" -max_len="$(max_len "$target")" -rss_limit_mb=2048 -timeout=10 \
      -print_final_stats=1 -artifact_prefix="$OUT/artifacts/$target-" >"$OUT/$target.log" 2>&1; then
    touch "$OUT/$target.failed"
  fi
}

# FUZZ_JOBS targets at a time (make passes JOBS); each libFuzzer process is single-threaded.
JOBS_AT_ONCE=${FUZZ_JOBS:-1}
mkdir -p "$OUT/artifacts"
for target in "${TARGETS[@]}"; do
  while [ "$(jobs -rp | wc -l)" -ge "$JOBS_AT_ONCE" ]; do wait -n || true; done
  run_target "$target" &
done
wait

failed=()
for target in "${TARGETS[@]}"; do
  if [ -f "$OUT/$target.failed" ]; then
    failed+=("$target")
    tail -n 60 "$OUT/$target.log"
  fi
  grep -E '^stat::number_of_executed_units|^Done [0-9]+ runs' "$OUT/$target.log" | sed "s/^/  $target: /"
done

if [ ${#failed[@]} -gt 0 ]; then
  echo "fuzz: FAILED: ${failed[*]} (inputs in $OUT/artifacts/, logs in $OUT/<target>.log)"
  exit 1
fi
echo "fuzz: all ${#TARGETS[@]} targets ran ${SECONDS_EACH}s each without a crash, leak or timeout"
