#!/usr/bin/env bash
# Builds llama.cpp's benchmark tools (llama-bench, llama-batched-bench, and llama-simple for the greedy-text
# check) from the llama.cpp source vendored in PyPI's llama-cpp-python sdist (pinned, sha256-checked), CPU
# only, tuned for this CPU (GGML_NATIVE), no HTTP/TLS, static libraries, into a cache dir:
#   DEST (default ~/.cache/tinkerd/llamacpp-<version>)/bin/{llama-bench,llama-batched-bench,llama-simple}
# Benchmark-only (`make bench`); nothing in `make test` or scripts/install-deps.sh needs it.
# Idempotent: when the three binaries and the stamp of this exact recipe are there, it does nothing.
# Prints the bin directory on its last line. Usage: scripts/build-llamacpp.sh [DEST]
# Env: JOBS (default 2), LLAMACPP_KEEP_SRC=1 keeps the extracted source and build tree (~600 MB).
set -euo pipefail

VERSION=0.3.36   # llama-cpp-python; vendors ggml-org/llama.cpp@0c1e57098
SDIST=llama_cpp_python-$VERSION.tar.gz
SDIST_SHA256=832db0699007f1be95a7e41ef12e88926b02ba836461e36a36372db2760c1a2e
TARGETS=(llama-bench llama-batched-bench llama-simple)
CMAKE_FLAGS=(
    -DCMAKE_BUILD_TYPE=Release -DBUILD_SHARED_LIBS=OFF -DGGML_NATIVE=ON -DGGML_CCACHE=OFF
    -DLLAMA_OPENSSL=OFF -DLLAMA_BUILD_TESTS=OFF -DLLAMA_BUILD_SERVER=OFF -DLLAMA_BUILD_APP=OFF
    -DLLAMA_BUILD_EXAMPLES=ON -DLLAMA_BUILD_TOOLS=ON
    -DLLAMA_BUILD_NUMBER=0 -DLLAMA_BUILD_COMMIT=0c1e57098-pypi-$VERSION
)

ROOT=$(cd "$(dirname "$0")/.." && pwd)
DEST=${1:-$HOME/.cache/tinkerd/llamacpp-$VERSION}
PYTHON=${TINKERD_PYTHON:-$ROOT/.venv/bin/python}
JOBS=${JOBS:-2}
BIN=$DEST/bin
STAMP=$BIN/.recipe
RECIPE="$SDIST $SDIST_SHA256 ${TARGETS[*]} ${CMAKE_FLAGS[*]} $(uname -m) $(grep -m1 -o 'avx512[a-z_0-9]*' /proc/cpuinfo | sort -u | tr '\n' ' ')"

log() { echo "build-llamacpp: $*" >&2; }
sha() { sha256sum "$1" | cut -d' ' -f1; }

have_all() {
    [[ -f "$STAMP" && "$(cat "$STAMP")" == "$RECIPE" ]] || return 1
    for t in "${TARGETS[@]}"; do [[ -x "$BIN/$t" ]] || return 1; done
}

if have_all; then
    log "up to date: $BIN (llama-cpp-python $VERSION)"
    echo "$BIN"
    exit 0
fi

start=$(date +%s)
mkdir -p "$DEST"
if [[ ! -f "$DEST/$SDIST" || "$(sha "$DEST/$SDIST")" != "$SDIST_SHA256" ]]; then
    if [[ ! -x "$PYTHON" ]]; then
        log "error: $PYTHON not found; run scripts/install-deps.sh first (or set TINKERD_PYTHON)"
        exit 1
    fi
    log "downloading the llama-cpp-python $VERSION sdist from PyPI (about 77 MB) ..."
    tmp=$(mktemp -d "$DEST/.dl.XXXXXX")
    trap 'rm -rf "$tmp"' EXIT
    # From PyPI's simple index, sha256-checked (pip download would prepare the sdist's build metadata first).
    "$PYTHON" "$ROOT/scripts/fetch_sdist.py" llama-cpp-python "$VERSION" "$SDIST_SHA256" "$tmp" >&2
    mv "$tmp/$SDIST" "$DEST/$SDIST"
fi
log "sdist ok ($(( $(date +%s) - start )) s)"

SRC=$DEST/src
if [[ ! -f "$SRC/CMakeLists.txt" ]]; then
    log "extracting vendor/llama.cpp ..."
    rm -rf "$SRC" "$DEST/.x"
    mkdir -p "$DEST/.x"
    tar -xzf "$DEST/$SDIST" -C "$DEST/.x" "llama_cpp_python-$VERSION/vendor/llama.cpp"
    mv "$DEST/.x/llama_cpp_python-$VERSION/vendor/llama.cpp" "$SRC"
    rm -rf "$DEST/.x"
fi
for t in tools/llama-bench/llama-bench.cpp tools/batched-bench/batched-bench.cpp examples/simple/simple.cpp; do
    [[ -f "$SRC/$t" ]] || { log "error: the sdist's llama.cpp has no $t"; exit 1; }
done

log "configuring (cmake, Release, GGML_NATIVE=ON, CPU only, no OpenSSL) ..."
nice -n 19 cmake -S "$SRC" -B "$DEST/build" "${CMAKE_FLAGS[@]}" > "$DEST/cmake.log" 2>&1 \
    || { tail -30 "$DEST/cmake.log" >&2; exit 1; }
t_build=$(date +%s)
log "compiling ${TARGETS[*]} with -j$JOBS at nice 19 (about 10-20 min on 2 cores; log: $DEST/build.log) ..."
if ! nice -n 19 cmake --build "$DEST/build" -j"$JOBS" --target "${TARGETS[@]}" > "$DEST/build.log" 2>&1; then
    tail -40 "$DEST/build.log" >&2
    exit 1
fi
mkdir -p "$BIN"
for t in "${TARGETS[@]}"; do install -m 755 "$DEST/build/bin/$t" "$BIN/$t"; done
echo "$RECIPE" > "$STAMP"
end=$(date +%s)
log "built in $(( end - t_build )) s (compile), $(( end - start )) s in all"
if [[ "${LLAMACPP_KEEP_SRC:-0}" != 1 ]]; then
    rm -rf "$SRC" "$DEST/build"
fi
echo "$BIN"
