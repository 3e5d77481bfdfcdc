#!/usr/bin/env bash
# sweep_clean.sh - issue 16's false-culprit sweep: clean pairs (no fault)
# compared, every one must name no culprit.
#   runtime: mlp, cnn, gpt at default sizes; npu-sim bf16 and fp16 against
#     cpu fp32; initial weights (step 0) and trained weights (both runs
#     load one fp32 checkpoint of 20 trained steps and dump step 20);
#     tensor and statistics tasks at level mix; seeds SEEDS;
#   PyTorch: samples/torch/gpt_reference.py under CPU autocast bf16 against
#     fp32 (the GPT at default sizes), initial and trained weights, tensor
#     and statistics, seeds SEEDS.
# The pairs are compared by `nprobe compare` as a user runs it (with the
# isolated error of the replay and the sub-threshold rule); a pair counts as
# a false culprit when compare names any culprit. Prints one line per pair
# (culprit or not, exit code, error rows), then a tally per group.
#   scripts/tools/sweep_clean.sh build/release/nprobe [SEEDS] [--no-torch]
# (SEEDS defaults to "1 2 3 4 5 6 7 8": 192 runtime + 32 PyTorch pairs.)
# A subset: NP_CLEAN_MODELS (default "mlp cnn gpt"), NP_CLEAN_PRECS ("bf16
# fp16"), NP_CLEAN_TASKS ("tensor statistics"); tests/replay/e2e_clean.sh
# runs one seed of a few of them as a ctest.
# Exit 1 if any pair names a culprit.
set -u
bin=${1:?usage: sweep_clean.sh NPROBE [SEEDS] [--no-torch]}
N=$(cd "$(dirname "$bin")" && pwd)/$(basename "$bin")
SEEDS=${2:-1 2 3 4 5 6 7 8}
torch=1; [ "${3:-}" = --no-torch ] && torch=0
SRC=$(cd "$(dirname "$0")/../.." && pwd)
PY=${NP_PYTHON:-$SRC/.venv/bin/python}   # absolute: the sweep runs in its own folder
"$PY" -c 'import torch, h5py' 2>/dev/null || torch=0
export NPROBE_BIN=$N NP_SOURCE_DIR=$SRC
tmp=$(mktemp -d)
trap 'rm -rf "$tmp"' EXIT
cd "$tmp"
declare -A n_pairs n_bad
total=0 bad=0

dump() { # dir task step -- train args...
  local dir=$1 task=$2 step=$3; shift 4
  rm -rf "$dir"
  printf '{"task":"%s","dump_path":"%s","step":[%s],"level":"mix"}' "$task" "$dir" "$step" > "$dir.json"
  "$N" dump -c "$dir.json" -- "$N" train "$@" > "$dir.log" 2>&1
}

