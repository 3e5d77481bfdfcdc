#!/usr/bin/env bash
# scripts/bench/bench_compare_pairs.sh [--quick] - compare's peak memory over
# many step/rank pairs (issue 14): two 10-step statistics dumps of the
# default GPT at level mix (467 rows per step; bench fp32, cmp bf16
# autocast), written by `nprobe dump` here, hard-linked into 1000 and 8000
# step files per side (8 ranks per step: link_steps.py); `nprobe compare`
# of all pairs with csv reports and the HTML page, one run per scale: peak
# RSS and seconds. Each pair's reports are written as it is compared and
# the pair shrunk to its summary, so the peak must not grow with the pairs
# (before: every pair's rows were held to the end, 1.7 GB at 8000 pairs).
# NPROBE_BIN_BASE (optional): another build (e.g. one from before the
# streaming) run on the same files after each scale's run, side by side.
# --quick: 104 and 800 pairs. Env: NPROBE_BIN, NP_PYTHON, BENCH_DIR.
set -euo pipefail
root=$(cd "$(dirname "$0")/../.." && pwd)
bin=${NPROBE_BIN:-$root/build/release/nprobe}
base=${NPROBE_BIN_BASE:-}
py=${NP_PYTHON:-$(dirname "$0")/../../.venv/bin/python}
here=$root/scripts/bench
SCALES="1000 8000"
for a in "$@"; do
  case $a in
    --quick) SCALES="104 800";;
    *) echo "bench_compare_pairs: unknown option $a" >&2; exit 2;;
  esac
done
[ -x "$bin" ] || { echo "bench_compare_pairs: $bin is not built (set NPROBE_BIN)" >&2; exit 2; }
work=$(mktemp -d "${BENCH_DIR:-${TMPDIR:-/tmp}}/np_bench_pairs.XXXXXX")
trap 'rm -rf "$work"' EXIT

measure() { # CMD... -> "seconds maxrss_mb" (GNU time); output discarded
  /usr/bin/time -f "%e %M" -o "$work/time.txt" "$@" > /dev/null 2> "$work/cmd.err" || true
  tail -1 "$work/time.txt" | awk '{ printf "%s %.1f\n", $1, $2 / 1024 }'
}
config() { # dump_path
  printf '{"task": "statistics", "dump_path": "%s", "rank": [], "step": [], "level": "mix",
  "async_dump": false, "statistics": {"scope": [], "list": [], "data_mode": ["all"],
  "summary_mode": "statistics"}}\n' "$1"
}
config "$work/b" > "$work/b.json"
config "$work/c" > "$work/c.json"
"$bin" dump -c "$work/b.json" -- "$bin" train --steps 10 --threads 1 > /dev/null 2>&1
"$bin" dump -c "$work/c.json" -- "$bin" train --steps 10 --threads 1 --precision bf16 > /dev/null 2>&1

echo "## compare over many step/rank pairs: peak memory"
echo
echo "Two 10-step statistics dumps of the default GPT (level mix, 467 rows per"
echo "step; bench fp32, cmp bf16 autocast), hard-linked into N step files per"
echo "side (8 ranks per step); \`nprobe compare -q --format csv,html\` of all"
echo "pairs, one run per scale; peak RSS from GNU time; $(nproc) cores. Load"
echo "average at the start: $(cut -d' ' -f1-3 /proc/loadavg)."
echo
echo "Command: \`scripts/bench/bench_compare_pairs.sh${*:+ $*}\`"
echo
echo "| work | this build | ${base:+NPROBE_BIN_BASE (before the streaming) | }ratio | target | met? |"
echo "|---|---|${base:+---|}---|---|---|"
first=""
for n in $SCALES; do
  "$py" "$here/link_steps.py" "$work/b" "$work/sb" $((n / 8)) 8
  "$py" "$here/link_steps.py" "$work/c" "$work/sc" $((n / 8)) 8
  read -r s m < <(measure "$bin" compare -b "$work/sb" -c "$work/sc" -o "$work/out" -q --format csv,html)
  nrep=$(find "$work/out" -name 'compare_result_*.csv' | wc -l)
  [ "$nrep" = $((n / 8 * 8)) ] || { echo "bench_compare_pairs: $nrep csv reports for $n pairs" >&2; cat "$work/cmd.err" >&2; exit 1; }
  bcell=""
  if [ -n "$base" ]; then
    rm -rf "$work/out"
    read -r bs bm < <(measure "$base" compare -b "$work/sb" -c "$work/sc" -o "$work/out" -q --format csv,html)
    bcell=$(awk -v s="$bs" -v m="$bm" 'BEGIN { printf "%.1f s, %.0f MB peak |", s, m }')
  fi
  [ -z "$first" ] && first=$m first_n=$n
  # a pair's rows held to the end cost ~200 KB (1.7 GB at 8000 pairs before);
  # what stays per pair is its summary record (counts, paths, first culprit)
  awk -v n="$n" -v s="$s" -v m="$m" -v f="$first" -v fn="$first_n" -v b="$bcell" 'BEGIN {
    kb = 0; per = "-";
    if (n > fn) { kb = (m - f) * 1024 / (n - fn); per = sprintf("%.1f KB per pair over %d pairs", kb, fn) }
    printf "| compare of %d step/rank pairs, csv+html | %.1f s, %.0f MB peak | %s %s | no rows kept: <= 8 KB per pair | %s |\n",
      n, s, m, b, per, (kb <= 8) ? "yes" : "no" }'
  rm -rf "$work/sb" "$work/sc" "$work/out"
done
echo
