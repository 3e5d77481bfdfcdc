#!/usr/bin/env bash
# scripts/bench/bench_dump.sh [--quick] - cost of dumping on the GPT, side by
# side with the un-instrumented run:
#  1. step time of `nprobe train --model gpt` with no probe, statistics at L1,
#     md5 at L1, tensor at L1 (sync) and tensor at L1 (async_dump); the
#     variants are run interleaved (one run of each per round, several
#     rounds) so machine noise hits all of them alike; medians over all
#     measured steps of all rounds;
#  2. tensor-mode write throughput (payload bytes per step / extra step time
#     over no probe) against a plain sequential write (dd, 4 MiB blocks) of
#     the same bytes (all a tensor run writes) into the same directory (the
#     target); for information, against dd of one step's bytes (a burst into
#     free page cache) and against the disk itself (dd oflag=direct);
#  3. peak RSS of async tensor dumping for several queue_mb, against the
#     peak RSS with no probe (the queue is the bound on what dumping holds).
# Prints a Markdown section on stdout. Env: NPROBE_BIN, NP_PYTHON,
# BENCH_THREADS, BENCH_DIR (where dumps go; default a temp dir under /tmp).
set -euo pipefail
root=$(cd "$(dirname "$0")/../.." && pwd)
bin=${NPROBE_BIN:-$root/build/release/nprobe}
py=${NP_PYTHON:-$(dirname "$0")/../../.venv/bin/python}
threads=${BENCH_THREADS:-$(nproc)}
[ -x "$bin" ] || { echo "bench_dump: $bin is not built (set NPROBE_BIN)" >&2; exit 2; }
bin=$(cd "$(dirname "$bin")" && pwd)/$(basename "$bin")
width=256 layers=4 heads=4 context=128 batch=8
steps=8 warm=2 rounds=5 queues=(8 32 128) ddreps=5
quick=""
if [ "${1:-}" = "--quick" ]; then
  quick=" --quick"
  width=64 layers=2 heads=2 context=32
  steps=4 warm=1 rounds=2 queues=(4 16) ddreps=3
fi
model=(--model gpt --layers "$layers" --heads "$heads" --width "$width" --context "$context"
       --batch "$batch")
work=$(mktemp -d "${BENCH_DIR:-/tmp}/np_bench_dump.XXXXXX")
trap 'rm -rf "$work"' EXIT
cd "$work"

cfg() { # name task async queue_mb
  printf '{"task": "%s", "dump_path": "%s/d_%s", "level": "L1", "async_dump": %s, "queue_mb": %s}\n' \
    "$2" "$work" "$1" "$3" "$4" > "cfg_$1.json"
}
cfg statistics statistics false 64
cfg md5 md5 false 64
cfg tensor tensor false 64
cfg tensor_async tensor true 64

# Step times (ms) of one run, one per line, after the warm-up steps.
run_ms() { # variant
  local extra=()
  [ "$1" != none ] && extra=(--dump-config "cfg_$1.json")
  rm -rf "d_$1"
  OMP_NUM_THREADS=$threads OPENBLAS_NUM_THREADS=$threads "$bin" train "${model[@]}" \
    --steps $((steps + warm)) --threads "$threads" "${extra[@]}" 2>"err_$1.txt" |
    awk -v tok=$((context * batch)) -v warm="$warm" '
      /^step [0-9]+ / { for (i = 1; i <= NF; i++) if ($(i) == "tok/s") { n++; if (n > warm) printf "%.3f\n", 1000 * tok / $(i - 1) } }'
  [ "$1" != none ] && grep -q 'payload bytes' "err_$1.txt" || [ "$1" = none ] ||
    { echo "bench_dump: variant $1 gave no dump summary:" >&2; cat "err_$1.txt" >&2; exit 1; }
  rm -rf "d_$1"
}
median() { sort -g | awk '{ a[NR] = $1 } END { if (NR == 0) print "nan"; else if (NR % 2) print a[(NR + 1) / 2]; else print (a[NR / 2] + a[NR / 2 + 1]) / 2 }'; }

variants=(none statistics md5 tensor tensor_async)
for v in "${variants[@]}"; do : > "ms_$v.txt"; done
for r in $(seq "$rounds"); do
  for v in "${variants[@]}"; do run_ms "$v" >> "ms_$v.txt"; done
