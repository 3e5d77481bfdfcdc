#!/usr/bin/env bash
# cli_compare.sh - nprobe compare's command line on real dumps: -o creates
# missing parents; two compares in the same second keep both reports (_2);
# --step that selects nothing lists the steps there are; a text file
# against a dump root gives the file's own error; an incomplete cmp side
# is a difference (exit 1) with advice that says so.
set -u
nprobe=${NPROBE_BIN:?NPROBE_BIN not set}
tmp=$(mktemp -d)
trap 'rm -rf "$tmp"' EXIT
cd "$tmp"
fail=0
check() { if ! grep -qF -- "$2" "$1"; then echo "FAIL: $1 lacks: $2"; cat "$1"; fail=1; fi; }
for side in b c; do
  dev=cpu; [ $side = c ] && dev=npu-sim
  printf '{"task": "statistics", "dump_path": "%s", "level": "mix", "step": [0, 1]}\n' "$tmp/$side" > $side.json
  "$nprobe" train --model mlp --steps 2 --threads 1 --device $dev --dump-config $side.json > /dev/null 2>&1 \
    || { echo "FAIL: train $side"; exit 1; }
done

"$nprobe" compare -b b -c c -o deep/er/dir --format csv -q; rc=$?
[ $rc = 0 ] || { echo "FAIL: compare into a deep -o: exit $rc"; fail=1; }
"$nprobe" compare -b b -c c -o deep/er/dir --format csv -q
n=$(ls deep/er/dir/compare_result_rank0_step0_*.csv 2>/dev/null | wc -l)
# (the second run may fall in the next second: then no suffix is needed)
[ "$n" = 2 ] || { echo "FAIL: $n step-0 reports after two compares, expected 2"; fail=1; }

"$nprobe" compare -b b -c c --step 7 -o o > out.txt 2> err.txt; rc=$?
[ $rc = 2 ] || { echo "FAIL: --step 7: exit $rc"; fail=1; }
check err.txt "compare: no step/rank selected by --step/--rank (the two sides hold steps 0, 1; ranks 0)"

echo "not a dump" > text.h5
"$nprobe" compare -b text.h5 -c c -o o > out.txt 2> err.txt; rc=$?
[ $rc = 2 ] || { echo "FAIL: text file vs root: exit $rc"; fail=1; }
check err.txt "text.h5: not an HDF5 file, or truncated"

# an incomplete cmp step (complete = 0, as a killed run leaves it): compared,
# a difference, and the advice says so
py=${NP_PYTHON:-/usr/bin/python3}
cp c/step1/rank0/dump.h5 part.h5
"$py" -c 'import h5py, sys; f = h5py.File(sys.argv[1], "r+"); f.attrs["complete"] = 0; f.close()' part.h5 \
  || { echo "FAIL: h5py"; fail=1; }
"$nprobe" compare -b b/step1/rank0/dump.h5 -c part.h5 -o inc --format json > out.txt 2> err.txt; rc=$?
[ $rc = 1 ] || { echo "FAIL: incomplete cmp side: exit $rc, expected 1"; fail=1; }
check out.txt "is incomplete (complete = 0"
"$py" - inc/*.json <<'PY' || fail=1
import json, sys
j = json.load(open(sys.argv[1]))
if "incomplete" not in j["summary"]["advice"]:
    print("FAIL: advice:", j["summary"]["advice"]); sys.exit(1)
PY
[ $fail = 0 ] && echo ok
exit $fail
