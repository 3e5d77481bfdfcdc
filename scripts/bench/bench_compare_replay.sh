#!/usr/bin/env bash
# scripts/bench/bench_compare_replay.sh [--quick] - what the float64 replay
# costs in `nprobe compare` (issue 31: "the replay pays only for what the
# verdict needs"), side by side with msprobe 26's own compare, in one run:
# the same pair of dumps (K float32 tensors of N elements per side, default
# 300 x 1M = 2.52 GB over both sides; Functional.linear calls, three leaves
# each, gen_compare_dumps.py / gen_msprobe_dumps.py: the cmp side is the
# bench's tensors with 1e-3 relative noise) in nprobe's format (dump.h5) and
# in msprobe's (dump.json + torch.save .pt), all files in the page cache:
#   msprobe compare (the venv's mindstudio-probe: `msprobe compare -tp -gp`),
#   nprobe compare by default (replay on), --no-replay, and with
#   BENCH_REPLAY_ALL=1 also --replay-all (every call recomputed on both
#   sides, as before issue 31's selection), each on the .h5 pair and on
#   msprobe's .pt pair;
# runs interleaved, medians of REPS; GB/s over both sides' bytes; CPU seconds
# (user + sys, less inflated by a loaded machine than the wall time); peak RSS
# (GNU time); and each nprobe run's first culprit and exit status, which
# must be the same with and without the selection. The generated tensors
# are random (an output is not its call's product), so every recomputed call
# is far above its budget on both sides and the three-way rule names none:
# the cost is that of the recompute, not of a verdict. Prints a Markdown
# section. Env: NPROBE_BIN (default build/release/nprobe), NP_PYTHON (default
# the repository's .venv), MSPROBE (default msprobe beside NP_PYTHON; "none"
# leaves msprobe out), BENCH_DIR (scratch: about 2x the pair, 5.1 GB at the
# default size, removed at the end), BENCH_TENSORS / BENCH_NUMEL / BENCH_REPS,
# NPROBE_BEFORE (another build's nprobe, e.g. of the commit before: its
# default compare is timed too).
set -euo pipefail
root=$(cd "$(dirname "$0")/../.." && pwd)
bin=${NPROBE_BIN:-$root/build/release/nprobe}
py=${NP_PYTHON:-$root/.venv/bin/python}
here=$root/scripts/bench
K=${BENCH_TENSORS:-300} NUMEL=${BENCH_NUMEL:-$((1 << 20))} REPS=${BENCH_REPS:-3}
for a in "$@"; do
  case $a in
    --quick) K=12 NUMEL=$((1 << 16)) REPS=1;;
    *) echo "bench_compare_replay: unknown option $a" >&2; exit 2;;
  esac
done
ms=${MSPROBE:-$(dirname "$py")/msprobe}
[ -x "$bin" ] || { echo "bench_compare_replay: $bin is not built (set NPROBE_BIN)" >&2; exit 2; }
"$py" -c 'import h5py, numpy, torch' 2>/dev/null || { echo "bench_compare_replay: $py lacks numpy/h5py/torch" >&2; exit 2; }
[ "$ms" = none ] || [ -x "$ms" ] || { echo "bench_compare_replay: no msprobe at $ms (MSPROBE=none to leave it out)" >&2; exit 2; }
work=$(mktemp -d "${BENCH_DIR:-${TMPDIR:-/tmp}}/np_bench_replay.XXXXXX")
trap 'rm -rf "$work"' EXIT

measure() { # CMD... -> "seconds maxrss_mb exit cpu_seconds" (GNU time); stdout kept in $work/cmd.out
  local rc=0
  /usr/bin/time -f "%e %M %U %S" -o "$work/time.txt" "$@" > "$work/cmd.out" 2> "$work/cmd.err" || rc=$?
  tail -1 "$work/time.txt" | awk -v rc="$rc" '{ printf "%s %.1f %s %.2f\n", $1, $2 / 1024, rc, $3 + $4 }'
}
median() { sort -g | awk '{ v[NR] = $1 } END { m = (NR % 2) ? v[(NR + 1) / 2] : (v[NR / 2] + v[NR / 2 + 1]) / 2; print m }'; }