done
declare -A med
for v in "${variants[@]}"; do med[$v]=$(median < "ms_$v.txt"); done
payload=$(grep -o '[0-9]* payload bytes' err_tensor.txt | awk '{print $1}' | tail -1)
files=$(grep -o '[0-9]* step file' err_tensor.txt | awk '{print $1}' | tail -1)
per_step=$(( ${payload:-0} / (${files:-1} > 0 ? ${files:-1} : 1) ))

# Plain sequential writes into the same directory (median of several):
#  - the same bytes as a whole tensor run writes (every step, warm-up
#    included): the target's baseline, "a plain sequential write of the same
#    bytes on the same disk";
#  - one step's bytes only, for information: a burst that fits under the
#    kernel's dirty-page limits and so measures a memory copy, not the disk;
#  - the same bytes with O_DIRECT, for information: the disk itself (skipped
#    where the file system refuses O_DIRECT).
dd_rate() { # MiB reps [dd flags...] -> median MiB/s, or "" if dd fails
  local m=$1 reps=$2; shift 2
  local ts=() t0 t1
  for _ in $(seq "$reps"); do
    sync
    t0=$(date +%s.%N)
    dd if=/dev/zero of="$work/dd.bin" bs=4M count="$(( (m + 3) / 4 ))" status=none "$@" 2>/dev/null ||
      { rm -f "$work/dd.bin"; return 0; }
    t1=$(date +%s.%N)
    rm -f "$work/dd.bin"
    ts+=("$(awk -v a="$t0" -v b="$t1" 'BEGIN { print b - a }')")
  done
  local med
  med=$(printf '%s\n' "${ts[@]}" | median)
  awk -v m="$(( (m + 3) / 4 * 4 ))" -v s="$med" 'BEGIN { printf "%.0f", m / s }'
}
mb=$(( (per_step + 1048575) / 1048576 ))
[ "$mb" -lt 1 ] && mb=1
run_mb=$(( mb * (steps + warm) ))
dd_mbs=$(dd_rate "$run_mb" 3)
dd1_mbs=$(dd_rate "$mb" "$ddreps")
ddd_mbs=$(dd_rate "$run_mb" 3 oflag=direct)
mbs() { # variant -> MiB/s of extra step time
  awk -v b="$per_step" -v t="${med[$1]}" -v n="${med[none]}" \
    'BEGIN { d = (t - n) / 1000; if (d <= 0) print "inf"; else printf "%.0f", b / 1048576 / d }'
}

