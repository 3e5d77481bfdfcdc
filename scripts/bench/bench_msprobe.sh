#!/usr/bin/env bash
# scripts/bench/bench_msprobe.sh [--quick] - nprobe compare on dumps in
# msprobe's format (dump.json + torch.save .pt files, read without Python),
# side by side with nprobe's own HDF5 format holding the same tensors and
# rows (gen_msprobe_dumps.py and gen_compare_dumps.py write the same data),
# runs interleaved, medians of REPS:
#   tensor mode, K float32 tensors of N elements per side (300 x 1M: 2.5 GB
#   over both sides) from the page cache: GB/s over both sides' bytes, peak RSS;
#   statistics mode, 141k rows per side: seconds and peak RSS (csv report);
#   reading dump.json alone (np_msprobe's streaming reader, msp_inspect
#   leaves): peak RSS at 1x and 10x the rows, to show it does not grow
#   with the file.
# Both sides run with --no-replay (the float64 recompute applies to nprobe's
# own tensor dumps only, and the generated tensors are random, not their calls'
# results). msprobe itself cannot be installed here: its figures (0.15 GB/s; 60 s and
# 1.1 GB for 140k rows) are DESIGN.md section 8's. Prints a Markdown section.
# Env: NPROBE_BIN (default build/release/nprobe), MSP_INSPECT (default next
# to it: tests/msprobe/msp_inspect), NP_PYTHON, BENCH_DIR (scratch, ~6 GB),
# BENCH_TENSORS / BENCH_ROWS / BENCH_REPS (other sizes than 300, 141000, 3).
set -euo pipefail
root=$(cd "$(dirname "$0")/../.." && pwd)
bin=${NPROBE_BIN:-$root/build/release/nprobe}
insp=${MSP_INSPECT:-$(dirname "$bin")/tests/msprobe/msp_inspect}
py=${NP_PYTHON:-$(dirname "$0")/../../.venv/bin/python}
here=$root/scripts/bench
K=${BENCH_TENSORS:-300} NUMEL=$((1 << 20)) SROWS=${BENCH_ROWS:-141000} REPS=${BENCH_REPS:-3}
for a in "$@"; do
  case $a in
    --quick) K=12 NUMEL=$((1 << 18)) SROWS=6000 REPS=1;;
    *) echo "bench_msprobe: unknown option $a" >&2; exit 2;;
  esac
done
[ -x "$bin" ] || { echo "bench_msprobe: $bin is not built (set NPROBE_BIN)" >&2; exit 2; }
[ -x "$insp" ] || { echo "bench_msprobe: $insp is not built (set MSP_INSPECT)" >&2; exit 2; }
"$py" -c 'import h5py, numpy, torch' 2>/dev/null || { echo "bench_msprobe: $py lacks numpy/h5py/torch" >&2; exit 2; }
work=$(mktemp -d "${BENCH_DIR:-${TMPDIR:-/tmp}}/np_bench_msprobe.XXXXXX")
trap 'rm -rf "$work"' EXIT

measure() { # CMD... -> "seconds maxrss_mb" (GNU time)
  /usr/bin/time -f "%e %M" -o "$work/time.txt" "$@" > "$work/cmd.out" 2> "$work/cmd.err" || true
  tail -1 "$work/time.txt" | awk '{ printf "%s %.1f\n", $1, $2 / 1024 }'
}
median() { sort -g | awk '{ v[NR] = $1 } END { m = (NR % 2) ? v[(NR + 1) / 2] : (v[NR / 2] + v[NR / 2 + 1]) / 2; print m }'; }
gen_both() { # name tensors numel task seed noise
  "$py" "$here/gen_msprobe_dumps.py" "$work/m$1" --tensors "$2" --numel "$3" --task "$4" --seed "$5" --noise "$6"
  "$py" "$here/gen_compare_dumps.py" "$work/n$1" --tensors "$2" --numel "$3" --task "$4" --seed "$5" --noise "$6"
}
compare() { # prefix -> "seconds peak"
  measure "$bin" compare -b "$work/${1}b" -c "$work/${1}c" -o "$work/out_$1" -q --format csv --no-replay
}

# both formats, interleaved; prints "median_msprobe peak_msprobe median_nprobe peak_nprobe"
side_by_side() {
  local t=() r=() nt=() nr=() s m
  for _ in $(seq "$REPS"); do
    read -r s m < <(compare m); t+=("$s"); r+=("$m")
    read -r s m < <(compare n); nt+=("$s"); nr+=("$m")
    rm -rf "$work"/out_m "$work"/out_n
  done
  echo "$(printf '%s\n' "${t[@]}" | median) $(printf '%s\n' "${r[@]}" | sort -g | tail -1)" \
       "$(printf '%s\n' "${nt[@]}" | median) $(printf '%s\n' "${nr[@]}" | sort -g | tail -1)"
}

