#!/usr/bin/env bash
# scripts/bench/bench_monitor_ir.sh [NPROBE] [LAYERS] [STEPS] - the monitor's
# cost every step as an instruction-count ratio (docs/PERFORMANCE.md
# "Monitor"): valgrind --tool=callgrind counts the instructions executed
# inside np_trainer_step (--toggle-collect: the training steps only, not
# the start-up, the data or the model's initialisation), for the runtime
# GPT LAYERS x 256 (context 32, batch 8: 256 tokens a step, AdamW, one
# thread) without the monitor (off), with gradients, weights, the update
# ratio and Adam's m and v every step (wg: xy_distribution false), the same
# without m and v (gw: mv_distribution false too; issue 27's "gradients and
# weights every step") and with everything (all: the activations and
# activation gradients of every module too). The same binary on the same input executes the same
# instructions however loaded the machine is, so the ratio holds on a
# noisy machine; it counts instructions, not time (a division or a cache
# miss weighs as an add; the HDF5 file's system calls are not counted).
# Under valgrind the AVX2 clones of the statistics kernels run (valgrind
# has no AVX-512), and the plain update (adamw_range) the same cloned
# loop as the monitored one: the ratio is like for like. The monitor's work and the step's both
# grow per layer, so 1 layer (the default) should give close to the ratio
# of 4 (not measured: a callgrind run of 4 layers takes tens of minutes on
# a loaded machine).
# Prints a Markdown table.
set -euo pipefail
nprobe=${1:-build/release/nprobe}
layers=${2:-1}
steps=${3:-3}
command -v valgrind >/dev/null || { echo "bench_monitor_ir: valgrind is not installed" >&2; exit 2; }
[ -x "$nprobe" ] || { echo "bench_monitor_ir: $nprobe is not executable" >&2; exit 2; }
work=$(mktemp -d "${BENCH_DIR:-/tmp}/np_bench_monir.XXXXXX")
trap 'rm -rf "$work"' EXIT
printf '{"task": "monitor", "dump_path": "%s/m_wg", "monitor": {"xy_distribution": false}}\n' "$work" > "$work/wg.json"
printf '{"task": "monitor", "dump_path": "%s/m_gw", "monitor": {"xy_distribution": false, "mv_distribution": false}}\n' "$work" > "$work/gw.json"
printf '{"task": "monitor", "dump_path": "%s/m_all", "monitor": {}}\n' "$work" > "$work/all.json"
args=(train --model gpt --layers "$layers" --width 256 --heads 4 --batch 8 --threads 1 --seed 1 --steps "$steps")
ir() { # variant -> Ir inside np_trainer_step over all steps
  local extra=()
  [ "$1" != off ] && extra=(--dump-config "$work/$1.json")
  OMP_NUM_THREADS=1 valgrind --tool=callgrind --toggle-collect=np_trainer_step \
    --callgrind-out-file="$work/$1.out" "$nprobe" "${args[@]}" "${extra[@]}" > "$work/$1.log" 2>&1 ||
    { cat "$work/$1.log" >&2; exit 1; }
  sed -n 's/^summary: *//p' "$work/$1.out" | head -n1
}
# the four runs side by side (each one process)
for v in off gw wg all; do ir "$v" > "$work/$v.ir" & done
wait
for v in off gw wg all; do [ -s "$work/$v.ir" ] || { echo "bench_monitor_ir: the $v run failed" >&2; exit 1; }; done
off=$(cat "$work/off.ir")
echo "| variant | Ir in np_trainer_step, $steps steps (GPT ${layers}x256, 256 tokens) | Ir per step | ratio to off |"
echo "|---|---:|---:|---:|"
for v in off gw wg all; do
  n=$(cat "$work/$v.ir")
  awk -v v="$v" -v n="$n" -v o="$off" -v s="$steps" \
    'BEGIN { printf "| %s | %d | %d | x%.4f |\n", v, n, n / s, n / o }'
done
