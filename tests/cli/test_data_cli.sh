#!/usr/bin/env bash
# Drives the real zctl binary through `zctl data synth` and `zctl data tokenize`: outputs,
# determinism, -o json, an independent (numpy) read of the shards, and the error cases
# (missing / empty input, unwritable output, bad options) with their exit codes and messages.
set -u
ZCTL="${ZT_BIN:?ZT_BIN must name the build bin directory}/zctl"
[ -x "$ZCTL" ] || { echo "no zctl at $ZCTL"; exit 1; }
PY=/usr/bin/python3
[ -x "$PY" ] || PY=python3
work=$(mktemp -d /tmp/zt_test_data_cli.XXXXXX)
trap 'rm -rf "$work"' EXIT
cd "$work" || exit 1

fails=0
fail() { echo "FAIL: $*"; fails=$((fails + 1)); }
# run NAME EXPECTED_RC CMD...: runs CMD, keeps stdout/stderr in $work/NAME.{out,err}
run() {
    local name=$1 want=$2
    shift 2
    "$@" >"$name.out" 2>"$name.err"
    local rc=$?
    if [ "$rc" != "$want" ]; then
        fail "$name: exit $rc, want $want: $*"
        sed 's/^/    out: /' "$name.out"
        sed 's/^/    err: /' "$name.err"
    fi
}
has() { # has NAME.{out,err} TEXT
    grep -qF -- "$2" "$1" || { fail "$1 lacks '$2'"; sed 's/^/    | /' "$1"; }
}

# --- synth -------------------------------------------------------------------------------
run synth 0 "$ZCTL" data synth --out data --train-tokens 20000 --val-tokens 3000 --shards 2
has synth.out "wrote data/synth_train_000.bin (10000 tokens)"
has synth.out "wrote data/synth_train_001.bin (10000 tokens)"
has synth.out "wrote data/synth_val_000.bin (3000 tokens)"
has synth.out "wrote data/synth_meta.json"
grep -qE '^entropy floor: [0-9]+\.[0-9]{4} nats/token \(the best achievable mean cross-entropy\)$' synth.out ||
    fail "synth: no entropy floor line"
floor=$(sed -n 's/^entropy floor: \([0-9.]*\) nats.*/\1/p' synth.out)

# Same seed, same bytes (global option after the subcommand, --opt=value form).
run synth2 0 "$ZCTL" data synth --out=again --train-tokens=20000 --val-tokens 3000 --shards 2 -o json
for f in synth_train_000.bin synth_train_001.bin synth_val_000.bin synth_meta.json; do
    cmp -s "data/$f" "again/$f" || fail "synth: $f differs between runs with the same seed"
done
run synth3 0 "$ZCTL" data synth --out other --train-tokens 20000 --shards 2 --seed 7
cmp -s data/synth_train_000.bin other/synth_train_000.bin && fail "synth: seed 7 gave the same bytes"

# JSON output, the meta file and the shards, read independently of zerotrain's code.
"$PY" - "$floor" <<'EOF' || fail "synth: JSON / meta / shard check"
import json, math, sys
import numpy as np
floor = float(sys.argv[1])
out = json.load(open("synth2.out"))
assert out["command"] == "synth", out
assert [f["path"] for f in out["files"]] == ["again/synth_train_000.bin", "again/synth_train_001.bin", "again/synth_val_000.bin"], out["files"]
assert abs(out["entropy_floor_nats"] - floor) < 1e-4, (out["entropy_floor_nats"], floor)
meta = json.load(open("data/synth_meta.json"))
for k in ("entropy_floor_nats", "vocab", "seed", "active_vocab", "successors", "train_tokens", "val_tokens"):
    assert k in meta, k
assert meta["vocab"] == 256 and meta["seed"] == 1337 and meta["train_tokens"] == 20000, meta
assert abs(meta["entropy_floor_nats"] - out["entropy_floor_nats"]) < 1e-12
toks = []
for name in ("synth_train_000.bin", "synth_train_001.bin", "synth_val_000.bin"):
    h = np.fromfile("data/" + name, dtype="<i4", count=256)
    t = np.fromfile("data/" + name, dtype="<u2", offset=1024)
    assert h[0] == 20240520 and h[1] == 1 and h[2] == len(t), (name, h[:3], len(t))
    toks.append(t)
t = np.concatenate(toks).astype(np.int64)
assert t.max() < 256
# The plug-in conditional entropy of 23k tokens sits near the exact floor (loose: short walk).
pairs = {}
for a, b in zip(t[:-1], t[1:]):
    pairs[(a, b)] = pairs.get((a, b), 0) + 1
