#!/usr/bin/env bash
# docs/env.md lists every ZT_* environment variable the product's code reads. This test finds
# them in the source (the rows X(ID, "ZT_...", ...) of common/settings.h's table, through which
# the code reads them, and any getenv("ZT_...") left beside it) and fails naming each one that
# docs/env.md lacks, and each table row of docs/env.md that names a variable the code no longer
# reads. tests/common/test_settings.c holds the words of each row to the table.
set -euo pipefail
src="${ZT_SOURCE_DIR:?set ZT_SOURCE_DIR to the repository root}"
doc="$src/docs/env.md"
dirs=(agent cli common coordinator engine kernels proto)

if [[ ! -f "$doc" ]]; then
  echo "FAIL: $doc is missing"
  echo "0 passed, 1 failed"
  exit 1
fi

read_names=$(cd "$src" && grep -rhoE \
  --include='*.c' --include='*.h' --include='*.cu' --include='*.cuh' --include='*.cc' --include='*.cpp' \
  -e 'getenv\("ZT_[A-Z0-9_]+"' \
  -e 'X\([A-Z0-9_]+, "ZT_[A-Z0-9_]+"' \
  "${dirs[@]}" | grep -oE 'ZT_[A-Z0-9_]+' | sort -u)

passed=0
failed=0
count=$(printf '%s\n' "$read_names" | grep -c . || true)
if (( count < 20 )); then
  echo "FAIL: found only $count ZT_* variables read in ${dirs[*]}: has the way the code reads them changed?"
  failed=$((failed + 1))
fi

for name in $read_names; do
  if grep -qF "\`$name\`" "$doc"; then
    passed=$((passed + 1))
  else
    echo "FAIL: the code reads $name but docs/env.md does not list it ($(cd "$src" && grep -rlE --include='*.c' --include='*.h' --include='*.cu' "\"$name\"" "${dirs[@]}" | tr '\n' ' '))"
    failed=$((failed + 1))
  fi
done

# every variable in a table row of docs/env.md is one the code reads
for name in $(grep -oE '^\| `ZT_[A-Z0-9_]+`' "$doc" | grep -oE 'ZT_[A-Z0-9_]+' | sort -u); do
  if grep -qx "$name" <<<"$read_names"; then
    passed=$((passed + 1))
  else
    echo "FAIL: docs/env.md lists $name but no code in ${dirs[*]} reads it"
    failed=$((failed + 1))
  fi
done

echo "$passed passed, $failed failed"
(( failed == 0 ))
