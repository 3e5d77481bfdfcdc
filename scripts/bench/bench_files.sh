#!/usr/bin/env bash
# scripts/bench/bench_files.sh [--quick] - the cost per step file (issue 13):
#   two 100-step statistics dumps of the default GPT at level mix (467 rows
#   per step; bench fp32, cmp bf16 autocast), written by `nprobe dump` here;
#   `nprobe compare` of the 100 step-file pairs (csv reports) and `nprobe ls`
#   of one side, interleaved with an h5py script that only reads both sides'
#   /entries and /calls tables (h5py_tables.py, its fastest way), medians;
#   then the same per-file work over 100, 1000 and 8000 step files per side
#   (1000 steps x 8 ranks, hard links to the 100 files: link_steps.py), to
#   show that the time per file does not grow with the number of files.
# --quick: 10 steps, up to 200 files, 1 repetition. Env: NPROBE_BIN, NP_PYTHON,
# BENCH_DIR (scratch space, default a temp dir).
set -euo pipefail
root=$(cd "$(dirname "$0")/../.." && pwd)
bin=${NPROBE_BIN:-$root/build/release/nprobe}
py=${NP_PYTHON:-$(dirname "$0")/../../.venv/bin/python}
here=$root/scripts/bench
STEPS=100 REPS=5 SCALES="100 1000 8000"
for a in "$@"; do
  case $a in
    --quick) STEPS=10 REPS=1 SCALES="16 200";;
    *) echo "bench_files: unknown option $a" >&2; exit 2;;
  esac
done
[ -x "$bin" ] || { echo "bench_files: $bin is not built (set NPROBE_BIN)" >&2; exit 2; }
"$py" -c 'import h5py, numpy' 2>/dev/null || { echo "bench_files: $py lacks numpy/h5py" >&2; exit 2; }
work=$(mktemp -d "${BENCH_DIR:-${TMPDIR:-/tmp}}/np_bench_files.XXXXXX")
trap 'rm -rf "$work"' EXIT

# run CMD... and print "seconds maxrss_mb" (GNU time); output discarded
measure() {
  /usr/bin/time -f "%e %M" -o "$work/time.txt" "$@" > /dev/null 2> "$work/cmd.err" || true
  tail -1 "$work/time.txt" | awk '{ printf "%s %.1f\n", $1, $2 / 1024 }'
}
median() { sort -g | awk '{ v[NR] = $1 } END { m = (NR % 2) ? v[(NR + 1) / 2] : (v[NR / 2] + v[NR / 2 + 1]) / 2; print m }'; }

config() { # dump_path
  printf '{"task": "statistics", "dump_path": "%s", "rank": [], "step": [], "level": "mix",
  "async_dump": false, "statistics": {"scope": [], "list": [], "data_mode": ["all"],
  "summary_mode": "statistics"}}\n' "$1"
}
config "$work/b" > "$work/b.json"
config "$work/c" > "$work/c.json"
"$bin" dump -c "$work/b.json" -- "$bin" train --steps "$STEPS" --threads 1 > /dev/null 2>&1
"$bin" dump -c "$work/c.json" -- "$bin" train --steps "$STEPS" --threads 1 --precision bf16 \
  > /dev/null 2>&1
rows=$("$py" "$here/h5py_tables.py" "$work/b" "$work/c")
cat "$work"/b/step*/rank*/dump.h5 "$work"/c/step*/rank*/dump.h5 > /dev/null  # page cache

tc=() tl=() th=() mc=()
for _ in $(seq "$REPS"); do
  read -r s m < <(measure "$bin" compare -b "$work/b" -c "$work/c" -o "$work/out" -q --format csv)
  tc+=("$s"); mc+=("$m")
  read -r s m < <(measure "$py" "$here/h5py_tables.py" "$work/b" "$work/c"); th+=("$s")
  read -r s m < <(measure "$bin" ls "$work/b"); tl+=("$s")
  rm -rf "$work/out"
