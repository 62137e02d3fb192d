#!/usr/bin/env bash
# Runs clang-tidy (the narrow .clang-tidy allowlist) over the torch-free modules (src/common, src/model)
# using BUILD's compile commands. The engine's TUs are left out: they are compiled by g++ with a
# precompiled <torch/torch.h> that clang cannot read, and libtorch's headers alone raise ~15k warnings.
set -euo pipefail
cd "$(dirname "$0")/.."
BUILD=${1:-build}
TIDY=$(command -v clang-tidy-14 || command -v clang-tidy)
mapfile -t files < <(git ls-files 'src/common/*.cpp' 'src/model/*.cpp' | grep -v '_test.cpp$')
"$TIDY" -p "$BUILD" --quiet "${files[@]}"
echo "tidy: ${#files[@]} files checked"
