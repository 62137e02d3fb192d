#!/usr/bin/env bash
# gpu-check.sh: tinkerd's checks on the GPU machine (docs/gpu.md). That machine has Python 3.12 with torch
# 2.11.0+cu130, reaches no registry, and takes at most 64 MiB with a command, so the CUDA binary is built here
# against the same torch, packed with what the machine lacks, and run there:
#   scripts/gpu-check.sh prepare      here: .venv-gpu (torch $GPU_TORCH), the CUDA build (build-gpu), the pack
#                                     (build-gpu-pack/pack.tar.xz); prints the device tool's call
#   scripts/gpu-check.sh venv | build  prepare's first two steps alone
#   scripts/gpu-check.sh pack [BIN]   the pack step alone (BIN: build-gpu/tinkerd; the CPU build's to try it)
#   scripts/gpu-check.sh run          there: unpack, start-up, the e2e SDK and OpenAI scenarios, the benchmark;
#                                     writes $OUT/gpu-report.md (+ gpu-bench.jsonl, gpu-logs.tar.gz)
#   scripts/gpu-check.sh dry-run      here: pack build/tinkerd, then `run --cpu-dry-run` (--device cpu, tiny
#                                     shapes, .venv's python) on it
set -euo pipefail
cd "$(dirname "$0")/.."
REPO=$PWD

# The torch version of the GPU machine: read it there first (`python3 -c 'import torch; print(torch.__version__)'`;
# November 2026: 2.11.0+cu130). A binary linked against another libtorch does not load there.
GPU_TORCH=${GPU_TORCH:-2.11.0}
GPU_PY_VERSION=${GPU_PY_VERSION:-3.12}   # the GPU machine's Python (for the SDK's wheels)
GPU_PYTHON=${GPU_PYTHON:-python3}        # there: /opt/torch/.venv/bin/python3, with torch, transformers, peft
VENV_GPU=${VENV_GPU:-.venv-gpu}          # relative to the checkout, or absolute (another checkout's)
BUILD_GPU=${BUILD_GPU:-build-gpu}
GPU_PACK=${GPU_PACK:-build-gpu-pack}
WHEEL_CACHE=${WHEEL_CACHE:-build-gpu-wheels}
FIXTURES=${FIXTURES:-build/fixtures}     # the reference fixtures the CPU build's `make fixtures` wrote
PACK_LIMIT_MIB=${PACK_LIMIT_MIB:-56}     # 64 MiB travel, less the working tree (~5 MiB)
RUN_BUDGET=${RUN_BUDGET:-}               # seconds for `run`: 450 (within 8 minutes); a CPU dry run 1500
JOBS=${JOBS:-2}
SDK_VERSION=$(sed -n 's/^tinker==//p' scripts/requirements.lock)
E2E_SCENARIOS=(sdk_sft sdk_resume sdk_sample sdk_rl sdk_tenants sdk_dpo sdk_moe sdk_qwen35 openai)
# shellcheck disable=SC2206 # GPU_SCENARIOS: a space-separated subset (a second, shorter run); "none" runs none
[ -n "${GPU_SCENARIOS:-}" ] && E2E_SCENARIOS=(${GPU_SCENARIOS/none/})

die() { echo "gpu-check: $*" >&2; exit 1; }
say() { echo "gpu-check: $*" >&2; }

# ---------------------------------------------------------------- prepare (this CPU machine)

make_venv() {
  [ -x "$VENV_GPU/bin/python" ] || /usr/bin/python3 -m venv "$VENV_GPU"
  local have
  have=$("$VENV_GPU/bin/python" -c 'import torch; print(torch.__version__)' 2>/dev/null || true)
  if [[ "$have" != "$GPU_TORCH"* ]]; then
    say "installing torch==$GPU_TORCH into $VENV_GPU (~3 GB with the CUDA libraries)"
    nice -n 19 "$VENV_GPU/bin/pip" install -q --disable-pip-version-check "torch==$GPU_TORCH"
  fi
  say "$VENV_GPU: torch $("$VENV_GPU/bin/python" -W ignore -c 'import torch; print(torch.__version__, "CUDA", torch.version.cuda)')"
}

