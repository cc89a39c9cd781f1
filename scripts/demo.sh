#!/usr/bin/env bash
# zerotrain demo, the whole system on this machine: a coordinator (zcoord) and two agents (zagent,
# one CPU slot each) on loopback; the example job goes in with `zctl submit --follow` and runs one
# rank on each agent; then the final validation loss next to the corpus's entropy floor.
# Ctrl-C, or the end, stops every process the demo started; the exit code is the job's.
# Usage: scripts/demo.sh [BUILD_DIR]   (make demo builds first; make demo-local: zctl run alone)
# Environment:
#   DEMO_DIR=DIR    the coordinator's database, the logs, the agents' work dirs and a pids file
#                   (default examples/demo; each run starts a fresh cluster there)
#   DEMO_STEPS=N    train N steps instead of the job's 200 (the 10% target is then not checked)
#   DEMO_DATA=DIR   where the synthetic corpus goes (default examples/data)
#   DEMO_KEEP=1     keep zcoord and the agents running after the job, until Ctrl-C
set -euo pipefail
cd "$(dirname "$0")/.."
build=${1:-build}
bin=$build/bin
for b in zcoord zagent zworker zctl; do
  [ -x "$bin/$b" ] || { echo "demo: $bin/$b not found; run 'make demo' (it builds first)" >&2; exit 1; }