# compare and tally: group bench cmp
judge() {
  local group=$1 b=$2 c=$3
  rm -rf out
  "$N" compare -b "$b" -c "$c" -o out -q --format json > cmp.txt 2>&1
  local rc=$?
  local res
  res=$("$PY" - out/*.json <<'PY' 2>/dev/null
import json, sys
j = json.load(open(sys.argv[1]))
fc = j["first_culprit"]
h = j["headers"]
verdicts = [r[h.index("Verdict")] for r in j["rows"]]
# the worst relative difference of a row: tensor ||c - b|| / ||b||, statistics the norm's
worst = 0.0
for r in j["rows"]:
    if "EucDist" in h:
        e, n = r[h.index("EucDist")], r[h.index("Bench l2norm")]
        v = e / n if isinstance(e, (int, float)) and isinstance(n, (int, float)) and n > 0 else 0.0
    else:
        v = r[h.index("NormRelativeErr")]
        v = v if isinstance(v, (int, float)) else 0.0
    worst = max(worst, v)
print((fc["call"] if fc else "none"), verdicts.count("error"), verdicts.count("warning"), "%.3g" % worst)
PY
)
  [ -n "$res" ] || res="unreadable 0 0 0"
  set -- $res
  total=$((total + 1)); n_pairs[$group]=$(( ${n_pairs[$group]:-0} + 1 ))
  if [ "$1" != none ] || [ "$rc" = 2 ]; then
    bad=$((bad + 1)); n_bad[$group]=$(( ${n_bad[$group]:-0} + 1 ))
    echo "FALSE $group: first culprit $1, exit $rc, $2 error rows, $3 warnings, worst row rel. diff. $4"
  else
    echo "ok    $group: no culprit, exit $rc, $2 error rows, $3 warnings, worst row rel. diff. $4"
  fi
}

MODELS=${NP_CLEAN_MODELS-mlp cnn gpt}
PRECS=${NP_CLEAN_PRECS:-bf16 fp16}
TASKS=${NP_CLEAN_TASKS:-tensor statistics}
for seed in $SEEDS; do
  rm -f ck_*.h5
  for m in $MODELS; do
    "$N" train --model $m --seed $seed --steps 22 --stop-after 20 --save "ck_$m.h5" > /dev/null 2>&1 \
      || { echo "FAIL: cannot train $m seed $seed"; exit 1; }
    for prec in $PRECS; do
      # the same fp32 checkpoint for the run under test: its /train says the run's own settings
      cp "ck_$m.h5" "ck_${m}_$prec.h5"
      "$PY" - "ck_${m}_$prec.h5" $prec <<'PY' || { echo "FAIL: patch checkpoint"; exit 1; }
import sys, h5py, numpy as np
with h5py.File(sys.argv[1], "r+") as f:
    t = f["train"]
    for k, v in (("precision", sys.argv[2]), ("device", "npu-sim")):
        tid = h5py.h5t.C_S1.copy()  # a NUL-terminated fixed string, as nprobe writes it
        tid.set_size(len(v) + 1)
        tid.set_strpad(h5py.h5t.STR_NULLTERM)
        t.attrs.create(k, np.array(v.encode(), dtype="S%d" % (len(v) + 1)), dtype=h5py.Datatype(tid))
PY
    done
    for task in $TASKS; do
      dump ref0 $task 0 -- --model $m --seed $seed --steps 1 --threads 1
      dump ref20 $task 20 -- --model $m --steps 22 --load "ck_$m.h5" --threads 1
      for prec in $PRECS; do
        dump c0 $task 0 -- --model $m --seed $seed --steps 1 --threads 1 --device npu-sim --precision $prec
        judge "runtime $m $prec init $task seed $seed" ref0 c0
        dump c20 $task 20 -- --model $m --steps 22 --load "ck_${m}_$prec.h5" --threads 1 --device npu-sim --precision $prec
        judge "runtime $m $prec trained $task seed $seed" ref20 c20
      done
    done
  done
  [ $torch = 1 ] || continue
  # PyTorch autocast bf16 against fp32 on the runtime's GPT weights and batches
  REF="$SRC/samples/torch/gpt_reference.py" RUN="$SRC/tests/python/pyrun.sh"
  export NP_PYTHON="$PY" NPROBE_BIN="$N"   # pyrun.sh's: the interpreter, the build's libnprobe
  [ -f ck_gpt.h5 ] || "$N" train --model gpt --seed $seed --steps 22 --stop-after 20 --save ck_gpt.h5 > /dev/null 2>&1
  "$N" train --model gpt --seed $seed --steps 0 --save init.h5 > /dev/null 2>&1
  dump b0 tensor 0 -- --model gpt --seed $seed --steps 1 --threads 1
  dump b20 tensor 20 -- --model gpt --steps 22 --load ck_gpt.h5 --threads 1
  for w in init trained; do
    ck=init.h5 bf=b0/step0/rank0/dump.h5 st=0
    [ $w = trained ] && { ck=ck_gpt.h5 bf=b20/step20/rank0/dump.h5 st=20; }
    for task in $TASKS; do
      rm -rf tf tb
      "$RUN" "$REF" --ckpt $ck --batch-from $bf --step $st --task $task --out tf > /dev/null 2>&1 &&
      "$RUN" "$REF" --ckpt $ck --batch-from $bf --step $st --task $task --out tb --bf16 > /dev/null 2>&1 ||
        { echo "FAIL: gpt_reference.py $w $task seed $seed"; bad=$((bad + 1)); continue; }
      judge "pytorch bf16-autocast $w $task seed $seed" tf tb
    done
  done
done
echo
echo "tally: $total clean pairs, $bad with a false culprit"
for g in "${!n_pairs[@]}"; do :; done
printf '%s\n' "${!n_pairs[@]}" | sed -E 's/ seed [0-9]+$//' | sort -u | while read -r g; do
  t=0 b=0
  for k in "${!n_pairs[@]}"; do
    [ "${k% seed *}" = "$g" ] || continue
    t=$((t + ${n_pairs[$k]})); b=$((b + ${n_bad[$k]:-0}))
  done
  echo "  $g: $t pairs, $b false"
done
[ $bad -eq 0 ]
