# shellcheck shell=bash
# gpu-run.sh: the `run` half of scripts/gpu-check.sh (sourced by it), executed on the GPU machine: unpacks
# the pack, serves with --device cuda through a wrapper that sets LD_LIBRARY_PATH for the server alone, runs
# each check as one step with its own time limit inside RUN_BUDGET, and writes the report ($OUT/gpu-report.md).
# `run --cpu-dry-run` does the same here with --device cpu, tiny benchmark shapes and .venv's python.

STEP_ROWS=()

# The server as the harness starts it (<build>/tinkerd): the carried libraries, then the machine's torch and
# CUDA libraries, for the server only (python keeps its own environment).
write_wrapper() {
  local build=$1 libpath=$2 name
  for name in tinkerd profile_step reference_test; do
    [ -f "$build/$name.bin" ] || continue
    cat >"$build/$name" <<EOF
#!/bin/sh
LD_LIBRARY_PATH="$libpath\${LD_LIBRARY_PATH:+:\$LD_LIBRARY_PATH}" exec "$build/$name.bin" "\$@"
EOF
    chmod +x "$build/$name"
  done
}

# The kineto profiles of one training step (8 x 512 tokens, gpu_bench's adapter) and of decode at batch 1 and
# 32 on the benchmark's model, each under its own limit; their summaries go to stdout, the traces to OUT.
profile_checks() {
  local build=$1 model=$2 device=$3 out=$4 mode
  [ -x "$build/profile_step" ] || { echo "profile: no profile_step in the pack"; return 1; }
  [ -f "$model/config.json" ] || { echo "profile: no benchmark model at $model"; return 1; }
  for mode in gpu sample; do
    echo "== profile_step $mode"
    TINKERD_BENCH_DEVICE=$device timeout 70 "$build/profile_step" "$model" auto "$mode" 8 2>&1 |
      grep -v '^USDT\|^ERROR:.*DeviceProperties' || echo "profile_step $mode failed"
  done
  echo "profile: done"
}

# The SDK and the OpenAI client as cp312 wheels, into SITE (on PYTHONPATH for the clients only). In a dry run
# here (Python 3.11) the wheels are only checked to install for the GPU machine's Python; .venv has the clients.
install_wheels() {
  local dry=$1 wheels=$2 site=$3
  if [ "$dry" = 1 ]; then
    .venv/bin/python -m pip install -q --disable-pip-version-check --no-index --no-deps --no-compile \
      --only-binary=:all: --python-version "$GPU_PY_VERSION" --implementation cp --target "$site-check" \
      "$wheels"/*.whl && echo "wheels install for Python $GPU_PY_VERSION: $(find "$site-check" -maxdepth 1 -name '*.dist-info' | wc -l) packages"
    return
  fi
  if "$GPU_PYTHON" -m pip --version >/dev/null 2>&1; then
    "$GPU_PYTHON" -m pip install -q --disable-pip-version-check --no-index --no-deps --no-compile --target "$site" \
      "$wheels"/*.whl
  else  # no pip there: a wheel without a .data dir (none of these has one) is its unzipped files
    "$GPU_PYTHON" -c 'import sys, zipfile; [zipfile.ZipFile(w).extractall(sys.argv[1]) for w in sys.argv[2:]]' \
      "$site" "$wheels"/*.whl
  fi
}

# step NAME CAP RESERVE CMD...: runs CMD for at most CAP seconds, and never into the last RESERVE seconds of
# the budget (kept for the steps after it); its output goes to $LOGS/NAME.log, its verdict to the report.
step() {
  local name=$1 cap=$2 reserve=$3
  shift 3
  local left=$((DEADLINE - $(date +%s) - reserve))
  local limit=$((cap < left ? cap : left))
  if [ "$limit" -lt 15 ]; then
    STEP_ROWS+=("| $name | SKIPPED (no time left in the ${RUN_BUDGET} s budget) | | |")
    say "$name: SKIPPED"
    return 0
  fi
  local t0 rc verdict secs
  t0=$(date +%s%N)
  timeout -k 10 "$limit" "$@" >"$LOGS/$name.log" 2>&1 && rc=0 || rc=$?
  secs=$((($(date +%s%N) - t0) / 100000000))
  secs="$((secs / 10)).$((secs % 10))"
  case $rc in
    0) verdict=PASS ;;
    124 | 137) verdict="FAIL (timed out after $limit s)" ;;
    *) verdict="FAIL (exit $rc)" ;;
  esac
  local what
  what=$(grep -E '^(PASS|FAIL) e2e_|^(startup|bench|profile|numerics):|^\[  (PASSED|FAILED) |^  FAIL ' "$LOGS/$name.log" | tail -2 | sort -r | sed 's/^ *//' | tr '\n' ' ' |
    cut -c1-240 | tr '|' '/' || true)
  STEP_ROWS+=("| $name | $verdict | $secs | $what |")
  say "$name: $verdict ($secs s)"
  if [ "$rc" != 0 ]; then tail -n 25 "$LOGS/$name.log" | sed "s/^/    [$name] /" >&2; fi
  return 0
}

