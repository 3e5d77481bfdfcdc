#!/usr/bin/env bash
# test_dist_pp.sh - pipeline parallelism in the runtime (`mpirun -n 2 nprobe
# train --pp 2`: the GPT's two blocks on two stages, docs/RUNTIME.md
# "Pipeline parallel") compared with the one-process run by plain `nprobe
# compare`, no mapping (docs/COMPARE.md "Sharded layouts"). Known answers:
# - with 2 micro-batches (GPipe: both forwards, then both backwards) the
#   one-process losses within 2e-6 (the micro-batches' mean against one
#   mean, the gradients summed in another order: float32 noise); without
#   micro-batches the very same losses and every dumped tensor bit-equal
#   (MaxAbsErr 0 on every paired row of steps 0 and 1: each stage runs the
#   one-process ops on the one-process values, the tied embedding's two
#   gradients add in float64 rounded once, as float32's one addition does,
#   and the gradient norm adds the same per-parameter sums in the same
#   order);
# - the dump: a (pp=2, mb=2) mesh, rank 1 at (1, 0), its leaves placed
#   Replicate() over pp with stage 1; the blocks keep their global index
#   and the API counters go on from stage 0's (rank 1's first linear is
#   Functional.linear.4, as in one process);
# - plain compare against one process: exit 0, no error row, no culprit,
#   every one-process leaf paired (no bench-only row), the receives equal
#   to what was sent;
# - pp_microbatch_swap (stage 1 takes micro-batch 1's activation as 0's):
#   exit 1, the first culprit Distributed.recv.0.forward, its reason naming
#   rank 1 (pp=1, mb=0), the sender rank 0 (pp=0, mb=0) and the micro-batch
#   whose values it holds (1), every one-process leaf still paired (stage
#   1's names come with micro-batch 0's message, whichever it takes); the
#   same first culprit under `mpirun -n 2 nprobe compare`.
# Pipeline x tensor parallel (`mpirun -n 4 nprobe train --pp 2 --tp 2
# --micro-batches 2`: rank = stage x 2 + TP rank, each stage's blocks
# Megatron-split over its 2 ranks, each rank sending to the rank at its own
# place in the next stage):
# - the one-process losses within 2e-6 (as the pipeline alone with 2
#   micro-batches);
# - the dump: a (pp=2, tp=2, mb=2) mesh, rank 3 at (1, 1, 0), its received
#   activation Replicate() over pp and tp (the copies of a TP group are
#   equal) and Shard(0) over mb, its c_fc weight (block 1, stage 1) the rows
#   64..127 of (128, 32), Shard(0) over tp;
# - plain compare against one process: exit 0, no error row, no bench-only
#   row, no culprit, the 4 rank files assembled, every receive equal to what
#   the rank at its place in the stage before sent;
# - a second run of the layout: the same printed losses and every rank's
#   step file byte-identical;
# - tp_missing_allreduce (block 0's row-parallel c_proj left unreduced, on
#   stage 0): first culprit Module.h.0.mlp.c_proj.Linear.forward.0, its
#   replicas rank 0 (pp=0, tp=0, mb=0) and rank 1 (pp=0, tp=1, mb=0);
# - pp_microbatch_swap: first culprit Distributed.recv.0.forward, rank 2
#   (pp=1, tp=0, mb=0) holding what rank 0 (pp=0, tp=0, mb=0) sent as
#   micro-batch 1.
# Trained weights, through checkpoints (the section "checkpoints of a
# pipeline" below): PP2 and PP2 x TP2 load a one-process checkpoint and
# match the one process at the next step; their saves load in one process.
set -u
. "$(dirname "$0")/mpi_env.sh"
# The sanitized pass (NP_SANITIZED, CI time) runs the clean layout and the
# fault: every C path of model_pp.c and of the pipeline's assembly.
lite=${NP_SANITIZED:+1}
size=(--model gpt --layers 2 --width 32 --context 16 --batch 4 --steps 2 --threads 1)
run() { # dir ranks device fault [extra args] [steps]
  printf '{"task": "tensor", "dump_path": "%s", "level": "mix", "step": [%s]}\n' "$tmp/$1" "${6:-0, 1}" > "$1.json"
  local cmd=("$nprobe" train "${size[@]}" --device "$3" --fault "$4" --dump-config "$1.json" ${5:-})
  if [ "$2" = 0 ]; then "${cmd[@]}" > "$1.log" 2>&1; else mpirun_k "$2" "${cmd[@]}" --pp 2 > "$1.log" 2>&1; fi ||
    { echo "FAIL train $*"; cat "$1.log"; exit 1; }
}
run single 0 cpu none
run pp2 2 cpu none '--micro-batches 2'
run bad 2 npu-sim pp_microbatch_swap '--micro-batches 2'
[ -z "$lite" ] && run pp2m1 2 cpu none

