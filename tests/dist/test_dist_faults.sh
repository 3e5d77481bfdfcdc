#!/usr/bin/env bash
# test_dist_faults.sh - the collective fault catalog (nprobe train
# --list-faults, second part) named by compare, at the GPT's default sizes,
# K = 2 ranks, npu-sim in bf16, one step dumped in tensor mode:
#   allreduce_bf16, allreduce_wrong_count  `compare --replicas` names a
#       Distributed.all_reduce call on every rank (its output is not the
#       mean of the ranks' inputs);
#   allreduce_skip_param   names the parameter gradient left out (the
#       parameter np_dist_skipped_param picks: index n/2 = h.1.ln_1.weight),
#       where the replicas part;
#   unsynced_init          names a parameters leaf on rank 1;
#   shard_drift            the replicas agree (the reduction is right), and
#       compare against the clean fp32 K-rank reference names the first call
#       on rank 1, the drifting rank, before any culprit on rank 0.
# Plain `compare -b REF -c FAULTY` names allreduce_bf16 and
# allreduce_wrong_count at that all-reduce too (the replicas stage).
# And no false alarm: the clean bf16 K-rank run against the fp32 reference
# (no culprit, no error row) and against itself (--replicas: agree).
set -u
. "$(dirname "$0")/mpi_env.sh"
K=2
train() { # dir device precision fault
  printf '{"task": "tensor", "dump_path": "%s", "level": "mix", "step": [0]}\n' "$tmp/$1" > "$1.json"
  rm -rf "$tmp/$1"
  mpirun_k $K "$nprobe" train --model gpt --steps 1 --threads 1 --device "$2" --precision "$3" \
    --fault "$4" --dump-config "$1.json" > "$1.log" 2>&1 || { echo "FAIL train $*"; cat "$1.log"; return 1; }
}
replicas() { # dir -> "call|ranks|leaf" of the first parting, and exit code
  "$nprobe" compare --replicas "$1" > "$1.rep" 2>&1
  local rc=$?
  local line
  line=$(grep '^first parting:' "$1.rep")
  echo "$rc $line"
}

train ref cpu fp32 none || exit 1
train clean npu-sim bf16 none || exit 1
"$nprobe" compare -b ref -c clean -o out_clean -q --format json
rc=$?
read -r calls errors < <("$py" - out_clean <<'PY'
import glob, json, sys
fs = sorted(glob.glob(sys.argv[1] + "/*.json"))
js = [json.load(open(f)) for f in fs]
print(sum(1 for j in js if j["first_culprit"]), sum(j["summary"]["error"] for j in js))
PY
)
if [ "$rc" = 0 ] && [ "$calls" = 0 ] && [ "$errors" = 0 ]; then
  echo "ok   clean bf16 K=$K against the fp32 reference: no culprit, no error row"
else
  echo "FAIL clean bf16 K=$K against the fp32 reference: exit $rc, $calls culprit(s), $errors error rows"; fail=1
fi
read -r rc rest < <(replicas clean)
if [ "$rc" = 0 ] && [ "$rest" = "first parting: none" ]; then
  echo "ok   clean bf16 K=$K: replicas agree"
else
  echo "FAIL clean bf16 K=$K --replicas: exit $rc: $rest"; cat clean.rep; fail=1
fi

expect() { # fault pattern-of-first-parting
  train "$1" npu-sim bf16 "$1" || { fail=1; return; }
  read -r rc rest < <(replicas "$1")
  if [ "$rc" = 1 ] && [[ $rest == $2 ]]; then
    echo "ok   $1: $rest"
  else
    echo "FAIL $1: expected exit 1 and '$2', got exit $rc: $rest"; fail=1
  fi
}
expect allreduce_bf16 "first parting: step 0, Distributed.all_reduce.0.forward (seq *), rank(s) every rank: Distributed.all_reduce.0.forward.output.0 is not the mean of the 2 ranks' inputs*"
expect allreduce_wrong_count "first parting: step 0, Distributed.all_reduce.0.forward (seq *), rank(s) every rank: *the output is 0.5 x the mean"
# plain compare against the fp32 reference names them too (issue 25: a user
# runs compare, not a flag he has not heard of): the cmp side's ranks are
# checked against each other and the collective is the first culprit
plain() { # fault expected-first-culprit
  "$nprobe" compare -b ref -c "$1" -o "out_$1" -q --format json > "$1.cmp" 2>&1
  local rc=$? first
  first=$("$py" - "out_$1" <<'PY'
import glob, json, sys
best = None
for f in sorted(glob.glob(sys.argv[1] + "/*.json")):
    j = json.load(open(f))
    fc = j["first_culprit"]
    rank = int(f.split("_rank")[1].split("_")[0])
    if fc and (best is None or (fc["seq"], rank) < best[:2]):
        best = (fc["seq"], rank, fc["call"])
print("none" if best is None else f"rank{best[1]} {best[2]}")
PY
)
  if [ "$rc" = 1 ] && [ "$first" = "$2" ]; then
    echo "ok   $1: plain compare against the reference: first culprit $first"
  else
    echo "FAIL $1: plain compare: expected exit 1 and '$2', got exit $rc, '$first'"; cat "$1.cmp"; fail=1
  fi
}
plain allreduce_bf16 "rank0 Distributed.all_reduce.0.forward"
plain allreduce_wrong_count "rank0 Distributed.all_reduce.0.forward"
expect allreduce_skip_param "first parting: step 0, Module.h.1.ln_1.LayerNorm (seq *), rank(s) 1: the replicas part: Module.h.1.ln_1.LayerNorm.parameters_grad.weight differs*"
expect unsynced_init "first parting: step 0, Module.wte.Embedding.forward.0 (seq *), rank(s) 1: the replicas part: Module.wte.Embedding.forward.0.parameters.weight differs*"

# shard_drift: the reduction is right, the data is not
train shard_drift npu-sim bf16 shard_drift || exit 1
read -r rc rest < <(replicas shard_drift)
[ "$rc" = 0 ] || { echo "FAIL shard_drift: --replicas should agree, exit $rc: $rest"; fail=1; }
"$nprobe" compare -b ref -c shard_drift -o out_drift -q --format json
rc=$?
first=$("$py" - out_drift <<'PY'
import glob, json, sys
best = None
for f in sorted(glob.glob(sys.argv[1] + "/*.json")):
    j = json.load(open(f))
    fc = j["first_culprit"]
    rank = int(f.split("_rank")[1].split("_")[0])
    if fc and (best is None or (fc["seq"], rank) < best[:2]):
        best = (fc["seq"], rank, fc["call"])
print("none" if best is None else f"rank{best[1]} {best[2]}")
PY
)
if [ "$rc" = 1 ] && [ "$first" = "rank1 Functional.embedding.0.forward" ]; then
  echo "ok   shard_drift: replicas agree; against the reference the first culprit is $first"
else
  echo "FAIL shard_drift: expected rank1 Functional.embedding.0.forward, got '$first' (exit $rc)"; fail=1
fi
# one rank is not a set of replicas: a usage error naming the step
"$nprobe" compare --replicas ref/step0/rank0 > one.out 2> one.err
rc=$?
if [ $rc = 2 ] && grep -q "no step can be checked: step 0 not checked: one complete rank (rank 0)" one.err; then
  echo "ok   --replicas on one rank: exit 2, $(cat one.err)"
else
  echo "FAIL --replicas on one rank: exit $rc"; cat one.err; fail=1
fi
exit $fail