# Start-up: the server serves the built-in model on DEVICE (the probe that once crashed on CUDA tensors).
startup_check() {
  local build=$1 device=$2 data pid rc=1
  data=$(mktemp -d)
  "$build/tinkerd" --device "$device" --port 0 --data-dir "$data" >"$data.log" 2>&1 &
  pid=$!
  for _ in $(seq 1 240); do
    if ! kill -0 "$pid" 2>/dev/null; then break; fi
    if grep -q "listening" "$data.log"; then rc=0 && break; fi
    sleep 0.5
  done
  kill "$pid" 2>/dev/null || true
  wait "$pid" 2>/dev/null || true
  cat "$data.log"
  if [ "$rc" = 0 ]; then
    echo "startup: --device $device: $(grep -m1 -o 'loaded.*' "$data.log" | cut -c1-140); listening"
  else
    echo "startup: --device $device did not reach 'listening'"
  fi
  rm -rf "$data" "$data.log"
  return "$rc"
}

report_header() {
  local dry=$1 work=$2 py=$3
  echo "## gpu-check run of $(date -u '+%Y-%m-%d %H:%M UTC')$([ "$dry" = 1 ] && echo ' (CPU dry run: --device cpu, tiny shapes)')"
  echo
  echo '```'
  sed -n '1,4p' "$work/manifest.txt"
  if command -v nvidia-smi >/dev/null; then
    nvidia-smi --query-gpu=name,memory.total,driver_version --format=csv,noheader
  else
    echo "nvidia-smi: none on this machine"
  fi
  local have built
  have=$("$py" -c 'import torch; print(torch.__version__)')
  "$py" -c 'import sys, torch; print("python", sys.version.split()[0], "torch", torch.__version__, "CUDA",
                                     torch.version.cuda, "GPUs", torch.cuda.device_count())'
  echo '```'
  built=$(awk '$1 == "torch" {print $2}' "$work/manifest.txt")
  if [ "${have%%+*}" != "${built%%+*}" ]; then
    echo
    echo "**The binary was built against torch $built, this machine has $have: it will not load. Prepare again with"
    echo "GPU_TORCH=${have%%+*}.**"
  fi
}

write_report() {
  local report=$1 header=$2 bench_md=$3
  {
    cat "$header"
    echo
    echo "| step | result | seconds | last line |"
    echo "|---|---|---:|---|"
    printf '%s\n' "${STEP_ROWS[@]}"
    echo
    if [ -s "$bench_md" ]; then cat "$bench_md"; else echo "(no benchmark table: see the bench step's log)"; fi
  } >"$report"
}