# the one-process losses, within float32 noise with 2 micro-batches
if paste <(grep '^step ' single.log | awk '{print $4}') <(grep '^step ' pp2.log | awk '{print $4}') |
   awk '{ d = $1 - $2; if (d < 0) d = -d; if (d > 2e-6) bad = 1 } END { exit bad || NR != 2 }'; then
  echo "ok   pp2 --micro-batches 2 prints the one-process losses (within 2e-6)"
else
  echo "FAIL pp2 --micro-batches 2 losses differ from one process"; grep '^step ' single.log pp2.log; fail=1
fi
show=$("$nprobe" show pp2/step0/rank1/dump.h5 Distributed.recv.0.forward.output.0 2>&1)
lin=$("$nprobe" ls --calls pp2/step0/rank1/dump.h5 2>&1 | grep -m1 ' Functional.linear\.' | awk '{print $3, $4}')
if grep -q "mesh      (pp=2, mb=2) at (1, 0)" <<< "$show" && grep -q "placements \[Replicate(),Shard(0)\]" <<< "$show" &&
   grep -q "stage     1  micro-batch 0" <<< "$show" &&
   [ "$lin" = "Functional.linear.4.forward Module.h.1.attn.c_attn.Linear.forward.0" ]; then
  echo "ok   pp2 rank 1: mesh (pp=2, mb=2) at (1, 0), its received activation Replicate(),Shard(0) on stage 1, its first linear Functional.linear.4 in Module.h.1"
else
  echo "FAIL pp2 dump: $show / first linear '$lin'"; fail=1
fi

cmp_json() { # bench cmp step(s) -> "rc errors bench-only first-culprit-call"
  "$nprobe" compare -b "$1" -c "$2" -o "out_$2" --format json $3 > "$2.cmp" 2>&1
  local rc=$?
  "$py" - "out_$2" "$rc" <<'PY'
import glob, json, sys
js = [json.load(open(f)) for f in sorted(glob.glob(sys.argv[1] + "/*.json"))]
errors = sum(j["summary"]["error"] for j in js)
h = js[0]["headers"]
only = sum(1 for j in js for r in j["rows"] if r[h.index("Match")] == "bench-only")
fc = next((j["first_culprit"] for j in js if j["first_culprit"]), None)
print(sys.argv[2], errors, only, fc["call"] if fc else "none")
PY
}
read -r rc errors only first < <(cmp_json single pp2 "")
if [ "$rc" = 0 ] && [ "$errors" = 0 ] && [ "$only" = 0 ] && [ "$first" = none ] &&
   grep -q "Pipeline (pp=2): the stages' rows merged .* all equal" pp2.cmp; then
  echo "ok   pp2 against one process, steps 0 and 1: exit 0, no error row, no bench-only row, the receives equal to the sends"
else
  echo "FAIL pp2 against one process: exit $rc, $errors error rows, $only bench-only, culprit $first"; cat pp2.cmp; fail=1
fi
read -r rc errors only first < <(cmp_json single bad "--step 0")
if [ "$rc" = 1 ] && [ "$first" = Distributed.recv.0.forward ] && [ "$only" = 0 ] &&
   grep -q "first culprit: Distributed.recv.0.forward .*: pipeline: rank 1 (pp=1, mb=0) received at Distributed.recv.0.forward values other than rank 0 (pp=0, mb=0) sent .*; it holds what was sent as micro-batch 1$" bad.cmp; then
  echo "ok   pp_microbatch_swap: first culprit $first, rank 1 (pp=1, mb=0) holding what rank 0 sent as micro-batch 1"
else
  echo "FAIL pp_microbatch_swap: exit $rc, culprit $first"; cat bad.cmp; fail=1
fi

