#!/usr/bin/env bash
# check-cuda-build.sh CUDA-BINARY [CPU-BINARY]: the CUDA build links and starts. On a machine without a GPU,
# `--device cuda` must stop at start-up with a clear message (exit 1), never crash or serve on the CPU;
# on a machine with one, it must reach "listening" (then it is stopped). CPU-BINARY (build/tinkerd, which
# does not link libtorch_cuda) must refuse `--device cuda` saying it was built without CUDA.
set -uo pipefail
bin="${1:?usage: check-cuda-build.sh BUILD/tinkerd-cuda [BUILD/tinkerd]}"
cpu_bin="${2:-}"
data=$(mktemp -d)
log=$(mktemp)
trap 'rm -rf "$data" "$log"' EXIT

# ldd's output is read whole first: `ldd | grep -q` under pipefail fails at random when grep exits at its
# first match while ldd is still writing (SIGPIPE), which once reported a correctly linked binary as not.
if ! libs=$(ldd "$bin" 2>&1); then
  echo "cuda-check: FAIL: ldd $bin failed: $libs" >&2
  exit 1
fi
if ! grep -q libtorch_cuda <<<"$libs"; then
  echo "cuda-check: FAIL: $bin is not linked against libtorch_cuda" >&2
  exit 1
fi
if grep -q "not found" <<<"$libs"; then
  echo "cuda-check: FAIL: unresolved libraries:" >&2
  grep "not found" <<<"$libs" >&2
  exit 1
fi
if [ -n "$cpu_bin" ]; then
  out=$(timeout 120 "$cpu_bin" --device cuda --port 0 --data-dir "$data" 2>&1); rc=$?
  if [ "$rc" != 1 ] || ! grep -q "built without CUDA" <<<"$out"; then
    echo "cuda-check: FAIL: $cpu_bin --device cuda: exit $rc, expected 1 and 'built without CUDA'; log:" >&2
    echo "$out" >&2
    exit 1
  fi
  echo "cuda-check: OK: $cpu_bin --device cuda stops with: $(grep -m1 'without CUDA' <<<"$out")"
fi
timeout 120 "$bin" --device cuda --port 0 --data-dir "$data" >"$log" 2>&1 &
pid=$!
for _ in $(seq 1 120); do
  if ! kill -0 "$pid" 2>/dev/null; then break; fi
  if grep -q "listening" "$log"; then
    kill "$pid"; wait "$pid" 2>/dev/null
    echo "cuda-check: OK: a GPU is present and tinkerd --device cuda started"
    exit 0
  fi
  sleep 1
done
wait "$pid"; rc=$?
if [ "$rc" = 1 ] && grep -q "no CUDA device is available" "$log"; then
  echo "cuda-check: OK: the CUDA build links; without a GPU --device cuda stops with: $(grep -m1 'CUDA device' "$log")"
  exit 0
fi
echo "cuda-check: FAIL: exit $rc; log:" >&2
cat "$log" >&2
exit 1
