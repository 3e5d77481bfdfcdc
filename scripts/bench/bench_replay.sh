#!/usr/bin/env bash
# bench_replay.sh - `nprobe replay` speed (issue 16): one step of the GPT
# 4x256 (4 layers, 4 heads, width 256, context 128, batch 8) dumped at L1
# (tensor task, every API call with its payloads), replayed in float64,
# against the runtime's own step time at the same size and thread count.
# Rounds interleave a training run (median ms per step over its logged
# steps after warm-up) and a replay of the dumped step (wall time of
# `nprobe replay`, which reads every payload and recomputes every call);
# prints a Markdown section with the medians and the ratio (target <= 5).
#   bench_replay.sh [--quick]      (run under `flock LOCKFILE` on a shared machine)
# Env: NPROBE_BIN (default build/release/nprobe), BENCH_THREADS (default: all cores).
set -euo pipefail
root=$(cd "$(dirname "$0")/../.." && pwd)
bin=${NPROBE_BIN:-$root/build/release/nprobe}
threads=${BENCH_THREADS:-$(nproc)}
L=4 H=4 C=256 T=128 B=8 steps=8 warm=2 rounds=3
[ "${1:-}" = "--quick" ] && { steps=4 warm=1 rounds=1; }
[ -x "$bin" ] || { echo "bench_replay: $bin is not built (set NPROBE_BIN)" >&2; exit 2; }
tmp=$(mktemp -d)
trap 'rm -rf "$tmp"' EXIT
size=(--model gpt --layers $L --heads $H --width $C --context $T --batch $B --threads "$threads")

median() { sort -g | awk '{ v[NR] = $1 } END { if (NR == 0) { print "nan"; exit }
  m = (NR % 2) ? v[(NR + 1) / 2] : (v[NR / 2] + v[NR / 2 + 1]) / 2; printf "%.3f\n", m }'; }

# median ms per step of one training run (from tok/s of each logged step)
train_ms() {
  OMP_NUM_THREADS=$threads OPENBLAS_NUM_THREADS=$threads "$bin" train "${size[@]}" \
    --steps $((steps + warm)) |
    awk -v tok=$((B * T)) -v warm="$warm" '
      /^step / { s = $2; r = 0; for (i = 1; i <= NF; i++) if ($i == "tok/s") r = $(i - 1);
                 if (s >= warm && r > 0) printf "%.6f\n", 1000.0 * tok / r }' | median
}

# the dumped step (step 1: after one optimizer step, not the initial weights)
printf '{"task":"tensor","dump_path":"%s","step":[1],"level":"L1"}' "$tmp/dump" > "$tmp/cfg.json"
OMP_NUM_THREADS=$threads "$bin" dump -c "$tmp/cfg.json" -- "$bin" train "${size[@]}" --steps 2 \
  > "$tmp/dump.log" 2>&1 || { cat "$tmp/dump.log" >&2; exit 1; }
bytes=$(du -sb "$tmp/dump" | cut -f1)

replay_ms() {
  local t0 t1
  t0=$(date +%s%N)
  OMP_NUM_THREADS=$threads "$bin" replay "$tmp/dump" > "$tmp/replay.log" 2>&1 || {
    [ $? = 1 ] || { cat "$tmp/replay.log" >&2; exit 1; }; }
  t1=$(date +%s%N)
  awk -v a="$t0" -v b="$t1" 'BEGIN { printf "%.3f\n", (b - a) / 1e6 }'
}

: > "$tmp/train"; : > "$tmp/replay"
for r in $(seq $rounds); do
  train_ms >> "$tmp/train"
  replay_ms >> "$tmp/replay"
done
tm=$(median < "$tmp/train"); rm_=$(median < "$tmp/replay")
calls=$(grep -o '[0-9]* calls' "$tmp/replay.log" | head -1)
ratio=$(awk -v a="$rm_" -v b="$tm" 'BEGIN { printf "%.2f", a / b }')
echo "## Replay speed (bench_replay.sh)"
echo
echo "GPT ${L}x${C} (heads $H, context $T, batch $B), $threads thread(s), one step dumped at L1"
echo "(tensor task, $calls, $((bytes / 1000000)) MB), replayed by \`nprobe replay\` (reads every"
echo "payload, recomputes every call in float64); the runtime's own training step at the same"
echo "size and threads as the baseline; $rounds interleaved rounds, medians; load before: $(cut -d' ' -f1-3 /proc/loadavg)."
echo
echo "| work | nprobe replay | runtime step | ratio | target | met? |"
echo "|---|---|---|---|---|---|"
met=$(awk -v r="$ratio" 'BEGIN { print (r <= 5) ? "yes" : "no" }')
echo "| GPT ${L}x${C}, one step, L1 tensor dump | ${rm_} ms | ${tm} ms | x${ratio} | <= x5 | $met |"