gen() { # tool dir seed noise
  "$py" "$here/gen_$1_dumps.py" "$2" --tensors "$K" --numel "$NUMEL" --task tensor --seed "$3" --noise "$4"
}
gen compare "$work/nb" 1 0
gen compare "$work/nc" 2 1e-3
gen msprobe "$work/mb" 1 0
gen msprobe "$work/mc" 2 1e-3
cat "$work"/n[bc]/step0/rank0/dump.h5 "$work"/m[bc]/step0/rank0/dump_tensor_data/*.pt > /dev/null
load0=$(cut -d' ' -f1-3 /proc/loadavg)

# the variants: label, then the command (OUT is replaced by an empty folder)
variants=()
if [ "$ms" != none ]; then
  variants+=("msprobe 26 compare (.pt)|$ms compare -tp $work/mc/step0/rank0/dump.json -gp $work/mb/step0/rank0/dump.json -o OUT")
fi
for fmt in n m; do
  what=".h5"; [ $fmt = m ] && what="msprobe's .pt"
  base="$bin compare -b $work/${fmt}b -c $work/${fmt}c -o OUT --format csv"
  variants+=("nprobe compare, default (replay on), $what|$base")
  if [ "${BENCH_REPLAY_ALL:-0}" = 1 ]; then
    variants+=("nprobe compare --replay-all, $what|$base --replay-all")
  fi
  variants+=("nprobe compare --no-replay, $what|$base --no-replay")
  if [ -n "${NPROBE_BEFORE:-}" ]; then
    variants+=("NPROBE_BEFORE compare, default, $what|${base/$bin/$NPROBE_BEFORE}")
  fi
done
declare -A secs peak verdict cpus
for _ in $(seq "$REPS"); do
  for v in "${variants[@]}"; do
    label=${v%%|*} cmd=${v#*|}
    rm -rf "$work/out" && mkdir -p "$work/out"
    # shellcheck disable=SC2086
    read -r s m rc cpu < <(measure ${cmd//OUT/$work/out})
    secs[$label]+="$s "
    cpus[$label]+="$cpu "
    peak[$label]="$m ${peak[$label]:-}"
    case $cmd in
      *"$bin"*|*"${NPROBE_BEFORE:-/nonexistent}"*) verdict[$label]="first culprit $(grep -m1 '^  first culprit: ' "$work/cmd.out" | sed -e 's/^  first culprit: //' -e 's/[ :].*//'), exit $rc";;
      *) verdict[$label]="exit $rc, $(find "$work/out" -name '*.csv' | wc -l) csv";;
    esac
  done
done
rm -rf "$work/out"

bytes=$((2 * K * NUMEL * 4))
echo "## compare with the replay (bench_compare_replay.sh)"
echo
echo "$K x $NUMEL float32 tensors per side ($(awk -v b=$bytes 'BEGIN { printf "%.2f", b / 1e9 }') GB over both sides), Functional.linear calls,"
echo "the cmp side the bench's tensors with 1e-3 relative noise; the same data in"
echo "nprobe's format and in msprobe's (.pt), all in the page cache; interleaved,"
echo "median of $REPS run(s), peak RSS the largest; cpu: user + sys seconds (median),"
echo "which a loaded machine inflates less than the wall time; $(nproc) cores, load"
echo "$(cut -d' ' -f1-3 /proc/loadavg) at the end (at the start: $load0); OpenBLAS core: ${OPENBLAS_CORETYPE:-detected}."
echo
echo "Command: \`scripts/bench/bench_compare_replay.sh${*:+ $*}\`"
echo
echo "| work | time | cpu | GB/s | peak | verdict |"
echo "|---|---|---|---|---|---|"
for v in "${variants[@]}"; do
  label=${v%%|*}
  t=$(printf '%s\n' ${secs[$label]} | median)
  m=$(printf '%s\n' ${peak[$label]} | sort -g | tail -1)
  c=$(printf '%s\n' ${cpus[$label]} | median)
  awk -v l="$label" -v t="$t" -v c="$c" -v m="$m" -v b="$bytes" -v vd="${verdict[$label]}" 'BEGIN {
    printf "| %s | %.2f s | %.2f s | %.2f | %.0f MB | %s |\n", l, t, c, b / 1e9 / t, m, vd }'
done
echo
