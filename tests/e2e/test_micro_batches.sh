#!/usr/bin/env bash
# test_micro_batches.sh - gradient accumulation in the runtime (`nprobe
# train --micro-batches M`, docs/RUNTIME.md "Micro-batches") compared with
# the one-process whole-batch run by plain `nprobe compare` (docs/COMPARE.md
# "Micro-batches"). Known answers, from the one-process run itself: the M=2
# run prints its losses; its dump has the mesh (mb=2), micro-batch 1's
# c_attn output placed Shard(0) at rows 2..3 of the (4, 16, 96) whole and its
# loss Partial(avg); compare assembles the micro-batches and passes every
# row of step 0 with none one-sided (exit 0) in fp32, and a bf16 M=2 run
# compares clean against the fp32 one-process run; pp_grad_accum_drop
# (micro-batch 0's gradient zeroed away) is named at the first parameter
# gradient, Module.wte.Embedding, in step 0 rank 0, in fp32 and bf16 (exit
# 1); the replay recomputes the micro-batches' calls (2 x the one-process
# step's, all pass) and compare leaves none out; a batch that does not split
# into M is refused naming micro_batches.
set -u
N=${NPROBE_BIN:?}
py=${NP_PYTHON:-python3}
tmp=$(mktemp -d)
trap 'rm -rf "$tmp"' EXIT
cd "$tmp"
fail=0
size=(--model gpt --layers 1 --width 32 --context 16 --batch 4 --steps 2 --threads 1)
run() { # dir train-args...
  local d=$1
  shift
  printf '{"task": "tensor", "dump_path": "%s", "level": "mix", "step": [0, 1]}\n' "$tmp/$d" > "$d.json"
  "$N" train "${size[@]}" --dump-config "$d.json" "$@" > "$d.log" 2>&1 ||
    { echo "FAIL train $d"; cat "$d.log"; exit 1; }
}
# The sanitized pass (CI time) leaves out the bf16 runs: the same C paths.
bf=${NP_SANITIZED:+skip}
run single
run mb2 --micro-batches 2
run drop --micro-batches 2 --device npu-sim --fault pp_grad_accum_drop
if [ -z "$bf" ]; then
  run bf_mb2 --micro-batches 2 --precision bf16
  run bf_drop --micro-batches 2 --device npu-sim --fault pp_grad_accum_drop --precision bf16
fi

if diff <(grep '^step ' single.log | awk '{print $2, $4}') <(grep '^step ' mb2.log | awk '{print $2, $4}') > /dev/null; then
  echo "ok   M=2 prints the one-process losses"
else
  echo "FAIL M=2 losses differ from one process"; grep '^step ' single.log mb2.log; fail=1
fi
out=$("$N" show mb2/step0/rank0/dump.h5 Functional.linear.5.forward.output.0 2>&1)
loss=$("$N" show mb2/step0/rank0/dump.h5 Functional.cross_entropy.1.forward.output.0 2>&1)
if grep -q "mesh      (mb=2) at (0)" <<< "$out" && grep -q "placements \[Shard(0)\]" <<< "$out" &&
   grep -q "global    (4, 16, 96) offset (2, 0, 0)" <<< "$out" && grep -q "micro-batch 1" <<< "$out" &&
   grep -q "placements \[Partial(avg)\]" <<< "$loss"; then
  echo "ok   micro-batch 1's c_attn output Shard(0) of (4, 16, 96) at row 2, its loss Partial(avg)"
else
  echo "FAIL placements: $out $loss"; fail=1
fi

cmp_json() { # bench cmp -> "rc rows pass one-sided first-culprit"
  "$N" compare -b "$1" -c "$2" -o "out_$2" --format json --step 0 > "$2.cmp" 2>&1
  local rc=$?
  "$py" - "out_$2" "$rc" <<'PY'
import glob, json, sys
j = [json.load(open(f)) for f in sorted(glob.glob(sys.argv[1] + "/*.json"))][0]
s = j["summary"]
fc = j.get("first_culprit") or {}
print(sys.argv[2], len(j["rows"]), s["pass"], s["cmp-only"] + s["bench-only"],
      fc.get("call") or fc.get("name") or "none")
PY
}
for c in mb2 ${bf:-bf_mb2}; do
  [ "$c" = skip ] && continue
  read -r rc rows pass onesided culprit <<< "$(cmp_json single $c)"
  if [ "$rc" = 0 ] && [ "$rows" = 265 ] && [ "$pass" = 265 ] && [ "$onesided" = 0 ] && [ "$culprit" = none ]; then
    echo "ok   compare single $c: exit 0, 265/265 rows pass, none one-sided"
  else
    echo "FAIL compare single $c: exit $rc, $pass/$rows pass, $onesided one-sided, culprit $culprit"
    cat "$c.cmp"; fail=1
  fi
done
for c in drop ${bf:-bf_drop}; do
  [ "$c" = skip ] && continue
  "$N" compare -b single -c "$c" -o "out_$c" > "$c.cmp" 2>&1
  rc=$?
  if [ "$rc" = 1 ] && grep -q "^first culprit: Module.wte.Embedding" "$c.cmp" &&
     grep -q "in step 0 rank 0, worst output Module.wte.Embedding.parameters_grad.weight" "$c.cmp"; then
    echo "ok   $c named: Module.wte.Embedding's gradient, step 0 rank 0"
  else
    echo "FAIL $c: exit $rc"; cat "$c.cmp"; fail=1
  fi
done

# the replay recomputes every micro-batch's calls (they ran on exactly the
# leaves they dumped): twice the one-process step's 51 calls, all within
# budget; compare leaves none of them out
rp=$("$N" replay mb2/step0/rank0/dump.h5 2>&1)
one=$("$N" replay single/step0/rank0/dump.h5 2>&1 | sed -n 's/.*: \([0-9]*\) calls: .*/\1/p')
if grep -q ": $((2 * one)) calls: $((2 * one)) pass, 0 exceed" <<< "$rp" && [ "$one" -gt 0 ] &&
   ! grep -q "of the sharded layout" mb2.cmp; then
  echo "ok   replay of M=2: $((2 * one)) calls (2 x $one) pass, none left out by compare"
else
  echo "FAIL replay of the micro-batches: $rp (one process: $one calls)"; cat mb2.cmp; fail=1
fi

"$N" train "${size[@]}" --steps 1 --micro-batches 3 > bad.log 2>&1
rc=$?
if [ "$rc" = 2 ] && grep -q "micro_batches" bad.log && grep -q "3 equal micro-batches" bad.log; then
  echo "ok   --micro-batches 3 of a batch of 4 refused (exit 2)"
else
  echo "FAIL --micro-batches 3: exit $rc"; cat bad.log; fail=1
fi
exit $fail
