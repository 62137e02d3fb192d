#!/usr/bin/env bash
# Installs everything tinkerd needs to build, test and run, idempotently:
#   1. Debian packages (apt; only the missing ones);
#   2. .venv: the project's Python virtual environment with the pinned PyPI packages of
#      scripts/requirements.lock (torch 2.15 wheel: libtorch for the C++ build, the references, the SDKs);
#   3. .venv-sdk025: the official tinker SDK 0.25.0 for the e2e tier, over .venv's packages;
#   4. .cache/llamacpp-convert/<version>: llama.cpp's convert_hf_to_gguf.py (+ conversion/, gguf-py/) from the
#      llama-cpp-python sdist (pinned, sha256-checked) for the reference check check_qwen35_gguf.py.
# A stamp (the lock file's hash) makes a second run a no-op.
set -euo pipefail
cd "$(dirname "$0")/.."

PACKAGES=(
  build-essential cmake g++ make pkg-config ccache
  python3 python3-venv python3-dev
  libgtest-dev libgmock-dev libbenchmark-dev
  nlohmann-json3-dev libsqlite3-dev libboost-dev libprotobuf-dev protobuf-compiler libzstd-dev libpcre2-dev libicu-dev
  clang-format-14 clang-tidy-14
  # the fuzz tier (make fuzz-test): clang 14 and its libFuzzer / sanitizer runtimes
  clang-14 libclang-rt-14-dev
  # the PostgreSQL store (--database): libpq to build, the server for the store and e2e tests
  libpq-dev postgresql
  # the console's browser tests (e2e): Debian's chromium driven headless through chromedriver
  chromium chromium-driver fonts-dejavu-core
  # data-parallel training (src/dist): Gloo's headers, which the torch wheel's c10d headers include
  libgloo-dev
  # image chunks (src/vision): PNG and JPEG decoding
  libpng-dev libjpeg62-turbo-dev
  # base64 of image chunks (src/wire/image_chunks.cpp): OpenSSL's decoder
  libssl-dev
)

missing=()
for p in "${PACKAGES[@]}"; do
  if ! dpkg-query -W -f='${Status}' "$p" 2>/dev/null | grep -q "install ok installed"; then
    missing+=("$p")
  fi
done

SUDO=""
if [ "$(id -u)" != "0" ]; then SUDO="sudo"; fi

