#!/usr/bin/env bash
# Formats (or with --check, verifies) every C++ file of the project with the pinned clang-format 14.
set -euo pipefail
cd "$(dirname "$0")/.."
FORMAT=$(command -v clang-format-14 || command -v clang-format)
mapfile -t files < <(git ls-files --cached --others --exclude-standard '*.cpp' '*.h' | grep -v '^build')
if [ "${1:-}" = "--check" ]; then
  "$FORMAT" --dry-run -Werror "${files[@]}"
  echo "format-check: ${#files[@]} files formatted correctly"
else
  "$FORMAT" -i "${files[@]}"
fi
