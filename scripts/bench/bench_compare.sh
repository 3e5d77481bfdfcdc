#!/usr/bin/env bash
# scripts/bench/bench_compare.sh [--quick] [--flat] - nprobe compare against a
# numpy + h5py script computing the same metrics over the same tensors
# (numpy_compare.py), side by side in the same run:
#   tensor mode, K float32 tensors of N elements per side (default 300 x 1M,
#   2.4 GB over both sides) read from the page cache: GB/s over both sides'
#   bytes, peak RSS, ratio;
#   statistics mode, 141k rows per side: seconds and peak RSS (csv report and
#   xlsx report timed separately);
#   flat memory: nprobe compare alone on dumps of 1 GB and of 10 GB per side
#   (one run each; the 10 GB pair may not fit the page cache): GB/s and peak
#   RSS, to show that the peak does not grow with the dump size.
# nprobe compare runs with --no-replay: the generated tensors are random
# ("Functional.linear" calls whose outputs are not their inputs' product), so
# the float64 recompute of the cmp side's calls (on by default, about the
# model's own compute; see the replay rows) would time 1024^3 matmuls, not the
# comparison both tools make.
# --quick uses small sizes to check that the script works. Prints a Markdown
# section. Env: NPROBE_BIN (default build/release/nprobe), NP_PYTHON,
# BENCH_DIR (scratch space, default a temp dir; needs 2x the largest dump,
# 20 GB).
set -euo pipefail
root=$(cd "$(dirname "$0")/../.." && pwd)
bin=${NPROBE_BIN:-$root/build/release/nprobe}
py=${NP_PYTHON:-$(dirname "$0")/../../.venv/bin/python}
here=$root/scripts/bench
K=300 NUMEL=$((1 << 20)) SROWS=141000 REPS=3
# flat memory: tensors of 1M float32 (4 MiB) per side: 256 = 1 GiB, 2560 = 10 GiB
FLAT_SMALL=256 FLAT_LARGE=2560 FLAT_NUMEL=$((1 << 20))
for a in "$@"; do
  case $a in
    --quick) K=20 NUMEL=$((1 << 18)) SROWS=20000 REPS=1 FLAT_SMALL=4 FLAT_LARGE=40;;
    *) echo "bench_compare: unknown option $a" >&2; exit 2;;
  esac
done
[ -x "$bin" ] || { echo "bench_compare: $bin is not built (set NPROBE_BIN)" >&2; exit 2; }
"$py" -c 'import h5py, numpy' 2>/dev/null || { echo "bench_compare: $py lacks numpy/h5py" >&2; exit 2; }
work=$(mktemp -d "${BENCH_DIR:-${TMPDIR:-/tmp}}/np_bench_compare.XXXXXX")
trap 'rm -rf "$work"' EXIT

# run CMD... and print "seconds maxrss_mb" (GNU time)
measure() {
  /usr/bin/time -f "%e %M" -o "$work/time.txt" "$@" > "$work/cmd.out" 2> "$work/cmd.err" || true
  tail -1 "$work/time.txt" | awk '{ printf "%s %.1f\n", $1, $2 / 1024 }'
}
median() { sort -g | awk '{ v[NR] = $1 } END { m = (NR % 2) ? v[(NR + 1) / 2] : (v[NR / 2] + v[NR / 2 + 1]) / 2; print m }'; }

gen() { # dir tensors numel task seed noise
  "$py" "$here/gen_compare_dumps.py" "$1" --tensors "$2" --numel "$3" --task "$4" --seed "$5" --noise "$6"
}

tensor_case() { # label tensors numel -> prints a table row
  local label=$1 k=$2 n=$3
  gen "$work/b" "$k" "$n" tensor 1 0 && gen "$work/c" "$k" "$n" tensor 2 1e-3
  cat "$work"/b/step0/rank0/dump.h5 "$work"/c/step0/rank0/dump.h5 > /dev/null  # page cache
  local bytes=$((2 * k * n * 4)) t=() r=() nt=() nr=()
  for _ in $(seq "$REPS"); do
    read -r s m < <(measure "$bin" compare -b "$work/b" -c "$work/c" -o "$work/out" -q --format csv --no-replay)
    t+=("$s"); r+=("$m")
    read -r s m < <(measure "$py" "$here/numpy_compare.py" "$work/b/step0/rank0/dump.h5" "$work/c/step0/rank0/dump.h5")
    nt+=("$s"); nr+=("$m")
  done
  local ts nts rs nrs
  ts=$(printf '%s\n' "${t[@]}" | median); nts=$(printf '%s\n' "${nt[@]}" | median)
  rs=$(printf '%s\n' "${r[@]}" | sort -g | tail -1); nrs=$(printf '%s\n' "${nr[@]}" | sort -g | tail -1)
  awk -v l="$label" -v b="$bytes" -v t="$ts" -v nt="$nts" -v r="$rs" -v nr="$nrs" 'BEGIN {
    g = b / 1e9; met = (g / t >= 2) ? "yes" : "no";
    printf "| tensor mode, %s (%.2f GB both sides) | %.2f s = %.2f GB/s, %.0f MB peak | %.2f s = %.2f GB/s, %.0f MB peak | %.1fx | >= 2 GB/s | %s |\n",
      l, g, t, g / t, r, nt, g / nt, nr, nt / t, met }'
  rm -rf "$work/b" "$work/c" "$work/out"
}

