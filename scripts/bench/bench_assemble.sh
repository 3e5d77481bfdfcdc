#!/usr/bin/env bash
# bench_assemble.sh - compare's assemble stage (docs/COMPARE.md "Sharded
# layouts"): `nprobe compare` of a one-process GPT tensor dump against a
# TP2 x DP2 run of the same model (mpirun -n 4 nprobe train --tp 2: every
# logical tensor rebuilt from the 4 rank files), and, interleaved in the same
# run, the baseline: the same one-process dump against a second one-process
# run (the same logical rows, nothing to assemble). Medians of R rounds;
# GB/s over both sides' file bytes; peak RSS from /usr/bin/time. The ratio
# (assembled time / baseline time) is the figure to keep: the machine is
# shared and its load moves the absolute numbers; the CPU seconds of the
# compare process (user + sys) move less, and GB per CPU second is given
# beside GB/s.
# Prints a Markdown section on stdout.  --quick: small sizes.  --pp: the
# sharded side is TP2 x DP2 x PP2 on 8 ranks (mpirun -n 8 nprobe train
# --tp 2 --pp 2: 2 pipeline stages of 2 data-parallel groups of 2 TP
# ranks).  BATCH=N: the global batch (default 16; the dump grows with it);
# REPS=R: the rounds (default 5, --quick 3).
set -euo pipefail
bin=${NPROBE_BIN:?set NPROBE_BIN}
quick=0 pp=0
for a in "$@"; do
  case $a in --quick) quick=1 ;; --pp) pp=1 ;; *) echo "bench_assemble: unknown option $a" >&2; exit 2 ;; esac
done
command -v mpirun > /dev/null || { echo "bench_assemble: mpirun not found" >&2; exit 2; }
export OMPI_ALLOW_RUN_AS_ROOT=1 OMPI_ALLOW_RUN_AS_ROOT_CONFIRM=1
load0=$(cut -d' ' -f1-3 /proc/loadavg)
tmp=$(mktemp -d)
trap 'rm -rf "$tmp"' EXIT
run_k() { local k=$1; shift; mpirun -n "$k" --oversubscribe --bind-to none -x OMP_NUM_THREADS=1 -x OPENBLAS_NUM_THREADS=1 "$@"; }
med() { sort -g | awk '{ v[NR] = $1 } END { m = (NR % 2) ? v[(NR + 1) / 2] : (v[NR / 2] + v[NR / 2 + 1]) / 2; printf "%.3f\n", m }'; }

if [ $quick = 1 ]; then size=(--layers 2 --width 64 --context 32 --batch "${BATCH:-8}"); reps=${REPS:-3}
else size=(--layers 4 --width 256 --context 64 --batch "${BATCH:-16}"); reps=${REPS:-5}; fi
ranks=4 layout="TP2 x DP2" extra=(--tp 2)
if [ $pp = 1 ]; then ranks=8 layout="TP2 x DP2 x PP2" extra=(--tp 2 --pp 2); fi
dump() { # name ranks
  printf '{"task": "tensor", "dump_path": "%s/%s", "level": "mix", "step": [0]}\n' "$tmp" "$1" > "$tmp/$1.json"
  local cmd=("$bin" train --model gpt "${size[@]}" --steps 1 --threads 1 --dump-config "$tmp/$1.json")
  if [ "$2" = 1 ]; then "${cmd[@]}" > /dev/null 2>&1; else run_k "$2" "${cmd[@]}" "${extra[@]}" > /dev/null 2>&1; fi
}
dump single 1
dump single2 1
dump tpdp "$ranks"
b_single=$(du -sb "$tmp/single" | cut -f1)
b_single2=$(du -sb "$tmp/single2" | cut -f1)
b_tpdp=$(du -sb "$tmp/tpdp" | cut -f1)
one() { # cmp-side -> "seconds peak_kib cpu_seconds"
  rm -rf "$tmp/out"
  /usr/bin/time -f "%e %M %U %S" -o "$tmp/time" "$bin" compare -b "$tmp/single" -c "$tmp/$1" -o "$tmp/out" \
    --no-replay -q --format json > /dev/null 2>&1 || true
  awk '{ printf "%s %s %.2f\n", $1, $2, $3 + $4 }' "$tmp/time"
}
: > "$tmp/base"; : > "$tmp/asm"
for r in $(seq "$reps"); do
  one single2 >> "$tmp/base"
  one tpdp >> "$tmp/asm"
done
tb=$(cut -d' ' -f1 "$tmp/base" | med); ta=$(cut -d' ' -f1 "$tmp/asm" | med)
mb=$(cut -d' ' -f2 "$tmp/base" | med); ma=$(cut -d' ' -f2 "$tmp/asm" | med)
cb=$(cut -d' ' -f3 "$tmp/base" | med); ca=$(cut -d' ' -f3 "$tmp/asm" | med)
rm -rf "$tmp/out"
"$bin" compare -b "$tmp/single" -c "$tmp/tpdp" -o "$tmp/out" --no-replay --format json > "$tmp/check" 2>&1 || true
grep -q "first culprit: none" "$tmp/check" || { echo "bench_assemble: the $layout pair is not clean:" >&2; cat "$tmp/check" >&2; exit 1; }
load1=$(cut -d' ' -f1-3 /proc/loadavg)
awk -v tb="$tb" -v ta="$ta" -v mb="$mb" -v ma="$ma" -v cb="$cb" -v ca="$ca" -v bs="$b_single" -v b2="$b_single2" -v bt="$b_tpdp" \
    -v reps="$reps" -v size="${size[*]}" -v l0="$load0" -v l1="$load1" -v lay="$layout" -v rk="$ranks" 'BEGIN {
  printf "## Assembly (bench_assemble.sh)\n\n"
  printf "GPT %s, 1 step, tensor task, level mix; medians of %d interleaved rounds; load %s -> %s.\n\n", size, reps, l0, l1
  printf "| pair | bytes (both sides) | time | GB/s | CPU s | GB per CPU s | peak RSS |\n|---|---|---|---|---|---|---|\n"
  printf "| one process vs one process (baseline) | %.1f MB | %.3f s | %.2f | %.2f | %.2f | %.0f MB |\n", (bs + b2) / 1e6, tb, (bs + b2) / 1e9 / tb, cb, (bs + b2) / 1e9 / cb, mb / 1024
  printf "| one process vs %s (%d rank files assembled) | %.1f MB | %.3f s | %.2f | %.2f | %.2f | %.0f MB |\n", lay, rk, (bs + bt) / 1e6, ta, (bs + bt) / 1e9 / ta, ca, (bs + bt) / 1e9 / ca, ma / 1024
  printf "\nassembled / baseline: x%.2f the time, x%.2f the CPU time, x%.2f the peak RSS\n", ta / tb, ca / cb, ma / mb
}'