# ---- trained weights: checkpoints of a pipeline (docs/RUNTIME.md
# "Checkpoints of a pipeline"). One process trains steps 0 and 1 of a
# 4-step schedule and saves; one process and PP2 (no micro-batches) load it,
# run step 2 with a tensor dump of it, and save at step 3. Known answers:
# PP2 runs the one-process ops on the one-process values (above), so its
# step-2 dump is bit-equal to the one process's (MaxAbsErr 0 on every paired
# row, the same loss), and its checkpoint (every stage's tensors gathered,
# rank 0 writing the one-process names and shapes) holds the one process's
# /params and /optim bit for bit, at the same step and Adam step count.
ck=(--model gpt --layers 2 --width 32 --context 16 --batch 4 --steps 4 --threads 1)
ckrun() { # dir ranks "args": nprobe train ${ck[@]} args with a tensor dump of step 2
  printf '{"task": "tensor", "dump_path": "%s", "level": "mix", "step": [2]}\n' "$tmp/$1" > "$1.json"
  local cmd=("$nprobe" train "${ck[@]}" --dump-config "$1.json" $3)
  if [ "$2" = 1 ]; then "${cmd[@]}" > "$1.log" 2>&1; else mpirun_k "$2" "${cmd[@]}" > "$1.log" 2>&1; fi ||
    { echo "FAIL train $*"; cat "$1.log"; exit 1; }
}
loss_of() { grep "^step $2 " "$1" | awk '{print $4}'; }
"$nprobe" train "${ck[@]}" --stop-after 2 --save ck1.h5 > ck1.log 2>&1 || { echo "FAIL save"; cat ck1.log; exit 1; }
ckrun ref 1 "--load ck1.h5 --stop-after 3 --save ck_ref.h5"
ckrun ckpp 2 "--pp 2 --load ck1.h5 --stop-after 3 --save ck_pp.h5"
ck_check() { # OUTDIR|- [a.h5 b.h5] -> "paired-rows rows-not-bit-equal [datasets max-abs-diff
  # max-rel-diff]": the exact pairs of a compare's json reports in OUTDIR, and the two checkpoints'
  # /params and /optim (exit 1 unless both are complete, at the same step and Adam step count)
  "$py" - "$@" <<'PY'
import glob, json, sys
out = [0, 0]
if sys.argv[1] != "-":
    js = [json.load(open(f)) for f in sorted(glob.glob(sys.argv[1] + "/*.json"))]
    h = js[0]["headers"]
    paired = [r for j in js for r in j["rows"] if r[h.index("Match")] == "exact"]
    out = [len(paired), sum(1 for r in paired if r[h.index("MaxAbsErr")] not in (0, 0.0))]
if len(sys.argv) > 3:
    import h5py, numpy as np
    n, worst, rel = 0, 0.0, 0.0
    def walk(g, h):
        global n, worst, rel
        assert sorted(g) == sorted(h), (sorted(g), sorted(h))
        for k in g:
            if isinstance(g[k], h5py.Dataset):
                x, y = g[k][()].astype(np.float64), h[k][()].astype(np.float64)
                assert x.shape == y.shape, k
                d = np.abs(x - y).max() if x.size else 0.0
                worst = max(worst, d)
                rel = max(rel, d / (np.abs(x).max() or 1.0))
                n += 1
            else:
                walk(g[k], h[k])
    with h5py.File(sys.argv[2], "r") as a, h5py.File(sys.argv[3], "r") as b:
        assert a.attrs["step"] == b.attrs["step"] and a["optim"].attrs["t"] == b["optim"].attrs["t"]
        walk(a["params"], b["params"])
        walk(a["optim"], b["optim"])
    out += [n, "%.3g" % worst, "%.3g" % rel]
print(*out)
PY
}
"$nprobe" compare -b ref -c ckpp -o out_ckpp --format json > ckpp.cmp 2>&1
rc=$?
read -r rows nonzero nds dmax drel < <(ck_check out_ckpp ck_ref.h5 ck_pp.h5)
if [ "$rc" = 0 ] && [ "$nonzero" = 0 ] && [ "${rows:-0}" -gt 400 ] && [ -n "$(loss_of ref.log 2)" ] &&
   [ "$(loss_of ref.log 2)" = "$(loss_of ckpp.log 2)" ] && grep -q "^saved ck_pp.h5 (step 3)" ckpp.log &&
   [ "${nds:-0}" = 84 ] && [ "$dmax" = 0 ]; then
  echo "ok   pp2 loads a one-process checkpoint: step 2's $rows paired rows bit-equal to one process's; its save at step 3 equals the one-process save in all $nds datasets"
else
  echo "FAIL pp2 checkpoints: compare exit $rc, $nonzero of $rows rows differ, $nds datasets max diff $dmax"
  cat ckpp.cmp ckpp.log; fail=1
fi
[ -n "$lite" ] && exit $fail

