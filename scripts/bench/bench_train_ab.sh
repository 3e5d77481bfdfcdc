#!/usr/bin/env bash
# scripts/bench/bench_train_ab.sh BASE_BIN NEW_BIN [ROUNDS] - the GPT training
# step of two nprobe builds side by side (a change to the runtime against the
# build before it): each round runs BASE then NEW (`nprobe train`, median ms
# per step over the timed steps), so both see the same load; prints one line
# per round and the medians with the ratio NEW / BASE. With BENCH_CALLGRIND=1
# also the instruction counts of a 2-step run of each under callgrind (one
# thread; independent of the machine's load). Env: BENCH_SIZE "layers heads
# width context batch" (default "4 4 128 64 8"), BENCH_THREADS (default 2).
set -euo pipefail
A=${1:?usage: bench_train_ab.sh BASE_BIN NEW_BIN [ROUNDS]}
B=${2:?usage: bench_train_ab.sh BASE_BIN NEW_BIN [ROUNDS]}
rounds=${3:-5}
threads=${BENCH_THREADS:-2}
read -r L H C T Bt <<<"${BENCH_SIZE:-4 4 128 64 8}"
steps=20 warm=4
model=(--model gpt --layers "$L" --heads "$H" --width "$C" --context "$T" --batch "$Bt" --seed 3)
ms() { # median ms per step of one run of binary $1
  OMP_NUM_THREADS=$threads OPENBLAS_NUM_THREADS=$threads "$1" train "${model[@]}" \
    --steps $((steps + warm)) --threads "$threads" |
    awk -v tok=$((Bt * T)) -v warm=$warm '/^step / { s = $2; r = 0;
        for (i = 1; i <= NF; i++) if ($i == "tok/s") r = $(i - 1);
        if (s >= warm && r > 0) printf "%.6f\n", 1000.0 * tok / r }' |
    sort -g | awk '{ v[NR] = $1 } END { if (NR == 0) { print "nan"; exit }
        m = (NR % 2) ? v[(NR + 1) / 2] : (v[NR / 2] + v[NR / 2 + 1]) / 2; printf "%.3f\n", m }'
}
median() { sort -g | awk '{ v[NR] = $1 } END { m = (NR % 2) ? v[(NR + 1) / 2] : (v[NR / 2] + v[NR / 2 + 1]) / 2; printf "%.3f\n", m }'; }
echo "GPT $L x $C (heads $H, context $T, batch $Bt), $threads thread(s), $steps timed steps after $warm"
as=() bs=()
for r in $(seq "$rounds"); do
  a=$(ms "$A") b=$(ms "$B")
  as+=("$a") bs+=("$b")
  echo "round $r: base $a ms, new $b ms, load $(cut -d' ' -f1 /proc/loadavg)"
done
ma=$(printf '%s\n' "${as[@]}" | median) mb=$(printf '%s\n' "${bs[@]}" | median)
echo "median: base $ma ms, new $mb ms, ratio new/base $(awk -v a="$ma" -v b="$mb" 'BEGIN { printf "%.3f", b / a }')"
if [ "${BENCH_CALLGRIND:-0}" = 1 ]; then
  tmp=$(mktemp -d)
  trap 'rm -rf "$tmp"' EXIT
  for v in A B; do
    bin=${!v}
    valgrind --tool=callgrind --callgrind-out-file="$tmp/cg.$v" "$bin" train "${model[@]}" --steps 2 --threads 1 \
      >/dev/null 2>&1
  done
  ia=$(awk '/^totals:/ { print $2 }' "$tmp/cg.A") ib=$(awk '/^totals:/ { print $2 }' "$tmp/cg.B")
  echo "instructions (callgrind, 2 steps, 1 thread): base $ia, new $ib, ratio $(awk -v a="$ia" -v b="$ib" 'BEGIN { printf "%.4f", b / a }')"
fi
