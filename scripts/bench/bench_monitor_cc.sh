#!/usr/bin/env bash
# bench_monitor_cc.sh - the cost of the monitor's collectives' records
# (cc_distribution, docs/MONITOR.md "Collectives") under --tp 2 on the
# runtime GPT 4x256 (2 ranks): the monitor with its defaults (cc off)
# against the same with cc_distribution on, and no monitor (off), runs
# interleaved (off, mon, cc, off, ...) so drifting load hits each alike.
# Figures: the median over rounds of each run's median step time (rank 0's
# log, the first 2 steps dropped) as a ratio to mon, and the monitor's own
# callbacks' CPU share of each rank's process (nprobe train prints it), the
# median over ranks and rounds.
#   scripts/bench/bench_monitor_cc.sh [NPROBE] [ROUNDS] [STEPS] [BATCH]
set -eu
nprobe=${1:-build/release/nprobe}
rounds=${2:-5}
steps=${3:-12}
batch=${4:-8}
mpirun=${MPIRUN:-mpirun}
export OMPI_ALLOW_RUN_AS_ROOT=1 OMPI_ALLOW_RUN_AS_ROOT_CONFIRM=1
tmp=$(mktemp -d)
trap 'rm -rf "$tmp"' EXIT
printf '{"task": "monitor", "dump_path": "%s/m", "monitor": {}}\n' "$tmp" > "$tmp/mon.json"
printf '{"task": "monitor", "dump_path": "%s/m", "monitor": {"cc_distribution": {"enable": true}}}\n' "$tmp" > "$tmp/cc.json"
args=(train --model gpt --layers 4 --width 256 --heads 4 --batch "$batch" --steps "$steps" --threads 1 --tp 2)
echo "load before: $(cut -d' ' -f1-3 /proc/loadavg)"
for r in $(seq 1 "$rounds"); do
  for v in off mon cc; do
    rm -rf "$tmp/m"
    extra=()
    [ $v = off ] || extra=(--dump-config "$tmp/$v.json")
    "$mpirun" -n 2 --oversubscribe --bind-to none "$nprobe" "${args[@]}" "${extra[@]}" > "$tmp/$v.$r.log" 2>&1
  done
done
echo "load after: $(cut -d' ' -f1-3 /proc/loadavg)"
python3 - "$tmp" "$rounds" "$batch" <<'PY'
import re, statistics, sys
tmp, rounds, batch = sys.argv[1], int(sys.argv[2]), int(sys.argv[3])
med, share, recs = {}, {}, {}
for v in ("off", "mon", "cc"):
    per, sh, rc = [], [], []
    for r in range(1, rounds + 1):
        text = open(f"{tmp}/{v}.{r}.log").read()
        tps = [float(x) for x in re.findall(r"^step \d+ loss \S+ lr \S+\s+(\S+) tok/s", text, re.M)]
        per.append(statistics.median([1.0 / t for t in tps[2:]]))
        sh += [float(x) for x in re.findall(r"\(([0-9.]+)% of the process", text)]
        rc += [int(x) for x in re.findall(r"monitor: \d+ step\(s\), (\d+) record\(s\)", text)]
    med[v], share[v] = statistics.median(per), statistics.median(sh) if sh else 0.0
    recs[v] = max(rc) if rc else 0
tokens = batch * 32
for v in ("off", "mon", "cc"):
    print(f"--tp 2 batch {batch} ({tokens} tokens/step) {v:3s} step {med[v] * tokens * 1e3:8.1f} ms  "
          f"wall x{med[v] / med['mon']:.3f} of mon  monitor callbacks {share[v]:.2f}% of the process  "
          f"records {recs[v]}")
PY
