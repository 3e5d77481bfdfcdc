#!/usr/bin/env bash
# scripts/bench/bench_gemm64.sh [--quick] - the replay's float64 GEMM in
# `nprobe compare` (issue 31: replay speed >= 2 GB/s): OpenBLAS's dgemm as
# the machine gets it (OpenBLAS 0.3.21 falls back to its SSE3 "Prescott"
# kernel on CPUs it does not know) against nprobe's own blocked kernel
# (NPROBE_GEMM=own, ops/gemm64.c), with --no-replay as the floor, on the
# pair of bench_compare_replay.sh (K float32 tensors of N elements per side,
# default 300 x 1M = 2.52 GB over both sides, Functional.linear calls,
# gen_compare_dumps.py; the replay recomputes the 1024 x 1024 culprit call on
# both sides). Interleaved rounds, medians of REPS; GB/s over both sides'
# bytes; CPU seconds (user + sys); the ratio of what the replay adds (CPU
# over the --no-replay run) with the own GEMM to that with OpenBLAS, taken
# in the same run; each run's first culprit and exit status, which must be
# the same. Prints a Markdown section. Env: NPROBE_BIN (default
# build/release/nprobe), NP_PYTHON (default the repository's .venv),
# BENCH_DIR (scratch, 2.5 GB at the default size, removed at the end),
# BENCH_TENSORS / BENCH_NUMEL / BENCH_REPS, BENCH_CORETYPE (adds a run with
# OpenBLAS's kernel named by OPENBLAS_CORETYPE, e.g. SkylakeX, for reference).
set -euo pipefail
root=$(cd "$(dirname "$0")/../.." && pwd)
bin=${NPROBE_BIN:-$root/build/release/nprobe}
py=${NP_PYTHON:-$root/.venv/bin/python}
K=${BENCH_TENSORS:-300} NUMEL=${BENCH_NUMEL:-$((1 << 20))} REPS=${BENCH_REPS:-5}
for a in "$@"; do
  case $a in
    --quick) K=12 NUMEL=$((1 << 20)) REPS=3;;
    *) echo "bench_gemm64: unknown option $a" >&2; exit 2;;
  esac
done
[ -x "$bin" ] || { echo "bench_gemm64: $bin is not built (set NPROBE_BIN)" >&2; exit 2; }
work=$(mktemp -d "${BENCH_DIR:-${TMPDIR:-/tmp}}/np_bench_gemm64.XXXXXX")
trap 'rm -rf "$work"' EXIT
gen() { "$py" "$root/scripts/bench/gen_compare_dumps.py" "$1" --tensors "$K" --numel "$NUMEL" --task tensor --seed "$2" --noise "$3"; }
gen "$work/nb" 1 0
gen "$work/nc" 2 1e-3
cat "$work"/n[bc]/step0/rank0/dump.h5 > /dev/null
load0=$(cut -d' ' -f1-3 /proc/loadavg)
core=$( (OPENBLAS_VERBOSE=2 "$bin" compare -b "$work/nb" -c "$work/nc" -o "$work/o0" --format csv 2>&1 >/dev/null || true) | sed -n 's/.*Core: *//p' | head -1)
rm -rf "$work/o0"

measure() { # CMD... -> "seconds exit cpu_seconds"
  local rc=0
  /usr/bin/time -f "%e %U %S" -o "$work/time.txt" "$@" > "$work/cmd.out" 2> "$work/cmd.err" || rc=$?
  tail -1 "$work/time.txt" | awk -v rc="$rc" '{ printf "%s %s %.2f\n", $1, rc, $2 + $3 }'
}
median() { sort -g | awk '{ v[NR] = $1 } END { m = (NR % 2) ? v[(NR + 1) / 2] : (v[NR / 2] + v[NR / 2 + 1]) / 2; print m }'; }

base="$bin compare -b $work/nb -c $work/nc -o OUT --format csv"
variants=("OpenBLAS dgemm (default)|env -u NPROBE_GEMM $base"
          "own GEMM (NPROBE_GEMM=own)|env NPROBE_GEMM=own $base"
          "--no-replay (the floor)|$base --no-replay")
if [ -n "${BENCH_CORETYPE:-}" ]; then # OpenBLAS's own kernel for this CPU, named by hand
  variants+=("OpenBLAS dgemm, OPENBLAS_CORETYPE=$BENCH_CORETYPE|env -u NPROBE_GEMM OPENBLAS_CORETYPE=$BENCH_CORETYPE $base")
fi
declare -A secs cpus verdict
for _ in $(seq "$REPS"); do
  for v in "${variants[@]}"; do
    label=${v%%|*} cmd=${v#*|}
    rm -rf "$work/out" && mkdir -p "$work/out"
    # shellcheck disable=SC2086
    read -r s rc cpu < <(measure ${cmd//OUT/$work/out})
    secs[$label]+="$s "
    cpus[$label]+="$cpu "
    verdict[$label]="first culprit $(grep -m1 '^  first culprit: ' "$work/cmd.out" | sed -e 's/^  first culprit: //' -e 's/[ :].*//'), exit $rc"
  done
done
bytes=$((2 * K * NUMEL * 4))
echo "## the replay's float64 GEMM (bench_gemm64.sh)"
echo
echo "$K x $NUMEL float32 tensors per side ($(awk -v b=$bytes 'BEGIN { printf "%.2f", b / 1e9 }') GB over both sides), Functional.linear calls,"
echo "interleaved, median of $REPS; $(nproc) cores, load $(cut -d' ' -f1-3 /proc/loadavg) at the end (at the start:"
echo "$load0); OpenBLAS core: ${OPENBLAS_CORETYPE:-${core:-unknown} (detected)}."
echo
echo "Command: \`scripts/bench/bench_gemm64.sh${*:+ $*}\`"
echo
echo "| work | time | cpu | GB/s | verdict |"
echo "|---|---|---|---|---|"
declare -A tm cm
for v in "${variants[@]}"; do
  label=${v%%|*}
  tm[$label]=$(printf '%s\n' ${secs[$label]} | median)
  cm[$label]=$(printf '%s\n' ${cpus[$label]} | median)
  awk -v l="$label" -v t="${tm[$label]}" -v c="${cm[$label]}" -v b="$bytes" -v vd="${verdict[$label]}" 'BEGIN {
    printf "| %s | %.2f s | %.2f s | %.2f | %s |\n", l, t, c, b / 1e9 / t, vd }'
done
blas=${variants[0]%%|*} own=${variants[1]%%|*} floor=${variants[2]%%|*}
awk -v b="${cm[$blas]}" -v o="${cm[$own]}" -v f="${cm[$floor]}" 'BEGIN {
  if (b - f > 0) printf "\nwhat the replay adds (CPU over --no-replay): OpenBLAS %.2f s, own %.2f s: own/OpenBLAS = %.2f\n", b - f, o - f, (o - f) / (b - f) }'
