#!/usr/bin/env bash
# Warns, before `make test` starts its hour of work, when the disk holding the checkout has less room than a full
# run from a fresh clone takes (measured 2026-12-07: .venv 6.1 GB, build 1.0 GB, build-asan 3.2 GB, build-fuzz
# 0.3 GB, the default model and llama.cpp 0.2 GB: ~11 GB, plus PostgreSQL's and the tests' scratch). Running out
# part-way fails unrelated tests (a CI run once failed its ASan tier's PostgreSQL tests with ENOSPC). Never fails:
# an incremental run needs much less.
set -euo pipefail
cd "$(dirname "$0")/.."
need_gb=${TINKERD_TEST_DISK_GB:-14}
free_kb=$(df -Pk . | awk 'NR == 2 {print $4}')
free_gb=$((free_kb / 1024 / 1024))
if ((free_gb < need_gb)); then
    echo "WARNING: ${free_gb} GB free on $(df -P . | awk 'NR == 2 {print $6}'); a full make test from a fresh" \
        "clone takes ~${need_gb} GB (venv, build, ASan and fuzz builds). Tests may fail with 'No space left on" \
        "device'." >&2
fi
