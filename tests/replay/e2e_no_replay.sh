#!/usr/bin/env bash
# e2e_no_replay.sh - compare's float64 recompute of the cmp side can be turned
# off (--no-replay, or NPROBE_NO_REPLAY=1): the gelu_tanh fault, whose error
# hides under bfloat16 rounding noise, is named as the first culprit with the
# replay (exit 1) and is invisible without it (no culprit, exit 0), the
# accumulated comparison alone; the rows' metrics are the same either way.
set -u
N=${NPROBE_BIN:?}
PY=${NP_PYTHON:-/usr/bin/python3}
tmp=$(mktemp -d)
trap 'rm -rf "$tmp"' EXIT
cd "$tmp"
fail=0

dump() { # dir device precision [fault]
  printf '{"task":"tensor","dump_path":"%s","step":[0],"level":"L1"}' "$1" > "$1.json"
  local args=(train --model gpt --steps 1 --seed 3 --threads 1 --device "$2" --precision "$3")
  [ $# -ge 4 ] && args+=(--fault "$4")
  "$N" dump -c "$1.json" -- "$N" "${args[@]}" > "$1.log" 2>&1 || { echo "FAIL: dump ${args[*]}"; cat "$1.log"; exit 1; }
}

culprit() { # outdir [compare options...] -> "call exit"
  local out=$1; shift
  "$N" compare -b ref -c npu -o "$out" -q --format json,csv "$@" > /dev/null 2> "$out.err"
  local rc=$?
  "$PY" - "$out" "$rc" <<'PY'
import glob, json, sys
j = json.load(open(glob.glob(sys.argv[1] + "/*.json")[0]))
fc = j["first_culprit"]
print(fc["call"] if fc else "none", sys.argv[2])
PY
}

dump ref cpu fp32
dump npu npu-sim bf16 gelu_tanh
read -r on rc_on < <(culprit on)
read -r off rc_off < <(culprit off --no-replay)
read -r env rc_env < <(NPROBE_NO_REPLAY=1 culprit env)
case $on in Functional.gelu.*) [ "$rc_on" = 1 ] || { echo "FAIL replay on: exit $rc_on"; fail=1; } ;;
  *) echo "FAIL replay on: first culprit '$on' (expected Functional.gelu.*), exit $rc_on"; fail=1 ;; esac
[ "$off" = none ] && [ "$rc_off" = 0 ] || { echo "FAIL --no-replay: first culprit '$off', exit $rc_off (expected none, 0)"; fail=1; }
[ "$env" = none ] && [ "$rc_env" = 0 ] || { echo "FAIL NPROBE_NO_REPLAY=1: first culprit '$env', exit $rc_env"; fail=1; }
# the rows themselves (names, verdict inputs, metrics) do not depend on the replay
cmp -s <(cut -d, -f1-12 on/*.csv) <(cut -d, -f1-12 off/*.csv) || { echo "FAIL: csv rows differ with and without the replay"; fail=1; }
[ $fail -eq 0 ] && echo "e2e_no_replay: all passed (replay: $on; without: $off)" || echo "e2e_no_replay: FAILED"
exit $fail
