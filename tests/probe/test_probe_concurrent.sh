#!/usr/bin/env bash
# test_probe_concurrent.sh - three real `nprobe train --dump-config` runs
# dumping into one dump_path at the same time: a run holds the step it
# writes (a lock on the rank folder), a second run is refused with a clear
# message instead of truncating the first's dump.h5.partial, and every
# dump.h5 left is a finished, readable step (docs/FORMAT.md).
set -u
nprobe=$NPROBE_BIN
py=${NP_PYTHON:-python3}
tmp=$(mktemp -d)
trap 'rm -rf "$tmp"' EXIT
cd "$tmp"
fail=0
bad() { echo "FAIL: $*"; fail=1; }
steps=8
[ -n "${NP_SANITIZED:-}" ] && steps=4
train=(train --model gpt --layers 2 --width 64 --context 32 --batch 4 --steps $steps --threads 1)
cat > t.json <<JSON
{"task": "tensor", "dump_path": "dc", "level": "mix", "step": ["0-$((steps - 1))"]}
JSON
n_ok=0
for round in 1 2; do
  rm -rf dc
  pids=()
  for i in 1 2 3; do
    "$nprobe" "${train[@]}" --dump-config t.json >o$i.txt 2>e$i.txt &
    pids+=($!)
  done
  for i in 1 2 3; do
    wait "${pids[$((i - 1))]}"
    rc=$?
    if [ $rc -eq 0 ]; then
      n_ok=$((n_ok + 1))
    elif [ $rc -eq 2 ]; then
      grep -q "another run is writing into this folder now" e$i.txt \
        || { bad "round $round run $i: exit 2 without saying another run holds the step"; cat e$i.txt; }
    else
      bad "round $round run $i: exit $rc"; cat e$i.txt
    fi
  done
  n=$(find dc -name dump.h5 | wc -l)
  [ "$n" -eq "$steps" ] || bad "round $round: $n dump.h5 files for $steps steps"
  "$py" - dc <<'PY' || bad "round $round: a dump.h5 is not a finished readable step"
import glob, sys
import h5py
for p in sorted(glob.glob(sys.argv[1] + "/step*/rank*/dump.h5")):
    with h5py.File(p, "r") as f:
        assert int(f.attrs["complete"]) == 1, p
        n = 0
        for row in f["entries"][:]:
            if row["has_data"]:
                d = f["data"][row["name"].decode()][...]
                assert d.size == row["numel"], p
                n += 1
        assert n > 0, p
PY
  for p in dc/step*/rank0/dump.h5; do
    "$nprobe" ls "$p" >/dev/null 2>&1 || bad "round $round: nprobe ls $p fails"
  done
done
[ $n_ok -ge 2 ] || bad "only $n_ok of 6 runs dumped (at least one per round must)"
[ $fail -eq 0 ] && echo "concurrent dumps: every dump.h5 finished and readable"
exit $fail
