#!/usr/bin/env bash
# Runs clang-tidy (the narrow .clang-tidy allowlist) over the project's sources using BUILD's compile commands.
set -euo pipefail
cd "$(dirname "$0")/.."
BUILD=${1:-build}
TIDY=$(command -v clang-tidy-14 || command -v clang-tidy)
mapfile -t files < <(git ls-files '*.cpp' | grep -v '_test.cpp$')
"$TIDY" -p "$BUILD" --quiet "${files[@]}"