# Plain pass only. PP2 x TP2 with 2 micro-batches loads the same one-process
# checkpoint (each rank its stage's layers and its TP shard of them, with
# their Adam m and v): its step-2 dump compares clean against the one
# process's (exit 0, no error row, no bench-only row, no culprit) and prints
# its loss within 2e-6; in bf16 (--load-other-precision: the checkpoint is
# fp32) it compares clean against the fp32 one process too.
# One process resumes each pipeline's save at step 3: from PP2's, the very
# step-3 loss of one process resuming its own save (the files are equal);
# from PP2 x TP2's, within 2e-6 (the save differs from one process's by
# float32 reduction noise, bounded below).
ckrun ckptp 4 "--pp 2 --tp 2 --micro-batches 2 --load ck1.h5 --stop-after 3 --save ck_ptp.h5"
ckrun ckbft 4 "--pp 2 --tp 2 --micro-batches 2 --precision bf16 --load-other-precision --load ck1.h5 --stop-after 3"
for c in ref pp ptp; do
  "$nprobe" train "${ck[@]}" --load "ck_$c.h5" > "cont_$c.log" 2>&1 || { echo "FAIL resume ck_$c.h5"; cat "cont_$c.log"; fail=1; }
done
near() { awk -v a="$1" -v b="$2" 'BEGIN { d = a - b; if (d < 0) d = -d; exit !(a != "" && b != "" && d <= 2e-6) }'; }
for c in ckptp ckbft; do
  read -r rc errors only first < <(cmp_json ref "$c" "")
  if [ "$rc" = 0 ] && [ "$errors" = 0 ] && [ "$only" = 0 ] && [ "$first" = none ] &&
     { [ "$c" != ckptp ] || near "$(loss_of ref.log 2)" "$(loss_of ckptp.log 2)"; }; then
    echo "ok   $c loads the one-process checkpoint: step 2 against one process, exit 0, no error row, no bench-only row"
  else
    echo "FAIL $c against one process at step 2: exit $rc, $errors error rows, $only bench-only, culprit $first"; cat "$c.cmp" "$c.log"; fail=1
  fi
done
read -r rows nonzero nds dmax drel < <(ck_check - ck_ref.h5 ck_ptp.h5)
if [ -n "$(loss_of cont_ref.log 3)" ] && [ "$(loss_of cont_ref.log 3)" = "$(loss_of cont_pp.log 3)" ] &&
   near "$(loss_of cont_ref.log 3)" "$(loss_of cont_ptp.log 3)" && [ "${nds:-0}" = 84 ] &&
   awk -v r="$drel" 'BEGIN { exit !(r <= 1e-4) }'; then
  echo "ok   one process resumes the pipelines' saves: step 3 loss $(loss_of cont_pp.log 3) from pp2's (equal), $(loss_of cont_ptp.log 3) from pp2 x tp2's (its $nds datasets within $drel of the largest element, max abs $dmax)"
else
  echo "FAIL resuming the pipelines' saves: $(loss_of cont_ref.log 3) / $(loss_of cont_pp.log 3) / $(loss_of cont_ptp.log 3), ptp datasets $nds max rel $drel"; fail=1
fi

# without micro-batches: the same losses, every tensor bit-equal
"$nprobe" compare -b single -c pp2m1 -o out_m1 --format json > m1.cmp 2>&1
rc=$?
read -r rows nonzero < <(ck_check out_m1)
if [ "$rc" = 0 ] && [ "$nonzero" = 0 ] && [ "$rows" -gt 800 ] &&
   diff <(grep '^step ' single.log | awk '{print $2, $4}') <(grep '^step ' pp2m1.log | awk '{print $2, $4}') > /dev/null; then
  echo "ok   pp2 without micro-batches: the one-process losses, $rows paired rows of steps 0 and 1 all bit-equal"
else
  echo "FAIL pp2 without micro-batches: exit $rc, $nonzero of $rows rows differ"; cat m1.cmp; fail=1
fi
# the same first culprit when compare runs over MPI
mpirun_k 2 "$nprobe" compare -b single -c bad -o out_mpi --format csv --step 0 > mpi.cmp 2>&1
if grep -q "first culprit across all steps and ranks: step 0 rank 0 Distributed.recv.0.forward: pipeline: rank 1 (pp=1, mb=0)" mpi.cmp; then
  echo "ok   pp_microbatch_swap under mpirun -n 2 nprobe compare: the same first culprit"
else
  echo "FAIL pp_microbatch_swap under mpirun compare"; cat mpi.cmp; fail=1
fi

# ---- pipeline x tensor parallel: 4 ranks, rank = stage x 2 + TP rank
run ptp 4 cpu none '--tp 2 --micro-batches 2'
run ptp2 4 cpu none '--tp 2 --micro-batches 2'
run ptpmiss 4 npu-sim tp_missing_allreduce '--tp 2 --micro-batches 2' 0
run ptpswap 4 npu-sim pp_microbatch_swap '--tp 2 --micro-batches 2' 0
if paste <(grep '^step ' single.log | awk '{print $4}') <(grep '^step ' ptp.log | awk '{print $4}') |
   awk '{ d = $1 - $2; if (d < 0) d = -d; if (d > 2e-6) bad = 1 } END { exit bad || NR != 2 }' &&
   diff <(grep '^step ' ptp.log | awk '{print $2, $4}') <(grep '^step ' ptp2.log | awk '{print $2, $4}') > /dev/null; then
  echo "ok   pp2 x tp2 --micro-batches 2 prints the one-process losses (within 2e-6), twice the same"