if [ ${#missing[@]} -gt 0 ]; then
  echo "install-deps: installing ${missing[*]}"
  $SUDO apt-get update -qq
  DEBIAN_FRONTEND=noninteractive $SUDO apt-get install -y -qq --no-install-recommends "${missing[@]}"
else
  echo "install-deps: all Debian packages present"
fi

# Debian's python3 (not a pyenv shim): the venvs must not depend on a user's interpreter.
SYSTEM_PYTHON=/usr/bin/python3
VENV=.venv
LOCK=scripts/requirements.lock
stamp_of() { sha256sum "$@" | sha256sum | cut -c1-16; }

# Refuses to start a large install on a nearly full disk: pip's own failure ("[Errno 28]") comes minutes
# later, half way through, with a partly written venv.
require_free_gib() {
  local need=$1 why=$2 free
  free=$(($(df --output=avail -k . | tail -n 1) / 1048576))
  if [ "$free" -lt "$need" ]; then
    echo "install-deps: only ${free} GiB free on $(df --output=target . | tail -n 1); need about ${need} GiB ($why)" >&2
    exit 1
  fi
}

want=$(stamp_of "$LOCK")
if [ "$(cat "$VENV/.tinkerd-stamp" 2>/dev/null)" != "$want" ]; then
  echo "install-deps: installing the pinned PyPI packages into $VENV (torch wheel ~0.5 GB + CUDA libraries)"
  require_free_gib 10 "the venv takes ~6 GiB, pip's downloads and make test's build trees ~4 more"
  [ -x "$VENV/bin/python" ] || "$SYSTEM_PYTHON" -m venv "$VENV"
  "$VENV/bin/pip" install -q --disable-pip-version-check -r "$LOCK"
  echo "$want" > "$VENV/.tinkerd-stamp"
else
  echo "install-deps: $VENV up to date"
fi

# tinker 0.25.0 cannot share a venv with 0.38.0; .venv-sdk025 holds only it and sees .venv's packages
# (torch, transformers, ...) through a .pth file placed after its own site-packages.
SDK025=.venv-sdk025
want025="$want-0.25.0"
if [ "$(cat "$SDK025/.tinkerd-stamp" 2>/dev/null)" != "$want025" ]; then
  echo "install-deps: installing tinker==0.25.0 into $SDK025"
  [ -x "$SDK025/bin/python" ] || "$SYSTEM_PYTHON" -m venv "$SDK025"
  "$SDK025/bin/pip" install -q --disable-pip-version-check --no-deps tinker==0.25.0
  echo "$want025" > "$SDK025/.tinkerd-stamp"
else
  echo "install-deps: $SDK025 up to date"
fi
# Written on every run: the path names where .venv is now (a moved checkout, or a worktree whose .venv is
# a link, would otherwise keep pointing at a place that is gone).
main_site=$("$VENV/bin/python" -c 'import sysconfig; print(sysconfig.get_paths()["purelib"])')
own_site=$("$SDK025/bin/python" -c 'import sysconfig; print(sysconfig.get_paths()["purelib"])')
echo "$main_site" > "$own_site/zz-tinkerd-main-venv.pth"

# llama.cpp's own HF -> GGUF converter, for the Qwen3.5 GGUF round trip (tests/reference/check_qwen35_gguf.py).
# The same pinned sdist as scripts/build-llamacpp.sh (reused from its cache when there); only the converter's
# Python files are extracted (about 3 MB). Its imports (torch, numpy, transformers, safetensors, yaml) are .venv's.
LLAMACPP_VERSION=0.3.36
LLAMACPP_SDIST=llama_cpp_python-$LLAMACPP_VERSION.tar.gz
LLAMACPP_SHA256=832db0699007f1be95a7e41ef12e88926b02ba836461e36a36372db2760c1a2e
CONVERT_DIR=.cache/llamacpp-convert/$LLAMACPP_VERSION
if [ "$(cat "$CONVERT_DIR/.stamp" 2>/dev/null)" != "$LLAMACPP_SHA256" ]; then
  echo "install-deps: extracting llama.cpp's convert_hf_to_gguf.py (llama-cpp-python $LLAMACPP_VERSION) into $CONVERT_DIR"
  sdist=$HOME/.cache/tinkerd/llamacpp-$LLAMACPP_VERSION/$LLAMACPP_SDIST
  tmp=$(mktemp -d)
  if [ ! -f "$sdist" ] || [ "$(sha256sum "$sdist" | cut -d' ' -f1)" != "$LLAMACPP_SHA256" ]; then
    sdist=$("$VENV/bin/python" scripts/fetch_sdist.py llama-cpp-python "$LLAMACPP_VERSION" "$LLAMACPP_SHA256" "$tmp")
  fi
  if [ "$(sha256sum "$sdist" | cut -d' ' -f1)" != "$LLAMACPP_SHA256" ]; then
    echo "install-deps: error: $LLAMACPP_SDIST does not have sha256 $LLAMACPP_SHA256" >&2
    rm -rf "$tmp"
    exit 1
  fi
  src=llama_cpp_python-$LLAMACPP_VERSION/vendor/llama.cpp
  tar -xzf "$sdist" -C "$tmp" "$src/convert_hf_to_gguf.py" "$src/conversion" "$src/gguf-py" "$src/LICENSE"
  rm -rf "$CONVERT_DIR"
  mkdir -p "$(dirname "$CONVERT_DIR")"
  mv "$tmp/$src" "$CONVERT_DIR"
  rm -rf "$tmp"
  echo "$LLAMACPP_SHA256" > "$CONVERT_DIR/.stamp"
else
  echo "install-deps: $CONVERT_DIR up to date"
fi
