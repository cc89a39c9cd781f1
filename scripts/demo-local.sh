#!/usr/bin/env bash
# zerotrain demo on one machine without a coordinator: a synthetic corpus with a known entropy
# floor, then `zctl run` on the example job (2 ranks, ZeRO stage 1), then the final validation
# loss next to the floor. scripts/demo.sh shows the same job on a coordinator and two agents.
# Usage: scripts/demo-local.sh [BUILD_DIR]   (make demo-local builds first)
set -euo pipefail
cd "$(dirname "$0")/.."
build=${1:-build}
zctl="$build/bin/zctl"
[ -x "$zctl" ] || { echo "demo-local: $zctl not found; run 'make demo-local' (it builds first)" >&2; exit 1; }

echo "== 1/3 synthetic corpus (seeded Markov chain, exact entropy floor)"
"$zctl" data synth --out examples/data
floor=$(sed -n 's/.*"entropy_floor_nats": *\([0-9.eE+-]*\).*/\1/p' examples/data/synth_meta.json | head -1)

echo
echo "== 2/3 zctl run examples/tiny.json (2 CPU ranks, ZeRO stage 1, 200 steps)"
rm -rf examples/ckpt/tiny
"$zctl" run examples/tiny.json

echo
echo "== 3/3 result"
log=examples/ckpt/tiny/logs/rank_00000.log
val=$(grep -o 'val_loss=[0-9.]*' "$log" | tail -1 | cut -d= -f2)
awk -v v="$val" -v f="$floor" 'BEGIN {
  pct = (v - f) / f * 100
  printf "final validation loss %.4f vs entropy floor %.4f nats/token: %.1f%% above (target: within 10%%)\n", v, f, pct
  exit (pct <= 10 ? 0 : 1)
}'
echo "checkpoints: examples/ckpt/tiny (export one with: $zctl ckpt export examples/ckpt/tiny --format safetensors -o model.safetensors)"