else
  echo "FAIL pp2 x tp2 losses"; grep '^step ' single.log ptp.log ptp2.log; fail=1
fi
show=$("$nprobe" show ptp/step0/rank3/dump.h5 Distributed.recv.0.forward.output.0 2>&1)
fc=$("$nprobe" show ptp/step0/rank3/dump.h5 Module.h.1.mlp.c_fc.Linear.forward.0.parameters.weight 2>&1)
if grep -q "mesh      (pp=2, tp=2, mb=2) at (1, 1, 0)" <<< "$show" &&
   grep -q "placements \[Replicate(),Replicate(),Shard(0)\]" <<< "$show" &&
   grep -q "stage     1  micro-batch 0" <<< "$show" &&
   grep -q "placements \[Replicate(),Shard(0),Replicate()\]" <<< "$fc" &&
   grep -q "global    (128, 32) offset (64, 0)" <<< "$fc"; then
  echo "ok   pp2 x tp2 rank 3: mesh (pp=2, tp=2, mb=2) at (1, 1, 0), its received activation Replicate() over pp and tp, block 1's c_fc weight rows 64..127 Shard(0) over tp"
else
  echo "FAIL pp2 x tp2 dump: $show / $fc"; fail=1
fi
read -r rc errors only first < <(cmp_json single ptp "")
if [ "$rc" = 0 ] && [ "$errors" = 0 ] && [ "$only" = 0 ] && [ "$first" = none ] &&
   grep -q "mesh pp=2, tp=2, mb=2): .* assembled from the 4 rank file(s)" ptp.cmp &&
   grep -q "Pipeline (pp=2): the stages' rows merged .* all equal" ptp.cmp; then
  echo "ok   pp2 x tp2 against one process, steps 0 and 1: exit 0, no error row, no bench-only row, 4 rank files assembled, the receives equal to the sends"
else
  echo "FAIL pp2 x tp2 against one process: exit $rc, $errors error rows, $only bench-only, culprit $first"; cat ptp.cmp; fail=1
fi
# bit-identical: every rank's step file byte for byte (the payloads, the
# statistics, the calls and the placements)
same=0
for f in ptp/step*/rank*/dump.h5; do cmp -s "$f" "ptp2/${f#ptp/}" && same=$((same + 1)); done
if [ "$same" = 8 ]; then
  echo "ok   two pp2 x tp2 runs: the 8 step files (2 steps x 4 ranks) byte-identical"
else
  echo "FAIL two pp2 x tp2 runs: $same of 8 step files identical"; fail=1
fi
read -r rc errors only first < <(cmp_json single ptpmiss "--step 0")
if [ "$rc" = 1 ] && [ "$first" = Module.h.0.mlp.c_proj.Linear.forward.0 ] &&
   grep -q "Replica disagreement: .*rank 0 (pp=0, tp=0, mb=0) and rank 1 (pp=0, tp=1, mb=0)" ptpmiss.cmp; then
  echo "ok   tp_missing_allreduce under pp2 x tp2: first culprit $first, replicas rank 0 (pp=0, tp=0, mb=0) and rank 1 (pp=0, tp=1, mb=0)"
else
  echo "FAIL tp_missing_allreduce under pp2 x tp2: exit $rc, culprit $first"; cat ptpmiss.cmp; fail=1
fi
read -r rc errors only first < <(cmp_json single ptpswap "--step 0")
if [ "$rc" = 1 ] && [ "$first" = Distributed.recv.0.forward ] && [ "$only" = 0 ] &&
   grep -q "first culprit: Distributed.recv.0.forward .*: pipeline: rank 2 (pp=1, tp=0, mb=0) received at Distributed.recv.0.forward values other than rank 0 (pp=0, tp=0, mb=0) sent .*; it holds what was sent as micro-batch 1$" ptpswap.cmp; then
  echo "ok   pp_microbatch_swap under pp2 x tp2: first culprit $first, rank 2 (pp=1, tp=0, mb=0) holding what rank 0 sent as micro-batch 1"
else
  echo "FAIL pp_microbatch_swap under pp2 x tp2: exit $rc, culprit $first"; cat ptpswap.cmp; fail=1
fi
exit $fail