build_cuda() {
  cmake -S . -B "$BUILD_GPU" -DCMAKE_BUILD_TYPE=Release -DTINKERD_CUDA=ON -DTINKERD_BUILD_TESTS=ON \
    -DTINKERD_PYTHON="$(cd "$VENV_GPU" && pwd)/bin/python"
  nice -n 19 cmake --build "$BUILD_GPU" -j"$JOBS" --target tinkerd tinkerd_wire_python profile_step reference_test
}

# Libraries BIN needs that the GPU machine lacks: ldd's closure less torch's and CUDA's (the machine's torch
# wheel and driver provide them) and glibc / libstdc++ / libgcc_s (the machine's own are new enough).
pack_libs() {
  local bin=$1 dest=$2 libs soname path
  libs=$(ldd "$bin") || die "ldd $bin failed"
  if grep "not found" <<<"$libs" | grep -v "libcuda\.so"; then die "$bin has unresolved libraries (above)"; fi
  while read -r soname path; do
    case "$path" in
      */torch/lib/* | */nvidia/*) continue ;;
      /usr/local/cuda*) say "from the CUDA toolkit here, from the machine's nvidia wheels there: $soname"; continue ;;
    esac
    case "$soname" in
      libc.so.* | libm.so.* | libmvec.so.* | libpthread.so.* | libdl.so.* | librt.so.* | libresolv.so.* | \
        libutil.so.* | libanl.so.* | libnss_* | ld-linux* | libstdc++.so.* | libgcc_s.so.* | libcuda.so.* | \
        libnvidia*) continue ;;
    esac
    cp -L "$path" "$dest/$soname"
  done < <(awk '$2 == "=>" && $3 ~ /^\// {print $1, $3}' <<<"$libs")
}

# The newest glibc / libstdc++ symbol versions the binary and the carried libraries need.
symbol_versions() {
  objdump -T "$@" 2>/dev/null | grep -oE '\b(GLIBC|GLIBCXX)_[0-9.]+' | sort -u -V |
    awk -F_ '{v[$1] = $2} END {printf "GLIBC %s, GLIBCXX %s", v["GLIBC"], v["GLIBCXX"]}'
}

pack_wheels() {
  local dest=$1 reqs
  reqs=$(.venv/bin/python scripts/gpu-wheels.py --python-version "$GPU_PY_VERSION") || die "gpu-wheels.py failed"
  mkdir -p "$WHEEL_CACHE"
  local platforms=() n
  for n in 17 24 27 28 31 34; do platforms+=(--platform "manylinux_2_${n}_x86_64"); done
  # shellcheck disable=SC2086 # one NAME==VERSION per word
  nice -n 19 .venv/bin/python -m pip download -q --disable-pip-version-check --no-deps --only-binary=:all: \
    --python-version "$GPU_PY_VERSION" --implementation cp "${platforms[@]}" --platform manylinux2014_x86_64 \
    -d "$WHEEL_CACHE" $reqs
  local req name version whl
  for req in $reqs; do
    name=${req%%==*} version=${req##*==}
    whl=$(find "$WHEEL_CACHE" -maxdepth 1 -iname "$(tr - _ <<<"$name")-$version-*.whl" | head -1)
    [ -n "$whl" ] || die "no wheel for $req in $WHEEL_CACHE"
    cp "$whl" "$dest/"
  done
}

shared_models() {
  local d
  for d in "${TINKERD_SHARED_DIR:-}" ../shared /work/shared; do
    if [ -n "$d" ] && [ -d "$d/models" ]; then echo "$d/models"; return; fi
  done
  die "no shared/models (stories260K, tokenizers) beside the checkout; set TINKERD_SHARED_DIR"
}

pack() {
  local bin=${1:-$BUILD_GPU/tinkerd}
  [ -x "$bin" ] || die "no binary at $bin (scripts/gpu-check.sh prepare builds it)"
  local pb2 stage
  pb2=$(dirname "$bin")/python/tinker_public_pb2.py
  [ -f "$pb2" ] || die "no $pb2 (the build's tinkerd_wire_python target)"
  rm -rf "$GPU_PACK" && stage=$GPU_PACK/stage && mkdir -p "$stage"/{build/python,lib,wheels,shared}
  strip -o "$stage/build/tinkerd.bin" "$bin"
  # bench/profile_step (where built): the kineto profile of a training step and of decode on the GPU; the
  # reference tier's reference_test with the tiny models' fixtures (`make fixtures` here writes them)
  local built
  built=$(dirname "$bin")
  [ -x "$built/bench/profile_step" ] && strip -o "$stage/build/profile_step.bin" "$built/bench/profile_step"
  if [ -x "$built/tests/reference/reference_test" ] && [ -d "$FIXTURES/qwen3_tiny" ]; then
    strip -o "$stage/build/reference_test.bin" "$built/tests/reference/reference_test"
    mkdir -p "$stage/fixtures" && cp -r "$FIXTURES"/{llama_tiny,qwen2_tiny,qwen3_tiny} "$stage/fixtures/"
  fi
  cp "$pb2" "$stage/build/python/"
  pack_libs "$bin" "$stage/lib"
  pack_wheels "$stage/wheels"
  cp -r "$(shared_models)" "$stage/shared/models"
  {
    echo "commit $(git rev-parse --short HEAD)$(git diff --quiet HEAD -- src || echo ' (+ uncommitted src changes)')"
    echo "packed $(date -u '+%Y-%m-%d %H:%M UTC') from $bin"
    local libtorch
    libtorch=$(ldd "$bin" | awk '/libtorch_cpu/ {print $3}')
    echo "torch $(sed -n "s/^__version__ = '\(.*\)'/\1/p" "$(dirname "$libtorch")/../version.py") ($libtorch)"
    echo "needs $(symbol_versions "$stage/build/tinkerd.bin" "$stage"/lib/*)"
    echo "libs $(find "$stage/lib" -type f -printf '%f ' | tr -s ' ')"
    echo "wheels $(find "$stage/wheels" -type f -printf '%f ')"
  } >"$stage/manifest.txt"
  tar -C "$stage" -cf - . | nice -n 19 xz -9 -T1 >"$GPU_PACK/pack.tar.xz"
  rm -rf "$stage"
  local mib
  mib=$(du -m "$GPU_PACK/pack.tar.xz" | cut -f1)
  say "$GPU_PACK/pack.tar.xz: $(du -h "$GPU_PACK/pack.tar.xz" | cut -f1) ($(tar -tJf "$GPU_PACK/pack.tar.xz" | grep -c '^./lib/.') libs, $(tar -tJf "$GPU_PACK/pack.tar.xz" | grep -c '^./wheels/.') wheels)"
  [ "$mib" -lt "$PACK_LIMIT_MIB" ] || die "the pack is ${mib} MiB, over $PACK_LIMIT_MIB MiB"
}

print_call() {
  cat <<EOF
gpu-check: ready. From this checkout (the one the session started in), call the device tool once:
  run(command="scripts/gpu-check.sh run", carry=["$GPU_PACK"], timeout_s=540)
then copy the returned gpu-report.md into docs/gpu.md's Results (and call give_back). The binary is built against
torch $GPU_TORCH; the report's header says so in bold if the machine's torch differs.
EOF
}

prepare() {
  make_venv
  build_cuda
  pack "$BUILD_GPU/tinkerd"
  print_call
}

# ---------------------------------------------------------------- run (the GPU machine)
. "$REPO/scripts/gpu-run.sh"

case "${1:-}" in
  prepare) prepare ;;
  venv) make_venv ;;
  build) build_cuda ;;
  pack) shift; pack "$@" ;;
  run) shift; run_checks "$@" ;;
  # single steps of `run` (under `timeout`, which needs a command)
  startup) shift; startup_check "$@" ;;
  profile) shift; profile_checks "$@" ;;
  dry-run)
    GPU_PACK=build-gpu-dry-pack pack "${BUILD:-build}/tinkerd"
    GPU_PACK=build-gpu-dry-pack run_checks --cpu-dry-run ;;
  *) sed -n '2,12p' "$0" | sed 's/^# \{0,1\}//'; exit 2 ;;
esac