done
c=$(printf '%s\n' "${tc[@]}" | median); h=$(printf '%s\n' "${th[@]}" | median)
l=$(printf '%s\n' "${tl[@]}" | median); cm=$(printf '%s\n' "${mc[@]}" | sort -g | tail -1)

echo "## Cost per step file (nprobe compare / ls vs an h5py read of the tables)"
echo
echo "Two $STEPS-step statistics dumps of the default GPT (nprobe train, level mix,"
echo "bench fp32 against cmp bf16 autocast), $rows table rows over both sides, in the"
echo "page cache. Baseline: scripts/bench/h5py_tables.py reading only both sides'"
echo "/entries and /calls with h5py (the file's own type as memory type: no"
echo "conversion), interpreter start included. Median of $REPS interleaved run(s);"
echo "$(nproc) cores, OMP_NUM_THREADS=${OMP_NUM_THREADS:-unset}. The scaling rows run the"
echo "same per-file work over N step files per side (hard links to the $STEPS files,"
echo "8 ranks per step), one run each: milliseconds per step file."
echo
echo "Command: \`scripts/bench/bench_files.sh${*:+ $*}\`"
echo
echo "| work | nprobe | baseline | ratio | target | met? |"
echo "|---|---|---|---|---|---|"
awk -v n="$STEPS" -v c="$c" -v h="$h" -v m="$cm" 'BEGIN {
  printf "| compare of %d step-file pairs, csv reports | %.2f s, %.0f MB peak | %.2f s (h5py reads both sides'"'"' tables) | %.2fx | <= 1.5x | %s |\n",
    n, c, m, h, c / h, (c <= 1.5 * h) ? "yes" : "no" }'
awk -v n="$STEPS" -v l="$l" -v h="$h" 'BEGIN {
  printf "| ls of %d step files | %.2f s | %.2f s (h5py reads both sides'"'"' tables) | %.2fx | < 1x | %s |\n",
    n, l, h, l / h, (l < h) ? "yes" : "no" }'
first_c="" first_l=""
for n in $SCALES; do
  ranks=8; [ "$n" -lt 8 ] && ranks=1
  "$py" "$here/link_steps.py" "$work/b" "$work/sb$n" $((n / ranks)) "$ranks"
  "$py" "$here/link_steps.py" "$work/c" "$work/sc$n" $((n / ranks)) "$ranks"
  read -r s m < <(measure "$bin" compare -b "$work/sb$n" -c "$work/sc$n" -o "$work/out$n" -q --format csv)
  read -r s2 m2 < <(measure "$bin" ls "$work/sb$n")
  pc=$(awk -v s="$s" -v n="$n" 'BEGIN { printf "%.2f", 1000 * s / n }')
  pl=$(awk -v s="$s2" -v n="$n" 'BEGIN { printf "%.2f", 1000 * s / n }')
  if [ -z "$first_c" ]; then
    first_c=$pc first_l=$pl first_n=$n
    echo "| compare, $n step-file pairs | $pc ms per pair ($s s, $m MB peak) | - | - | - | - |"
    echo "| ls, $n step files | $pl ms per file ($s2 s) | - | - | - | - |"
  else
    awk -v n="$n" -v p="$pc" -v f="$first_c" -v fn="$first_n" -v s="$s" -v m="$m" 'BEGIN {
      printf "| compare, %d step-file pairs | %.2f ms per pair (%.1f s, %.0f MB peak) | %.2f ms per pair at %d | %.2fx | no growth per file (<= 1.25x) | %s |\n",
        n, p, s, m, f, fn, p / f, (p <= 1.25 * f) ? "yes" : "no" }'
    awk -v n="$n" -v p="$pl" -v f="$first_l" -v fn="$first_n" -v s="$s2" 'BEGIN {
      printf "| ls, %d step files | %.2f ms per file (%.1f s) | %.2f ms per file at %d | %.2fx | no growth per file (<= 1.25x) | %s |\n",
        n, p, s, f, fn, p / f, (p <= 1.25 * f) ? "yes" : "no" }'
  fi
  rm -rf "$work/sb$n" "$work/sc$n" "$work/out$n"
done
echo
