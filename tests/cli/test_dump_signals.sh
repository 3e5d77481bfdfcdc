#!/usr/bin/env bash
# test_dump_signals.sh - SIGTERM (and SIGINT sent by kill) to `nprobe dump`
# reach the training command: it ends, nprobe dump waits for it, prints the
# summary of the finished steps, says what happened and exits 128+N; the
# finished dump.h5 files are intact.
set -u
nprobe=$NPROBE_BIN
py=${NP_PYTHON:-python3}
tmp=$(mktemp -d)
child=
dump_pid=
cleanup() {
  [ -n "$child" ] && kill -KILL "$child" 2>/dev/null
  [ -n "$dump_pid" ] && kill -KILL "$dump_pid" 2>/dev/null
  rm -rf "$tmp"
}
trap cleanup EXIT
cd "$tmp"
fail=0
bad() { echo "FAIL: $*"; fail=1; }
train=(train --model gpt --layers 1 --width 32 --context 16 --batch 2 --steps 1000000 --threads 1)

child_of() { # the pid whose parent is $1, from /proc
  awk -v p="$1" '$4 == p {print $1; exit}' /proc/[0-9]*/stat 2>/dev/null
}

for sig in TERM INT; do
  rm -rf d
  cat > s.json <<JSON
{"task": "statistics", "dump_path": "d", "level": "L1", "step": ["0-30"]}
JSON
  # a background job of a script starts with SIGINT ignored: back to default,
  # as for a command started from a terminal
  "$py" -c 'import os, signal, sys; signal.signal(signal.SIGINT, signal.SIG_DFL); os.execvp(sys.argv[1], sys.argv[1:])' \
    "$nprobe" dump -c s.json -- "$nprobe" "${train[@]}" >out.txt 2>err.txt &
  dump_pid=$!
  for _ in $(seq 300); do # until two steps are finished (at most 30 s)
    [ -e d/step1/rank0/dump.h5 ] && break
    sleep 0.1
  done
  for _ in 1 2 3 4 5; do
    child=$(child_of "$dump_pid")
    [ -n "$child" ] && break
    sleep 0.2
  done
  [ -n "$child" ] || { bad "$sig: no training process under nprobe dump"; continue; }
  kill -s "$sig" "$dump_pid"
  wait "$dump_pid"
  rc=$?
  dump_pid=
  signum=$(kill -l "$sig")
  [ $rc -eq $((128 + signum)) ] || bad "$sig: exit $rc (expected $((128 + signum)))"
  state=$(awk '{print $3}' "/proc/$child/stat" 2>/dev/null)
  if [ -n "$state" ] && [ "$state" != Z ]; then
    bad "$sig: the training process $child still runs after nprobe dump ended"
    kill -KILL "$child"
  fi
  child=
  grep -q "received signal $signum, passed on to '$nprobe' (pid " err.txt || { bad "$sig: no message"; cat err.txt; }
  grep -q "was killed by signal $signum" err.txt || bad "$sig: the end is not reported"
  grep -q "nprobe dump summary" out.txt || bad "$sig: no summary"
  "$py" - d <<'PY' || bad "$sig: a finished step is not intact"
import glob, sys
import h5py
files = sorted(glob.glob(sys.argv[1] + "/step*/rank0/dump.h5"))
assert len(files) >= 2, files
for p in files:
    with h5py.File(p, "r") as f:
        assert int(f.attrs["complete"]) == 1, p
        assert len(f["entries"]) > 0 and len(f["calls"]) > 0, p
PY
done
[ $fail -eq 0 ] && echo "signals reach the training command"
exit $fail
