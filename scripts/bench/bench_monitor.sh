#!/usr/bin/env bash
# bench_monitor.sh - the monitor's cost on the runtime GPT 4x256 (docs/MONITOR.md,
# docs/PERFORMANCE.md "Monitor"): monitor off, on for gradients and weights
# (wg: wg, mv, param; no activations) and on for everything (all: the
# activations and activation gradients of every module too), every step,
# at batch B (8 x 32 = 256 tokens a step, and a larger batch).
# (gw: gradients and weights without m and v.) Two figures per variant:
#  - wall: runs interleaved (off, wg, all, off, ...) so drifting machine load
#    hits each alike; the median over rounds of each run's median step time
#    (the first 2 steps dropped), as a ratio to off;
#  - cpu: the process's CPU time (user + sys, /usr/bin/time; init included)
#    as a ratio to off, the median over rounds: the load of other processes
#    inflates it far less than the wall time (the monitor's gradient, Adam
#    and weight statistics run inside the optimizer's update loop, so its
#    own callbacks' CPU time, the last column, leaves them out).
# Two more variants, wg2 and gw2 (wg, gw every 2nd step), give the optimizer update's
# thread CPU time on recorded steps against the others in one process (the
# run's first update, which first touches the optimizer's zeroed state, not
# counted); a fifth, short (off for 2 steps), gives a step's CPU without the
# start-up: (off's process CPU - short's) / (STEPS - 2), the denominator of
# the recorded update's extra CPU.
#   scripts/bench/bench_monitor.sh [NPROBE] [ROUNDS] [STEPS] [BATCHES]
set -eu
nprobe=${1:-build/release/nprobe}
rounds=${2:-5}
steps=${3:-12}
batches=${4:-8 64}
tmp=$(mktemp -d)
trap 'rm -rf "$tmp"' EXIT
printf '{"task": "monitor", "dump_path": "%s/m", "monitor": {"xy_distribution": false}}\n' "$tmp" > "$tmp/wg.json"
printf '{"task": "monitor", "dump_path": "%s/m", "monitor": {}}\n' "$tmp" > "$tmp/all.json"
# gw: gradients, weights and the update ratio (no m and v): issue 27's
# "gradients and weights every step"
printf '{"task": "monitor", "dump_path": "%s/m", "monitor": {"xy_distribution": false, "mv_distribution": false}}\n' "$tmp" > "$tmp/gw.json"
# wg every 2nd step: the optimizer update's own CPU time on recorded steps
# against the others, in one process (nprobe train prints both)
printf '{"task": "monitor", "dump_path": "%s/m", "monitor": {"xy_distribution": false, "step_interval": 2}}\n' "$tmp" > "$tmp/wg2.json"
# gw every 2nd step: the same for gradients and weights alone
printf '{"task": "monitor", "dump_path": "%s/m", "monitor": {"xy_distribution": false, "mv_distribution": false, "step_interval": 2}}\n' "$tmp" > "$tmp/gw2.json"
echo "load before: $(cut -d' ' -f1-3 /proc/loadavg)"
for b in $batches; do
  args=(train --model gpt --layers 4 --width 256 --heads 4 --batch "$b" --steps "$steps" --threads "${THREADS:-1}")
  for r in $(seq 1 "$rounds"); do
    for v in off gw wg all wg2 gw2 short; do
      rm -rf "$tmp/m"
      extra=()
      case $v in
        off) ;;
        short) extra=(--stop-after 2) ;;
        *) extra=(--dump-config "$tmp/$v.json") ;;
      esac
      /usr/bin/time -f "cputime %U %S" -o "$tmp/$b.$v.$r.time" \
        "$nprobe" "${args[@]}" "${extra[@]}" > "$tmp/$b.$v.$r.log" 2>&1
    done
  done
done
echo "load after: $(cut -d' ' -f1-3 /proc/loadavg)"
python3 - "$tmp" "$rounds" "$steps" $batches <<'PY'
import re, statistics, sys
tmp, rounds, steps, batches = sys.argv[1], int(sys.argv[2]), int(sys.argv[3]), sys.argv[4:]
upd = {}
within = {}
for b in batches:
    med, cpu, proc = {}, {}, {}
    for v in ("off", "gw", "wg", "all", "wg2", "gw2", "short"):
        per, share, pc = [], [], []
        for r in range(1, rounds + 1):
            text = open(f"{tmp}/{b}.{v}.{r}.log").read()
            tps = [float(x) for x in re.findall(r"^step \d+ loss \S+ lr \S+\s+(\S+) tok/s", text, re.M)]
            if v != "short":
                per.append(statistics.median([1.0 / t for t in tps[2:]]))
            m = re.search(r"\(([0-9.]+)% of the process", text)
            if m:
                share.append(float(m.group(1)))
            u, s_ = open(f"{tmp}/{b}.{v}.{r}.time").read().split("cputime ")[1].split()[:2]
            pc.append(float(u) + float(s_))
            if v in ("wg2", "gw2"):
                # within the process: recorded steps (even) over the others (odd), first 2 dropped
                st = {int(k): 1.0 / float(t) for k, t in
                      re.findall(r"^step (\d+) loss \S+ lr \S+\s+(\S+) tok/s", text, re.M)}
                rec = [t for k, t in st.items() if k >= 2 and k % 2 == 0]
                oth = [t for k, t in st.items() if k >= 2 and k % 2 == 1]
                if rec and oth:
                    within.setdefault((b, v), []).append(statistics.median(rec) / statistics.median(oth))
            m = re.search(r"optimizer update ([0-9.]+) ms .* ([0-9.]+) ms on the others", text)
            if m:
                upd.setdefault((b, v), []).append((float(m.group(1)), float(m.group(2))))
        med[v] = statistics.median(per) if per else 0.0
        cpu[v] = statistics.median(share) if share else 0.0
        proc[v] = statistics.median(pc)
    tokens = int(b) * 32
    for v in ("off", "gw", "wg", "all"):
        print(f"batch {b:>3} ({tokens} tokens/step) {v:4s} step {med[v] * tokens * 1e3:8.1f} ms  "
              f"wall x{med[v] / med['off']:.3f}  process cpu {proc[v]:.2f} s x{proc[v] / proc['off']:.3f}  "
              f"monitor callbacks {cpu[v]:.2f}% of the process")
    for v2 in ("wg2", "gw2"):
        if not upd.get((b, v2)):
            continue
        on = statistics.median(x[0] for x in upd[(b, v2)])
        off = statistics.median(x[1] for x in upd[(b, v2)])
        step_ms = (proc["off"] - proc["short"]) * 1e3 / (steps - 2)  # a step's CPU, start-up left out
        print(f"batch {b:>3} optimizer update ({v2}, thread cpu, median): recorded {on:.2f} ms, "
              f"others {off:.2f} ms: +{on - off:.2f} ms a recorded step = "
              f"{100 * (on - off) / step_ms:.2f}% of off's {step_ms:.1f} ms CPU a step")
        w = within.get((b, v2))
        if w:
            print(f"batch {b:>3} {v2}: recorded/unrecorded step wall time in the same process, "
                  f"median of {len(w)} runs x{statistics.median(w):.4f} "
                  f"(runs x{min(w):.4f}-x{max(w):.4f})")
PY
