#!/usr/bin/env bash
# scripts/bench/bench_dump.sh [--quick] - cost of dumping on the GPT:
#  1. step time of `nprobe train --model gpt` with no probe, statistics at L1,
#     md5 at L1 and tensor at L1, runs interleaved, medians side by side;
#  2. tensor-mode write throughput (payload bytes per step / extra step time
#     over no probe) against a plain sequential write (dd) of the same bytes
#     into the same directory;
#  3. peak RSS of async tensor dumping for several queue_mb.
# Prints a Markdown section. Env: NPROBE_BIN, NP_PYTHON, BENCH_THREADS,
# BENCH_DIR (where dumps go; default a temp dir under /tmp).
set -euo pipefail
root=$(cd "$(dirname "$0")/../.." && pwd)
bin=${NPROBE_BIN:-$root/build/nprobe}
py=${NP_PYTHON:-/usr/bin/python3}
threads=${BENCH_THREADS:-$(nproc)}
[ -x "$bin" ] || { echo "bench_dump: $bin is not built (set NPROBE_BIN)" >&2; exit 2; }
model=(--model gpt --layers 4 --heads 4 --width 128 --context 64 --batch 8)
steps=12 warm=2 rounds=3 queues=(8 32 128)
if [ "${1:-}" = "--quick" ]; then
  model=(--model gpt --layers 2 --heads 2 --width 64 --context 32 --batch 8)
  steps=4 warm=1 rounds=1 queues=(4 16)
fi
work=$(mktemp -d "${BENCH_DIR:-/tmp}/np_bench_dump.XXXXXX")
trap 'rm -rf "$work"' EXIT
cd "$work"

cfg() { # task level async queue_mb
  printf '{"task": "%s", "dump_path": "%s/d_%s", "level": "%s", "async_dump": %s, "queue_mb": %s}\n' \
    "$1" "$work" "$1" "$2" "$3" "$4" > "cfg_$1.json"
}
cfg statistics L1 false 64; cfg md5 L1 false 64; cfg tensor L1 false 64

# step times (ms) of one run, one per line, after the warm-up steps
run_ms() { # mode
  local extra=()
  [ "$1" != none ] && extra=(--dump-config "cfg_$1.json")
  rm -rf "d_$1"
  OMP_NUM_THREADS=$threads OPENBLAS_NUM_THREADS=$threads "$bin" train "${model[@]}" \
    --steps $((steps + warm)) --threads "$threads" "${extra[@]}" 2>"err_$1.txt" |
    awk -v tok=$(( ${model[9]} * ${model[11]} )) -v warm="$warm" '
      /^step [0-9]+ / { for (i = 1; i <= NF; i++) if ($(i) == "tok/s") { n++; if (n > warm) printf "%.3f\n", 1000 * tok / $(i - 1) } }'
}
median() { sort -g | awk '{ a[NR] = $1 } END { if (NR == 0) print "nan"; else if (NR % 2) print a[(NR + 1) / 2]; else print (a[NR / 2] + a[NR / 2 + 1]) / 2 }'; }

modes=(none statistics md5 tensor)
for m in "${modes[@]}"; do : > "ms_$m.txt"; done
for r in $(seq "$rounds"); do
  for m in "${modes[@]}"; do run_ms "$m" >> "ms_$m.txt"; done
done
declare -A med
for m in "${modes[@]}"; do med[$m]=$(median < "ms_$m.txt"); done
payload=$(grep -o '[0-9]* payload bytes' err_tensor.txt | awk '{print $1}' | tail -1)
files=$(grep -o '[0-9]* step file' err_tensor.txt | awk '{print $1}' | tail -1)
per_step=$(( ${payload:-0} / (${files:-1} > 0 ? ${files:-1} : 1) ))

# plain sequential write of the same bytes per step, same directory
mb=$(( (per_step + 1048575) / 1048576 ))
[ "$mb" -lt 1 ] && mb=1
dd_s=()
for r in $(seq 5); do
  t0=$(date +%s.%N)
  dd if=/dev/zero of="$work/dd.bin" bs=1M count="$mb" status=none
  t1=$(date +%s.%N)
  rm -f "$work/dd.bin"
  dd_s+=("$(awk -v a="$t0" -v b="$t1" 'BEGIN { print b - a }')")
done
dd_med=$(printf '%s\n' "${dd_s[@]}" | median)
dd_mbs=$(awk -v m="$mb" -v s="$dd_med" 'BEGIN { printf "%.0f", m / s }')
dump_mbs=$(awk -v b="$per_step" -v t="${med[tensor]}" -v n="${med[none]}" \
  'BEGIN { d = (t - n) / 1000; if (d <= 0) print "inf"; else printf "%.0f", b / 1048576 / d }')

# async peak RSS vs queue_mb
rss_rows=""
for q in "${queues[@]}"; do
  printf '{"task": "tensor", "dump_path": "%s/d_async", "level": "L1", "async_dump": true, "queue_mb": %s}\n' \
    "$work" "$q" > cfg_async.json
  rss=$("$py" - "$bin" "${model[@]}" --steps $((warm + 2)) --threads "$threads" --dump-config cfg_async.json <<'PY'
import resource, subprocess, sys
subprocess.run(sys.argv[1:2] + ["train"] + sys.argv[2:], stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL, check=True)
print(resource.getrusage(resource.RUSAGE_CHILDREN).ru_maxrss // 1024)
PY
)
  rm -rf d_async
  rss_rows+="| async tensor, queue_mb $q | $rss MiB |"$'\n'
done
rss_none=$("$py" - "$bin" "${model[@]}" --steps $((warm + 2)) --threads "$threads" <<'PY'
import resource, subprocess, sys
subprocess.run(sys.argv[1:2] + ["train"] + sys.argv[2:], stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL, check=True)
print(resource.getrusage(resource.RUSAGE_CHILDREN).ru_maxrss // 1024)
PY
)

ratio() { awk -v a="$1" -v b="$2" 'BEGIN { if (b > 0) printf "x%.2f", a / b; else print "-" }'; }
echo "## Dump overhead (bench_dump.sh)"
echo
echo "GPT \`${model[*]}\`, $threads threads, $steps measured steps x $rounds interleaved rounds per mode; median step time."
echo
echo "| mode | step time (ms) | vs no probe | target |"
echo "|---|---|---|---|"
echo "| no probe | ${med[none]} | x1.00 | |"
echo "| statistics, L1 | ${med[statistics]} | $(ratio "${med[statistics]}" "${med[none]}") | <= x1.15 |"
echo "| md5, L1 | ${med[md5]} | $(ratio "${med[md5]}" "${med[none]}") | <= x1.3 |"
echo "| tensor, L1 (sync) | ${med[tensor]} | $(ratio "${med[tensor]}" "${med[none]}") | |"
echo
echo "Tensor mode writes $per_step payload bytes per step: $dump_mbs MiB/s of extra step time," \
     "against $dd_mbs MiB/s for \`dd\` writing $mb MiB into the same directory" \
     "($(awk -v a="$dump_mbs" -v b="$dd_mbs" 'BEGIN { if (a == "inf") print "no measurable cost"; else printf "%.0f %%", 100 * a / b }'); target >= 50 %)."
echo
echo "| async peak RSS | |"
echo "|---|---|"
echo "| no probe | $rss_none MiB |"
printf '%s' "$rss_rows"