echo "## compare on msprobe dumps (msprobe's format vs nprobe's, same data)"
echo
echo "The same tensors and rows written in msprobe's on-disk format (dump.json +"
echo "torch.save .pt, scripts/bench/gen_msprobe_dumps.py) and in nprobe's"
echo "(dump.h5, gen_compare_dumps.py), compared by the same \`nprobe compare\`,"
echo "interleaved in one run; all files in the page cache. Median of $REPS run(s);"
echo "peak RSS (max over runs) from GNU time; $(nproc) cores,"
echo "OMP_NUM_THREADS=${OMP_NUM_THREADS:-unset}. msprobe's own figures are DESIGN.md's"
echo "(msprobe cannot be installed here). The machine was shared with other builds."
echo
echo "Command: \`scripts/bench/bench_msprobe.sh${*:+ $*}\`"
echo
echo "| work | nprobe on msprobe's format | nprobe on nprobe's format (same data) | ratio | target | met? |"
echo "|---|---|---|---|---|---|"

# tensor mode
gen_both b "$K" "$NUMEL" tensor 1 0
gen_both c "$K" "$NUMEL" tensor 2 1e-3
cat "$work"/mb/step0/rank0/dump_tensor_data/*.pt "$work"/mc/step0/rank0/dump_tensor_data/*.pt \
    "$work"/nb/step0/rank0/dump.h5 "$work"/nc/step0/rank0/dump.h5 > /dev/null
read -r ts tr nts ntr < <(side_by_side)
awk -v k="$K" -v n="$NUMEL" -v t="$ts" -v r="$tr" -v nt="$nts" -v nr="$ntr" 'BEGIN {
  g = 2 * k * n * 4 / 1e9;
  printf "| tensor mode, %d x %d float32 per side (%.2f GB both sides) | %.2f s = %.2f GB/s, %.0f MB peak | %.2f s = %.2f GB/s, %.0f MB peak | %.2fx the time | >= 2 GB/s (msprobe 0.15 GB/s) | %s |\n",
    k, n, g, t, g / t, r, nt, g / nt, nr, t / nt, (g / t >= 2) ? "yes" : "no" }'
rm -rf "$work"/mb "$work"/mc "$work"/nb "$work"/nc

# statistics mode
gen_both b "$SROWS" 1 statistics 1 0
gen_both c "$SROWS" 1 statistics 2 1e-3
read -r ss sr nss nsr < <(side_by_side)
jmb=$(du -m "$work/mb/step0/rank0/dump.json" | cut -f1)
awk -v n="$SROWS" -v t="$ss" -v r="$sr" -v nt="$nss" -v nr="$nsr" -v j="$jmb" 'BEGIN {
  printf "| statistics mode, %d rows per side (dump.json %d MB), csv report | %.2f s, %.0f MB peak | %.2f s, %.0f MB peak | %.2fx the time | <= 2 s, <= 200 MB (msprobe 60 s, 1.1 GB) | %s |\n",
    n, j, t, r, nt, nr, t / nt, (t <= 2 && r <= 200) ? "yes" : "no" }'

# reading dump.json alone: peak memory at 1x and 10x the rows
read -r rs1 rm1 < <(measure "$insp" leaves "$work/mb/step0/rank0/dump.json")
rm -rf "$work"/mb "$work"/mc "$work"/nb "$work"/nc
"$py" "$here/gen_msprobe_dumps.py" "$work/big" --tensors $((10 * SROWS)) --numel 1 --task statistics
jbig=$(du -m "$work/big/step0/rank0/dump.json" | cut -f1)
read -r rs2 rm2 < <(measure "$insp" leaves "$work/big/step0/rank0/dump.json")
awk -v n="$SROWS" -v a="$rs1" -v b="$rm1" -v c="$rs2" -v d="$rm2" -v j="$jmb" -v jb="$jbig" 'BEGIN {
  printf "| reading dump.json (every leaf streamed), %d rows (%d MB) and %d rows (%d MB) | %.2f s, %.0f MB peak; %.2f s, %.0f MB peak | - | %.2fx the peak at 10x the file | peak independent of the dump.json size | %s |\n",
    n, j, 10 * n, jb, a, b, c, d, d / b, (d <= b * 1.25 + 16) ? "yes" : "no" }'
echo