done
zctl=$bin/zctl
job=examples/tiny-cluster.json
data=${DEMO_DATA:-examples/data}
steps=${DEMO_STEPS:-}
keep=${DEMO_KEEP:-0}
mkdir -p "${DEMO_DIR:-examples/demo}"
dir=$(cd "${DEMO_DIR:-examples/demo}" && pwd)
show=${dir#"$PWD/"} # as the user would type it from the repository
rm -rf "$dir"/zcoord.db "$dir"/zcoord.db-wal "$dir"/zcoord.db-shm "$dir"/zcoord.ready \
       "$dir"/zcoord.log "$dir"/agent-[12] "$dir"/agent-[12].log "$dir"/agent-[12].status.json \
       "$dir"/pids "$dir"/job.json "$dir"/ckpt

# ---- processes: every one started here is stopped on the way out ----------------------------
coord_pid=
agent_pids=()
follow_pid=

running() { # PID: true while it runs (a zombie counts as gone)
  local s
  s=$(ps -o stat= -p "$1" 2>/dev/null) && [ "${s#Z}" = "$s" ]
}

stop() { # PID...: SIGTERM, up to 30 s to exit, then SIGKILL
  local p i
  kill -TERM "$@" 2>/dev/null || true
  for p in "$@"; do
    for ((i = 0; i < 300; i++)); do running "$p" || break; sleep 0.1; done
    kill -KILL "$p" 2>/dev/null || true
    wait "$p" 2>/dev/null || true
  done
}

cleanup() {
  local rc=$?
  trap '' INT TERM HUP
  [ -z "$follow_pid" ] || stop "$follow_pid"
  # agents first: each stops its workers (SIGTERM, then SIGKILL after --stop-grace); then zcoord
  [ ${#agent_pids[@]} -eq 0 ] || stop "${agent_pids[@]}"
  [ -z "$coord_pid" ] || stop "$coord_pid"
  exit "$rc"
}
trap cleanup EXIT
finished=0 # set once the job has completed and DEMO_KEEP holds the cluster: Ctrl-C then ends well
interrupted() {
  echo
  if [ "$finished" = 1 ]; then
    echo "demo: stopping the cluster"
    exit 0
  fi
  echo "demo: interrupted; stopping the cluster" >&2
  exit 130
}
trap interrupted INT
trap 'exit 143' TERM HUP

fail_with_log() { # MESSAGE LOG
  echo "demo: $1; the last lines of $2:" >&2
  tail -n 20 "$2" >&2 || true
  exit 1
}

# ---- the coordinator, on free loopback ports ---------------------------------------------------
"$bin/zcoord" --db "$dir/zcoord.db" --grpc 127.0.0.1:0 --http 127.0.0.1:0 \
  --ready-file "$dir/zcoord.ready" --heartbeat-interval 250ms >"$dir/zcoord.log" 2>&1 &
coord_pid=$!
echo "zcoord $coord_pid" >>"$dir/pids"
for ((i = 0; i < 200; i++)); do
  [ -s "$dir/zcoord.ready" ] && break
  running "$coord_pid" || fail_with_log "zcoord exited" "$dir/zcoord.log"
  sleep 0.1
done
[ -s "$dir/zcoord.ready" ] || fail_with_log "zcoord did not start within 20 s" "$dir/zcoord.log"
grpc=$(sed -n 's/.*"grpc": *"\([^"]*\)".*/\1/p' "$dir/zcoord.ready")
http=$(sed -n 's/.*"http": *"\([^"]*\)".*/\1/p' "$dir/zcoord.ready")
export ZT_COORDINATOR=$grpc
if [ -n "$http" ] && [ "$http" != off ]; then
  echo "dashboard: http://$http/  (open it to watch the job; the demo serves it while it runs)"
else
  echo "dashboard: none (this zcoord was built without HTTP)"
fi
echo
echo "== 1/4 cluster on loopback: zcoord and two agents with one CPU slot each (state and logs in $show)"
# each agent's worker gets half the cores: both share this machine
threads=${OMP_NUM_THREADS:-$(($(nproc) / 2))}
[ "$threads" -ge 1 ] || threads=1
# the job's paths may lie in the repository, DEMO_DIR and DEMO_DATA; a root shell runs workers as root
mkdir -p "$data"
confine=(--allow-path "$PWD" --allow-path "$dir" --allow-path "$data")
[ "$(id -u)" != 0 ] || confine+=(--allow-root)
for n in 1 2; do
  OMP_NUM_THREADS=$threads "$bin/zagent" --coordinator "$grpc" --name "agent-$n" --slots cpu:1 \
    --work-dir "$dir/agent-$n" --status-file "$dir/agent-$n.status.json" --stop-grace 3s \
    "${confine[@]}" >"$dir/agent-$n.log" 2>&1 &
  agent_pids+=($!)
  echo "agent-$n $!" >>"$dir/pids"
done
for n in 1 2; do
  for ((i = 0; i < 200; i++)); do
    grep -qs '"registered": *true' "$dir/agent-$n.status.json" && break
    running "${agent_pids[$((n - 1))]}" || fail_with_log "agent-$n exited" "$dir/agent-$n.log"
    sleep 0.1
  done
  grep -qs '"registered": *true' "$dir/agent-$n.status.json" ||
    fail_with_log "agent-$n did not register within 20 s" "$dir/agent-$n.log"
done
echo "zcoord pid $coord_pid, gRPC $grpc; agent-1 pid ${agent_pids[0]}, agent-2 pid ${agent_pids[1]}"
"$zctl" agents

echo
echo "== 2/4 synthetic corpus in $data (seeded Markov chain, exact entropy floor)"
"$zctl" data synth --out "$data"
floor=$(sed -n 's/.*"entropy_floor_nats": *\([0-9.eE+-]*\).*/\1/p' "$data/synth_meta.json" | head -1)

# DEMO_STEPS or DEMO_DATA: a copy of the job with those changes (absolute paths, checkpoints in
# DEMO_DIR) and an evaluation and checkpoints that fall within the steps
if [ -n "$steps" ] || [ -n "${DEMO_DATA:-}" ]; then
  python3 - "$job" "$dir/job.json" "$(cd "$data" && pwd)" "$dir/ckpt" "$steps" <<'EOF'
import json, sys
src, dst, data, ckpt, steps = sys.argv[1:]
with open(src) as f:
    j = json.load(f)
t = j["train"]
j["data"] = {"train": data + "/synth_train_*.bin", "val": data + "/synth_val_*.bin"}
t["checkpoint_dir"] = ckpt + "/" + j["name"]
if steps:
    n = t["steps"] = int(steps)
    if n % t.get("eval_every", n):
        t["eval_every"] = n
    if t.get("checkpoint_every", 0) > n or n % max(t.get("checkpoint_every", 1), 1):
        t["checkpoint_every"] = max(1, n // 2)
    sched = j.get("deepspeed", {}).get("scheduler", {}).get("params", {})
    if "total_num_steps" in sched:
        sched["total_num_steps"] = n
        sched["warmup_num_steps"] = min(sched.get("warmup_num_steps", 0), max(1, n // 10))
with open(dst, "w") as f:
    json.dump(j, f, indent=1)
EOF
  job=$dir/job.json
  ckpt=$dir/ckpt/tiny-cluster
else
  ckpt=examples/ckpt/tiny-cluster
fi
rm -rf "$ckpt"
nsteps=$(sed -n 's/.*"steps": *\([0-9]*\).*/\1/p' "$job" | head -1)

echo
echo "== 3/4 zctl submit --follow $job (2 ranks, one on each agent, ZeRO stage 1, $nsteps steps)"
"$zctl" submit "$job" --follow &
follow_pid=$!
rc=0
wait "$follow_pid" || rc=$?
follow_pid=
id=$("$zctl" -o json jobs | sed -n 's/^ *"id": *\([0-9]*\),*$/\1/p' | head -1)
if [ "$rc" -ne 0 ]; then
  echo "demo: job ${id:-?} did not complete (zctl submit --follow exited $rc)" >&2
  if [ -n "$id" ]; then
    "$zctl" job "$id" >&2 || true
    echo "demo: the workers' last lines (zctl logs $id --no-events --tail 10):" >&2
    "$zctl" logs "$id" --no-events --tail 10 >&2 || true
  fi
  echo "demo: the coordinator's and agents' logs are in $show" >&2
  exit "$rc"
fi

echo
echo "== 4/4 result"
"$zctl" job "$id" | grep -E '^ +rank [0-9]+ ' || true
log=$(ls -t "$dir"/agent-[12]/attempt_*/rank_00000.log 2>/dev/null | head -1 || true)
val=$([ -z "$log" ] || grep -o 'val_loss=[0-9.]*' "$log" | tail -1 | cut -d= -f2 || true)
target=0
if [ -z "$val" ]; then
  echo "no validation loss in rank 0's log ($log)" >&2
  target=1
else
  awk -v v="$val" -v f="$floor" -v n="$nsteps" -v full="$([ -z "$steps" ] && echo 1 || echo 0)" 'BEGIN {
    pct = (v - f) / f * 100
    printf "final validation loss %.4f vs entropy floor %.4f nats/token: %.1f%% above", v, f, pct
    if (full) printf " (target: within 10%%)\n"; else printf " (after %d steps; the 10%% target is for the full run)\n", n
    exit (full && pct > 10 ? 1 : 0)
  }' || target=1
fi

echo
if [ "$keep" = 1 ]; then
  at=$grpc
  echo "next: the cluster keeps running (DEMO_KEEP=1) until Ctrl-C; dashboard http://$http/"
else
  at=127.0.0.1:50051
  echo "next: the demo's cluster stops now (DEMO_KEEP=1 make demo keeps it up until Ctrl-C); its"
  echo "database stays in $show. To look at the job again, serve that database (dashboard on"
  echo "http://127.0.0.1:8080/) and ask it:"
  echo "  $bin/zcoord --db $show/zcoord.db &"
fi
echo "  ZT_COORDINATOR=$at $zctl jobs"
echo "  ZT_COORDINATOR=$at $zctl job $id"
echo "  ZT_COORDINATOR=$at $zctl logs $id --tail 20"
echo "  ZT_COORDINATOR=$at $zctl ckpt list $id"
echo "  $zctl ckpt export $ckpt --format safetensors -o model.safetensors"
[ "$keep" != 1 ] || echo "  ZT_COORDINATOR=$at $zctl submit $job --follow"
[ "$target" -eq 0 ] || exit 1
if [ "$keep" = 1 ]; then
  finished=1
  wait "$coord_pid" || true
fi