first = {}
for (a, _), c in pairs.items():
    first[a] = first.get(a, 0) + c
n = len(t) - 1
emp = -sum(c / n * math.log(c / first[a]) for (a, _), c in pairs.items())
assert abs(emp - floor) / floor < 0.05, (emp, floor)
print("synth ok: floor %.4f, empirical %.4f over %d tokens" % (floor, emp, n))
EOF

# Harder settings change the floor; bad options are usage errors naming the option.
run synth_hard 0 "$ZCTL" data synth --out hard --active-vocab 200 --successors 16 --train-tokens 5000 --val-tokens 0
hard=$(sed -n 's/^entropy floor: \([0-9.]*\) nats.*/\1/p' synth_hard.out)
"$PY" -c "import sys; sys.exit(0 if float('$hard') > float('$floor') + 0.5 else 1)" ||
    fail "synth: --successors 16 floor $hard is not above the default's $floor"
[ -e hard/synth_val_000.bin ] && fail "synth: --val-tokens 0 still wrote a val shard"
run synth_badk 2 "$ZCTL" data synth --out bad --active-vocab 8 --successors 9
has synth_badk.err "--successors 9"
run synth_badnum 2 "$ZCTL" data synth --train-tokens lots
has synth_badnum.err "--train-tokens takes a whole number"
run synth_badopt 2 "$ZCTL" data synth --bogus
has synth_badopt.err "unknown option '--bogus'"
run synth_noval 2 "$ZCTL" data synth --out
has synth_noval.err "--out needs a value"
: >afile
run synth_unwritable 1 "$ZCTL" data synth --out afile/sub --train-tokens 1000
has synth_unwritable.err "afile"
run synth_help 0 "$ZCTL" data synth --help
has synth_help.out "--active-vocab"
has synth_help.out "--successors"
run data_help 0 "$ZCTL" data --help
has data_help.out "zctl data tokenize INPUT"
run data_none 2 "$ZCTL" data
run data_badsub 2 "$ZCTL" data frobnicate
has data_badsub.err "unknown subcommand 'frobnicate'"

# --- tokenize ----------------------------------------------------------------------------
"$PY" -c "import os; open('input.txt','wb').write(bytes(range(256)) + os.urandom(4744))"
run tok 0 "$ZCTL" data tokenize input.txt --out toks --shard-tokens 2000
has tok.out "wrote toks/input_train_000.bin (2000 tokens)"
has tok.out "wrote toks/input_train_002.bin (500 tokens)"
has tok.out "wrote toks/input_val_000.bin (500 tokens)"
has tok.out "5000 bytes -> 4500 train + 500 val tokens"
"$PY" <<'EOF' || fail "tokenize: bytes back differ from the input"
import glob
import numpy as np
data = open("input.txt", "rb").read()
got = b""
for name in sorted(glob.glob("toks/input_train_*.bin")) + sorted(glob.glob("toks/input_val_*.bin")):
    h = np.fromfile(name, dtype="<i4", count=256)
    t = np.fromfile(name, dtype="<u2", offset=1024)
    assert h[0] == 20240520 and h[2] == len(t) and t.max() < 256
    got += bytes(t.astype(np.uint8))
assert got == data, (len(got), len(data))
print("tokenize ok: %d bytes round-trip" % len(got))
EOF
run tok_json 0 "$ZCTL" -o json data tokenize input.txt --out toks --prefix named --val-fraction 0.2
"$PY" -c "
import json; o = json.load(open('tok_json.out'))
assert o['command'] == 'tokenize' and o['train_tokens'] == 4000 and o['val_tokens'] == 1000, o
assert o['files'][0]['path'] == 'toks/named_train_000.bin', o
" || fail "tokenize: -o json output"
run tok_missing 1 "$ZCTL" data tokenize no_such_file.txt
has tok_missing.err "no_such_file.txt"
: >empty.txt
run tok_empty 1 "$ZCTL" data tokenize empty.txt --out toks
has tok_empty.err "empty.txt is empty"
run tok_unwritable 1 "$ZCTL" data tokenize input.txt --out afile/sub
has tok_unwritable.err "afile"
run tok_noinput 2 "$ZCTL" data tokenize
has tok_noinput.err "name the INPUT file"
run tok_frac 2 "$ZCTL" data tokenize input.txt --val-fraction 1.5
has tok_frac.err "--val-fraction 1.5"
run tok_two 2 "$ZCTL" data tokenize input.txt input.txt
run tok_help 0 "$ZCTL" data tokenize --help
has tok_help.out "--val-fraction"

if [ "$fails" -ne 0 ]; then
    echo "$fails check(s) failed"
    exit 1
fi
echo "all zctl data checks passed"
