#!/usr/bin/env bash
# scripts/bench/bench_hook_dispatch.sh A_BIN B_BIN [LABEL_A LABEL_B] - the
# runtime hook's dispatch cost per call, counted in instructions
# (valgrind --tool=callgrind, total Ir; the same binary on the same input
# executes the same instructions however loaded the machine is).
#
# For each nprobe binary (e.g. a build of the commit before the observer
# list, 86f2c3b^, and one of HEAD): one training step of a tiny GPT is the
# difference of a 2-step and a 1-step run (start-up cancels), counted
#   - with no observer (the hook's cost when nobody listens: the before
#     event must cost nothing here), and
#   - with the probe attached at level mix but dumping nothing (a list
#     that matches no leaf: every event is dispatched to the probe and
#     filtered there), so the difference of the two rows, divided by
#     the calls of a step, is the dispatch cost per call.
# The calls of a step come from `nprobe ls --calls` of a one-step mix dump.
# Prints a Markdown table on stdout. One OpenMP thread.
set -euo pipefail
[ $# -ge 2 ] || { echo "usage: $0 A_BIN B_BIN [LABEL_A LABEL_B]" >&2; exit 2; }
command -v valgrind >/dev/null || { echo "bench_hook_dispatch: valgrind is not installed" >&2; exit 2; }
abs() { echo "$(cd "$(dirname "$1")" && pwd)/$(basename "$1")"; }
bins=("$(abs "$1")" "$(abs "$2")") # the runs happen in a work folder
labels=("${3:-A}" "${4:-B}")
for b in "${bins[@]}"; do [ -x "$b" ] || { echo "bench_hook_dispatch: $b is not executable" >&2; exit 2; }; done
work=$(mktemp -d "${BENCH_DIR:-/tmp}/np_bench_hook.XXXXXX")
trap 'rm -rf "$work"' EXIT
cd "$work"
model=(--model gpt --layers 1 --heads 2 --width 32 --context 16 --batch 2 --threads 1 --seed 1)
printf '{"task": "statistics", "dump_path": "%s/d_none", "level": "mix", "statistics": {"list": ["NoSuchLeaf"]}}\n' \
  "$work" > none.json
printf '{"task": "statistics", "dump_path": "%s/d_mix", "level": "mix", "step": [0]}\n' "$work" > mix.json

ir() { # bin steps [dump-config] -> total Ir
  local extra=()
  [ -n "${3:-}" ] && extra=(--dump-config "$3")
  rm -rf d_none
  OMP_NUM_THREADS=1 valgrind --tool=callgrind --callgrind-out-file=cg.out "$1" train "${model[@]}" \
    --steps "$2" "${extra[@]}" >/dev/null 2>cg.log || { cat cg.log >&2; exit 1; }
  sed -n 's/^summary: *//p' cg.out | head -n1
}

rm -rf d_mix
"${bins[1]}" train "${model[@]}" --steps 1 --dump-config mix.json >/dev/null
calls=$("${bins[1]}" ls --calls d_mix | grep -c 'forward\|backward' || true)
echo "| build | Ir per step, no observer | Ir per step, probe filtering every leaf | Ir per call, dispatch + probe |"
echo "|---|---:|---:|---:|"
for i in 0 1; do
  b=${bins[$i]}
  n1=$(ir "$b" 1); n2=$(ir "$b" 2)
  p1=$(ir "$b" 1 none.json); p2=$(ir "$b" 2 none.json)
  none=$((n2 - n1)); probe=$((p2 - p1))
  per=$(awk -v a="$probe" -v b="$none" -v c="$calls" 'BEGIN { printf "%.0f", (c > 0) ? (a - b) / c : 0 }')
  echo "| ${labels[$i]} | $none | $probe | $per |"
done
echo
echo "Calls (API and module events, forward and backward) per step: $calls."
