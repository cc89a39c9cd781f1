#!/usr/bin/env bash
# docs/deepspeed.md is what `zctl plan --deepspeed-keys` prints from the key table in
# common/dsconfig.c: regenerate it with that command when the table changes.
set -euo pipefail
want="$ZT_SOURCE_DIR/docs/deepspeed.md"
got=$(mktemp)
trap 'rm -f "$got"' EXIT
"$ZT_BIN/zctl" plan --deepspeed-keys > "$got"
if ! diff -u "$want" "$got"; then
  echo "FAIL: docs/deepspeed.md differs from 'zctl plan --deepspeed-keys'; regenerate it with: build/bin/zctl plan --deepspeed-keys > docs/deepspeed.md"
  exit 1
fi
echo "docs/deepspeed.md matches the key table ($(grep -c '^| `' "$want") keys)"
echo "1 passed, 0 failed"