# Peak RSS (MiB) of a run.
peak_rss() { # args for nprobe train after the model
  "$py" - "$bin" "${model[@]}" --steps $((warm + 2)) --threads "$threads" "$@" <<'PY'
import resource, subprocess, sys
subprocess.run(sys.argv[1:2] + ["train"] + sys.argv[2:], stdout=subprocess.DEVNULL,
               stderr=subprocess.DEVNULL, check=True)
print(resource.getrusage(resource.RUSAGE_CHILDREN).ru_maxrss // 1024)
PY
}
rss_none=$(peak_rss)
rss_rows=""
for q in "${queues[@]}"; do
  cfg async_q tensor true "$q"
  rss=$(peak_rss --dump-config cfg_async_q.json)
  rm -rf d_async_q
  extra=$((rss - rss_none))
  met=$(awk -v e="$extra" -v q="$q" 'BEGIN { print (e <= q + 16) ? "yes" : "no" }')
  rss_rows+="| peak RSS, async tensor, queue_mb $q | $rss MiB | $rss_none MiB | +$extra MiB | <= +$q MiB queue +16 MiB | $met |"$'\n'
done

ratio() { awk -v a="$1" -v b="$2" 'BEGIN { if (b > 0) printf "x%.2f", a / b; else print "-" }'; }
le() { awk -v a="$1" -v b="$2" -v t="$3" 'BEGIN { print (b > 0 && a / b <= t) ? "yes" : "no" }'; }
pct() { awk -v a="$1" -v b="$2" 'BEGIN { if (a == "inf") print "-"; else printf "%.0f %%", 100 * a / b }'; }
ge50() { awk -v a="$1" -v b="$2" 'BEGIN { print (a == "inf" || a >= 0.5 * b) ? "yes" : "no" }'; }
t_sync=$(mbs tensor)
t_async=$(mbs tensor_async)

echo "## Dump overhead (bench_dump.sh)"
echo
echo "\`scripts/bench/bench_dump.sh$quick\`: \`nprobe train ${model[*]} --threads $threads\`," \
     "$steps measured steps (after $warm warm-up) x $rounds rounds, the variants interleaved in" \
     "every round; median step time. Baseline: the same run without a probe. Tensor mode" \
     "writes $((per_step / 1048576)) MiB of payload per step, $run_mb MiB over the run; its" \
     "throughput is a step's bytes over the extra step time, against \`dd bs=4M\` writing the" \
     "same $run_mb MiB into the same directory (median of 3). For information: \`dd\` of one" \
     "step's $mb MiB only (a burst absorbed by free page-cache memory: a memory copy, median of" \
     "$ddreps), and of the $run_mb MiB with O_DIRECT (the disk itself)."
echo
echo "| work | nprobe | baseline | ratio | target | met? |"
echo "|---|---|---|---|---|---|"
echo "| step time, statistics L1 | ${med[statistics]} ms | ${med[none]} ms | $(ratio "${med[statistics]}" "${med[none]}") | <= x1.15 | $(le "${med[statistics]}" "${med[none]}" 1.15) |"
echo "| step time, md5 L1 | ${med[md5]} ms | ${med[none]} ms | $(ratio "${med[md5]}" "${med[none]}") | <= x1.3 | $(le "${med[md5]}" "${med[none]}" 1.3) |"
echo "| step time, tensor L1 (sync) | ${med[tensor]} ms | ${med[none]} ms | $(ratio "${med[tensor]}" "${med[none]}") | - | - |"
echo "| step time, tensor L1 (async_dump) | ${med[tensor_async]} ms | ${med[none]} ms | $(ratio "${med[tensor_async]}" "${med[none]}") | - | - |"
echo "| write throughput, tensor L1 (sync) | $t_sync MiB/s | $dd_mbs MiB/s (dd, the run's $run_mb MiB) | $(pct "$t_sync" "$dd_mbs") | >= 50 % | $(ge50 "$t_sync" "$dd_mbs") |"
echo "| write throughput, tensor L1 (async_dump) | $t_async MiB/s | $dd_mbs MiB/s (dd, the run's $run_mb MiB) | $(pct "$t_async" "$dd_mbs") | >= 50 % | $(ge50 "$t_async" "$dd_mbs") |"
if [ -n "$dd1_mbs" ]; then
  echo "| write throughput, tensor L1 (sync), vs a one-step burst | $t_sync MiB/s | $dd1_mbs MiB/s (dd, $mb MiB) | $(pct "$t_sync" "$dd1_mbs") | - | - |"
  echo "| write throughput, tensor L1 (async_dump), vs a one-step burst | $t_async MiB/s | $dd1_mbs MiB/s (dd, $mb MiB) | $(pct "$t_async" "$dd1_mbs") | - | - |"
fi
if [ -n "$ddd_mbs" ]; then
  echo "| write throughput, tensor L1 (sync), vs the disk | $t_sync MiB/s | $ddd_mbs MiB/s (dd oflag=direct) | $(pct "$t_sync" "$ddd_mbs") | - | - |"
  echo "| write throughput, tensor L1 (async_dump), vs the disk | $t_async MiB/s | $ddd_mbs MiB/s (dd oflag=direct) | $(pct "$t_async" "$ddd_mbs") | - | - |"
fi
printf '%s' "$rss_rows"
echo
echo "The rows marked \"-\" are for information. A one-step burst fits in free page-cache"
echo "memory and measures a memory copy; the run's bytes, step after step, are bound by what"
echo "the kernel's writeback and the disk take (\`dd oflag=direct\`: the disk alone). Large"
echo "payloads are written with O_DIRECT (docs/CONFIG.md)."
echo
echo "The peak-RSS rows compare the run with async tensor dumping against the run without a"
echo "probe; the allowance of 16 MiB above the queue is for the writer thread's stack, HDF5's"
echo "metadata cache and the statistics scratch, which do not grow with the dump."
