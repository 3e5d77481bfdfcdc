#!/usr/bin/env bash
# scripts/bench/bench_profile_task.sh NPROBE_BIN [ROUNDS] - the cost of the
# profile task (issue 29: timing every API call <= x1.02 of the runtime's GPT
# 4x256 step): each round runs `nprobe train` without, then with --profile
# (every step recorded), so both see the same load; one line per round (median
# ms per step over the timed steps, the load average) and the medians with the
# ratio. With BENCH_CALLGRIND=1 also the instruction counts of a 2-step run of
# each under callgrind (one thread; independent of the machine's load).
# Env: BENCH_SIZE "layers heads width context batch" (default "4 4 256 64 8"),
# BENCH_THREADS (default 2).
set -euo pipefail
N=${1:?usage: bench_profile_task.sh NPROBE_BIN [ROUNDS]}
rounds=${2:-5}
threads=${BENCH_THREADS:-2}
read -r L H C T Bt <<<"${BENCH_SIZE:-4 4 256 64 8}"
steps=20 warm=4
tmp=$(mktemp -d)
trap 'rm -rf "$tmp"' EXIT
model=(--model gpt --layers "$L" --heads "$H" --width "$C" --context "$T" --batch "$Bt" --seed 3)
ms() { # median ms per step of one run: nprobe train "$@"
  OMP_NUM_THREADS=$threads OPENBLAS_NUM_THREADS=$threads "$N" train "${model[@]}" \
    --steps $((steps + warm)) --threads "$threads" "$@" 2>/dev/null |
    awk -v tok=$((Bt * T)) -v warm=$warm '/^step / { s = $2; r = 0;
        for (i = 1; i <= NF; i++) if ($i == "tok/s") r = $(i - 1);
        if (s >= warm && r > 0) printf "%.6f\n", 1000.0 * tok / r }' | median
}
median() { sort -g | awk '{ v[NR] = $1 } END { if (NR == 0) { print "nan"; exit }
    m = (NR % 2) ? v[(NR + 1) / 2] : (v[NR / 2] + v[NR / 2 + 1]) / 2; printf "%.3f\n", m }'; }
echo "GPT $L x $C (heads $H, context $T, batch $Bt), $threads thread(s), $steps timed steps after $warm"
as=() bs=()
for r in $(seq "$rounds"); do
  rm -rf "$tmp/prof"
  a=$(ms) b=$(ms --profile "$tmp/prof")
  as+=("$a") bs+=("$b")
  echo "round $r: plain $a ms, profile $b ms, load $(cut -d' ' -f1 /proc/loadavg)"
done
ma=$(printf '%s\n' "${as[@]}" | median) mb=$(printf '%s\n' "${bs[@]}" | median)
echo "median: plain $ma ms, profile $mb ms, ratio $(awk -v a="$ma" -v b="$mb" 'BEGIN { printf "%.3f", b / a }')"
echo "trace: $(grep -c '"cat":"cpu_op"' "$tmp/prof/rank0.trace.json") API slices, $(du -k "$tmp/prof/rank0.trace.json" | cut -f1) KiB for $((steps + warm)) steps"
if [ "${BENCH_CALLGRIND:-0}" = 1 ]; then
  for v in plain profile; do
    extra=()
    [ $v = profile ] && extra=(--profile "$tmp/cgprof")
    valgrind --tool=callgrind --callgrind-out-file="$tmp/cg.$v" "$N" train "${model[@]}" --steps 2 --threads 1 \
      "${extra[@]}" >/dev/null 2>&1
  done
  ia=$(awk '/^totals:/ { print $2 }' "$tmp/cg.plain") ib=$(awk '/^totals:/ { print $2 }' "$tmp/cg.profile")
  echo "instructions (callgrind, 2 steps, 1 thread): plain $ia, profile $ib, ratio $(awk -v a="$ia" -v b="$ib" 'BEGIN { printf "%.4f", b / a }')"
fi
