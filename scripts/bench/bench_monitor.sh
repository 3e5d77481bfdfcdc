#!/usr/bin/env bash
# bench_monitor.sh - the monitor's cost on the runtime GPT 4x256 (docs/MONITOR.md,
# docs/PERFORMANCE.md): step time with the monitor off, on for gradients and
# weights (wg, mv, param; no activations) and on for everything (activations
# and activation gradients of every module too), every step. Runs are
# interleaved (off, wg, all, off, wg, all, ...) so drifting machine load hits
# each alike; the figure per variant is the median over rounds of each run's
# median step time (the first 2 steps dropped). Prints the load average.
#   scripts/bench/bench_monitor.sh [NPROBE] [ROUNDS] [STEPS]
set -eu
nprobe=${1:-build/release/nprobe}
rounds=${2:-5}
steps=${3:-12}
tmp=$(mktemp -d)
trap 'rm -rf "$tmp"' EXIT
printf '{"task": "monitor", "dump_path": "%s/m", "monitor": {"xy_distribution": false}}\n' "$tmp" > "$tmp/wg.json"
printf '{"task": "monitor", "dump_path": "%s/m", "monitor": {}}\n' "$tmp" > "$tmp/all.json"
args=(train --model gpt --layers 4 --width 256 --heads 4 --steps "$steps" --threads "${THREADS:-1}")
echo "load before: $(cut -d' ' -f1-3 /proc/loadavg)"
for r in $(seq 1 "$rounds"); do
  for v in off wg all; do
    rm -rf "$tmp/m"
    extra=()
    [ "$v" != off ] && extra=(--dump-config "$tmp/$v.json")
    "$nprobe" "${args[@]}" "${extra[@]}" > "$tmp/$v.$r.log" 2>&1
  done
done
echo "load after: $(cut -d' ' -f1-3 /proc/loadavg)"
python3 - "$tmp" "$rounds" <<'PY'
import re, statistics, sys
tmp, rounds = sys.argv[1], int(sys.argv[2])
med = {}
for v in ("off", "wg", "all"):
    per = []
    for r in range(1, rounds + 1):
        tps = [float(x) for x in re.findall(r"^step \d+ loss \S+ lr \S+\s+(\S+) tok/s", open(f"{tmp}/{v}.{r}.log").read(), re.M)]
        per.append(statistics.median([1.0 / t for t in tps[2:]]))
    med[v] = statistics.median(per)
for v in ("off", "wg", "all"):
    print(f"{v:4s} step {med[v] * 1e3:.2f} ms per 1000 tokens, x{med[v] / med['off']:.3f} of off "
          f"(median of {rounds} run medians)")
PY
