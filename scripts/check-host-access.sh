#!/usr/bin/env bash
# Fails (printing file:line of each offender) when engine or dist code reads or writes tensor memory from the
# host any other way than through src/engine/host_access.h, whose accessors copy device tensors to the host
# first and refuse non-CPU ones. Exceptions: scripts/host-access-allowlist.txt (path glob, then the reason).
set -euo pipefail
cd "$(dirname "$0")/.."
ALLOWLIST=scripts/host-access-allowlist.txt
# Raw element access: data_ptr (also mutable_/const_), item(), accessors, from_blob, data<T>(), storage().
PATTERN='data_ptr|\.item[[:space:]]*[<(]|accessor[[:space:]]*<|from_blob|\.data[[:space:]]*<|\.storage[[:space:]]*\('

mapfile -t globs < <(sed -e 's/#.*//' -e '/^[[:space:]]*$/d' "$ALLOWLIST" | awk '{print $1}')
allowed() {
    local g
    for g in "${globs[@]}"; do
        # shellcheck disable=SC2053  # the right side is a glob on purpose
        [[ $1 == $g ]] && return 0
    done
    return 1
}

offenders=0
files=0
while IFS= read -r file; do
    files=$((files + 1))
    allowed "$file" && continue
    while IFS= read -r hit; do
        echo "$file:$hit"
        offenders=$((offenders + 1))
    done < <(grep -nE "$PATTERN" "$file" | grep -vE '^[0-9]+:[[:space:]]*//' || true)
done < <(git ls-files --cached --others --exclude-standard 'src/engine/*.cpp' 'src/engine/*.h' 'src/dist/*.cpp' \
    'src/dist/*.h' | sort -u)

if [ "$offenders" -gt 0 ]; then
    echo "check-host-access: $offenders raw tensor-memory access(es) above; use src/engine/host_access.h" \
        "(to_host, host_data, host_value, host_values, host_wrap), or add the file to $ALLOWLIST with a reason" >&2
    exit 1
fi
echo "check-host-access: $files engine/dist files read tensor memory only through host_access.h"