flat_case() { # tensors -> prints "seconds peak_mb gb" for one nprobe compare run
  local k=$1 n=$FLAT_NUMEL
  gen "$work/b" "$k" "$n" tensor 1 0 && gen "$work/c" "$k" "$n" tensor 2 1e-3
  local s m
  read -r s m < <(measure "$bin" compare -b "$work/b" -c "$work/c" -o "$work/out" -q --format csv --no-replay)
  echo "$s $m $(awk -v k="$k" -v n="$n" 'BEGIN { printf "%.2f", k * n * 4 / 1e9 }')"
  rm -rf "$work/b" "$work/c" "$work/out"
}

stats_case() { # format -> prints a table row (median seconds, max peak RSS)
  local fmt=$1 t=() r=()
  for _ in $(seq "$REPS"); do
    read -r s m < <(measure "$bin" compare -b "$work/sb" -c "$work/sc" -o "$work/out" -q --format "$fmt" --no-replay)
    t+=("$s"); r+=("$m")
  done
  local ts rs
  ts=$(printf '%s\n' "${t[@]}" | median); rs=$(printf '%s\n' "${r[@]}" | sort -g | tail -1)
  awk -v f="$fmt" -v n="$SROWS" -v t="$ts" -v r="$rs" 'BEGIN {
    met = (t < 1 ? "time yes" : "time no") ", " (r < 100 ? "memory yes" : "memory no");
    printf "| statistics mode, %d rows per side, %s report | %.2f s, %.0f MB peak | msprobe 52-56 s, 1.5 GB | %.0fx | < 1 s, < 100 MB | %s |\n",
      n, f, t, r, 54 / t, met }'
  rm -rf "$work/out"
}

echo "## compare (nprobe compare vs numpy + h5py)"
echo
echo "Tensor mode: both dumps in the page cache, all six metrics per pair; the"
echo "numpy baseline (scripts/bench/numpy_compare.py) reads each pair with h5py and"
echo "computes the same metrics in float64, in the same run. Statistics mode: the"
echo "baseline is msprobe's figure from DESIGN.md section 8 (not rerun here)."
echo "nprobe runs with --no-replay (the same comparison as the baseline; the float64"
echo "recompute of the cmp side, on by default, costs about the model's compute:"
echo "a GPT step's compare takes about 2x with it)."
echo "Median of $REPS run(s); peak RSS (max over runs) from GNU time; $(nproc) cores,"
echo "OMP_NUM_THREADS=${OMP_NUM_THREADS:-unset}."
echo
echo "Command: \`scripts/bench/bench_compare.sh${*:+ $*}\`"
echo
echo "| work | nprobe | baseline | ratio | target | met? |"
echo "|---|---|---|---|---|---|"
tensor_case "$K x $NUMEL float32 per side" "$K" "$NUMEL"
# peak memory against the dump size: the same work, 10x the data
read -r fs1 fm1 fg1 < <(flat_case "$FLAT_SMALL")
read -r fs2 fm2 fg2 < <(flat_case "$FLAT_LARGE")
awk -v s1="$fs1" -v m1="$fm1" -v g1="$fg1" -v s2="$fs2" -v m2="$fm2" -v g2="$fg2" 'BEGIN {
  met = (m2 <= m1 * 1.25 + 16) ? "yes" : "no";
  printf "| tensor mode, peak memory: %.2f GB per side | %.2f s = %.2f GB/s, %.0f MB peak | - | - | peak independent of the dump size | - |\n", g1, s1, 2 * g1 / s1, m1;
  printf "| tensor mode, peak memory: %.2f GB per side (10x) | %.2f s = %.2f GB/s, %.0f MB peak | %.0f MB peak at %.2f GB per side | %.2fx the peak | peak independent of the dump size | %s |\n", g2, s2, 2 * g2 / s2, m2, m1, g1, m2 / m1, met }'
gen "$work/sb" "$SROWS" 1 statistics 1 0 && gen "$work/sc" "$SROWS" 1 statistics 2 1e-3
stats_case csv
stats_case json
stats_case xlsx
echo