run_checks() {
  local dry=0
  [ "${1:-}" = --cpu-dry-run ] && dry=1
  local scenario_cap=${GPU_SCENARIO_CAP:-150}
  if [ "$dry" = 1 ]; then RUN_BUDGET=${RUN_BUDGET:-1500} scenario_cap=300; else RUN_BUDGET=${RUN_BUDGET:-450}; fi
  DEADLINE=$(($(date +%s) + RUN_BUDGET))
  local out=${OUT:-$REPO/build-gpu-out} work py device site sdk_path="" libpath d
  mkdir -p "$out"
  [ -f "$GPU_PACK/pack.tar.xz" ] || die "no $GPU_PACK/pack.tar.xz (carry it: scripts/gpu-check.sh prepare)"
  work=$(mktemp -d /tmp/tinkerd-gpu.XXXXXX)
  LOGS=$work/logs && mkdir -p "$LOGS"
  if command -v xz >/dev/null; then
    tar -xJf "$GPU_PACK/pack.tar.xz" -C "$work"
  else  # no xz there: Python's lzma
    "${PYTHON:-$GPU_PYTHON}" -c 'import sys, tarfile; tarfile.open(sys.argv[1]).extractall(sys.argv[2], filter="data")' \
      "$GPU_PACK/pack.tar.xz" "$work"
  fi
  if [ "$dry" = 1 ]; then py=${PYTHON:-$REPO/.venv/bin/python} device=cpu; else py=$GPU_PYTHON device=cuda; fi
  site=$("$py" -c 'import os, torch; print(os.path.dirname(os.path.dirname(torch.__file__)))')
  libpath="$work/lib:$site/torch/lib"
  for d in "$site"/nvidia/*/lib; do [ -d "$d" ] && libpath+=":$d"; done
  write_wrapper "$work/build" "$libpath"
  install_wheels "$dry" "$work/wheels" "$work/site" >"$LOGS/wheels.log" 2>&1 || die "wheels: $(tail -5 "$LOGS/wheels.log")"
  [ "$dry" = 1 ] || sdk_path=$work/site
  report_header "$dry" "$work" "$py" >"$work/header.md" 2>&1
  cat "$work/header.md" >&2

  local tiny=()
  [ "$dry" = 1 ] && tiny=(--tiny)
  # The benchmark's model (Qwen3-1.7B's shape, ~4 GB of random bf16 weights) is written while the scenarios run.
  timeout 240 "$py" bench/gpu_bench.py --phase build --build "$work/build" --device "$device" --work "$work/bench" \
    "${tiny[@]}" >"$LOGS/bench_model.log" 2>&1 &
  local model_pid=$!

  step startup 90 300 "$REPO/scripts/gpu-check.sh" startup "$work/build" "$device"
  # The GPU paths' numerics against float64 (bench/gpu_numerics.py): the lm_head split, attention, RMSNorm.
  step numerics 60 300 env PYTHONUNBUFFERED=1 "$py" bench/gpu_numerics.py --device "$device" "${tiny[@]}"
  # The reference tier on the device: the tiny models' fixtures (fp32 bounds; the bf16 case prints its errors).
  if [ -x "$work/build/reference_test" ]; then
    step reference 90 300 env TINKERD_TEST_DEVICE="$device" TINKERD_FIXTURES_DIR="$work/fixtures" \
      "$work/build/reference_test" --gtest_filter='*/0:*/1:*/2'  # the tiny models (3: stories260K)
  fi
  # Kept for the benchmark: two model loads, 8 timed training calls and 4 timed generations per side.
  local profile_reserve=0
  [ -f "$work/build/profile_step.bin" ] && profile_reserve=${PROFILE_RESERVE:-110}
  local s reserve=$((${BENCH_RESERVE:-150} + profile_reserve))
  for s in "${E2E_SCENARIOS[@]}"; do
    local expect=()
    [[ $s == sdk_* ]] && expect=(--expect-sdk "$SDK_VERSION")
    step "e2e_$s" "$scenario_cap" "$reserve" env PYTHONPATH="$sdk_path" PYTHONUNBUFFERED=1 TINKERD_E2E_KEEP=1 \
      TINKERD_SHARED_DIR="$work/shared" TINKERD_E2E_SERVER_ARGS="--device $device" \
      "$py" tests/e2e/run.py --build "$work/build" "${expect[@]}" "$s"
  done
  # The scenarios' server logs (kept: a scenario cut at its time limit prints none), into the logs' tarball.
  mkdir -p "$LOGS/servers" && find /tmp -maxdepth 1 -name 'tinkerd*.log' -size -4M -exec cp {} "$LOGS/servers/" \; || true
  wait "$model_pid" || say "the benchmark model's build failed (bench_model.log); the bench step tries again"
  local bench_left=$((DEADLINE - $(date +%s) - 10 - profile_reserve))
  step bench 400 $((10 + profile_reserve)) env PYTHONUNBUFFERED=1 "$py" bench/gpu_bench.py --build "$work/build" --device "$device" \
    --work "$work/bench" --sdk-path "$sdk_path" --seconds "$((bench_left - 10))" "${tiny[@]}" \
    --jsonl "$out/gpu-bench.jsonl" --markdown "$work/bench.md"

  if [ "$profile_reserve" -gt 0 ]; then
    local model=$work/bench/qwen3-1.7b-shape
    [ "$dry" = 1 ] && model=$work/bench/tiny-qwen3
    step profile "$profile_reserve" 5 "$REPO/scripts/gpu-check.sh" profile "$work/build" "$model" "$device" "$out"
    cp "$LOGS/profile.log" "$out/profile.txt" 2>/dev/null || true
  fi
  write_report "$out/gpu-report.md" "$work/header.md" "$work/bench.md"
  tar -C "$work" -czf "$out/gpu-logs.tar.gz" logs
  cat "$out/gpu-report.md"
  say "report: $out/gpu-report.md, logs: $out/gpu-logs.tar.gz"
  rm -rf "$work"
  ! printf '%s\n' "${STEP_ROWS[@]}" | grep -q '| FAIL'
}
