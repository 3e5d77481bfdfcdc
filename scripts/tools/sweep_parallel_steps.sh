#!/usr/bin/env bash
# sweep_parallel_steps.sh - the runtime's parallel layouts and parallel
# faults at later steps (issue 25): each is trained for STEPS steps
# (default 3) and dumps its last two (tensor task, level mix; the step
# before is what compare's weights rule reads), and plain `nprobe compare`
# pairs it with the one-process run of the same steps. A clean layout must
# name no culprit at any dumped step; a fault must be named at every one
# (the first culprit printed per step, to be read against the catalog's
# place: `nprobe train --list-faults`). The model: GPT, 2 layers, width
# 32, context 16, batch 4 (the pipeline needs 2 layers).
#
#   scripts/tools/sweep_parallel_steps.sh build/release/nprobe [STEPS]
# DUMPED="2" dumps only those steps (a window without the step before);
# CMP_BIN=other/nprobe compares with another build (the same dumps).
# Prints one line per pair and step (exit status, error rows, how many
# weight rows the weights rule explained as noise, the first culprit) and
# a tally; exit 1 when a clean pair names a culprit or a fault is not
# named at some step.
set -u
bin=${1:?usage: sweep_parallel_steps.sh NPROBE [STEPS]}
steps=${2:-3}
py=${NP_PYTHON:-python3}
command -v mpirun > /dev/null || { echo "sweep_parallel_steps: mpirun not found" >&2; exit 2; }
export OMPI_ALLOW_RUN_AS_ROOT=1 OMPI_ALLOW_RUN_AS_ROOT_CONFIRM=1
tmp=$(mktemp -d)
trap 'rm -rf "$tmp"' EXIT
size=(--model gpt --layers 2 --width 32 --context 16 --batch 4 --steps "$steps" --threads 1)
dumped=${DUMPED:-"$((steps - 2)), $((steps - 1))"}
cmp_bin=${CMP_BIN:-$bin}
train() { # name ranks device fault [args...]
  local name=$1 k=$2 dev=$3 fault=$4
  shift 4
  printf '{"task": "tensor", "dump_path": "%s/%s", "level": "mix", "step": [%s]}\n' "$tmp" "$name" "$dumped" > "$tmp/$name.json"
  local cmd=("$bin" train "${size[@]}" --device "$dev" --fault "$fault" --dump-config "$tmp/$name.json" "$@")
  if [ "$k" = 1 ]; then "${cmd[@]}" > "$tmp/$name.log" 2>&1
  else mpirun -n "$k" --oversubscribe --bind-to none -x OMP_NUM_THREADS=1 "${cmd[@]}" > "$tmp/$name.log" 2>&1; fi ||
    { echo "sweep_parallel_steps: training $name failed:" >&2; tail -5 "$tmp/$name.log" >&2; exit 2; }
}
bad=0 n=0
judge() { # name clean|fault -> lines "name step exit errors culprit"
  local name=$1 want=$2
  rm -rf "$tmp/out"
  "$cmp_bin" compare -b "$tmp/single" -c "$tmp/$name" -o "$tmp/out" --format json -q > "$tmp/$name.cmp" 2>&1
  local rc=$?
  while read -r step errors noise culprit; do
    n=$((n + 1))
    local ok=ok
    if [ "$culprit" = no-report ]; then ok=FAIL; bad=1; fi
    if [ "$want" = clean ] && [ "$culprit" != none ]; then ok=FAIL; bad=1; fi
    if [ "$want" = fault ] && [ "$culprit" = none ]; then ok=FAIL; bad=1; fi
    printf '%-4s %-28s step %s exit %s %4s error rows %2s noise weights  first culprit %s\n' "$ok" "$name" "$step" "$rc" "$errors" "$noise" "$culprit"
  done < <("$py" - "$tmp/out" <<'PY'
import glob, json, re, sys
fs = sorted(glob.glob(sys.argv[1] + "/*.json"))
if not fs:
    print("- - - no-report")
for f in fs:
    j = json.load(open(f))
    fc = j.get("first_culprit")
    m = re.search(r"(\d+) weight row\(s\) parted beyond their level", j["inputs"]["notes"])
    print(j["inputs"]["step"], j["summary"]["error"], m.group(1) if m else 0,
          fc["call"] if fc else "none")
PY
)
}
train single 1 cpu none
train tp2 2 cpu none --tp 2
train tp2_bf16 2 cpu none --tp 2 --precision bf16
train tp2_sp 2 cpu none --tp 2 --sp
train tp2dp2_sp_mb2 4 cpu none --tp 2 --sp --micro-batches 2
train tp2_vocab 2 cpu none --tp 2 --sp --vocab-parallel
train pp2_mb2 2 cpu none --pp 2 --micro-batches 2
train pp2tp2 4 cpu none --pp 2 --tp 2
train f_tp_missing_allreduce 2 npu-sim tp_missing_allreduce --tp 2
train f_tp_shard_offset 4 npu-sim tp_shard_offset --tp 2
train f_sp_norm_grad_unreduced 2 npu-sim sp_norm_grad_unreduced --tp 2 --sp
train f_pp_microbatch_swap 2 npu-sim pp_microbatch_swap --pp 2 --micro-batches 2
train f_pp_grad_accum_drop 2 npu-sim pp_grad_accum_drop --pp 2 --micro-batches 2
train f_pp2tp2_missing_allreduce 4 npu-sim tp_missing_allreduce --pp 2 --tp 2
for c in tp2 tp2_bf16 tp2_sp tp2dp2_sp_mb2 tp2_vocab pp2_mb2 pp2tp2; do judge "$c" clean; done
for c in f_tp_missing_allreduce f_tp_shard_offset f_sp_norm_grad_unreduced f_pp_microbatch_swap \
         f_pp_grad_accum_drop f_pp2tp2_missing_allreduce; do judge "$c" fault; done
echo "$n pair-steps (steps $dumped of $steps), $([ $bad = 0 ] && echo 'all as expected' || echo 'FAILURES above')"
exit $bad
