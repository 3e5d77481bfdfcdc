#!/usr/bin/env bash
# scripts/bench/bench_o2_instr.sh [--quick] - the -O2 comparison of
# bench_o2.sh counted in instructions (valgrind --tool=callgrind, total Ir):
# the same binary on the same input executes the same instructions however
# loaded the machine is, so this row holds where wall-clock times on a busy
# machine do not. Fewer instructions is the effect of vectorisation the -O3
# of the hot kernels brings (one AVX2 instruction does 8 floats). Builds
# Release, RelWithDebInfo (hot kernels at -O3, the default) and
# RelWithDebInfo -DNP_HOT_O3=OFF as bench_o2.sh does; one OpenMP thread.
# Prints a Markdown section on stdout. Env: NPROBE_BIN (the Release build).
set -euo pipefail
root=$(cd "$(dirname "$0")/../.." && pwd)
rel=${NPROBE_BIN:-$root/build/release/nprobe}
command -v valgrind >/dev/null || { echo "bench_o2_instr: valgrind is not installed" >&2; exit 2; }
[ -x "$rel" ] || { echo "bench_o2_instr: $rel is not built (set NPROBE_BIN)" >&2; exit 2; }
rel=$(cd "$(dirname "$rel")" && pwd)/$(basename "$rel")
o2=$(nice -n 19 "$root/scripts/build.sh" "$root/build/bench-relwithdebinfo" -DCMAKE_BUILD_TYPE=RelWithDebInfo \
  -DNP_HOT_O3=ON -DNP_BUILD_TESTS=OFF)
plain=$(nice -n 19 "$root/scripts/build.sh" "$root/build/bench-relwithdebinfo-plain" \
  -DCMAKE_BUILD_TYPE=RelWithDebInfo -DNP_HOT_O3=OFF -DNP_BUILD_TESTS=OFF)
model=(--model gpt --layers 2 --heads 2 --width 128 --context 64 --batch 4)
steps=2
quick=""
if [ "${1:-}" = "--quick" ]; then
  quick=" --quick"
  model=(--model gpt --layers 1 --heads 2 --width 32 --context 16 --batch 2)
fi
work=$(mktemp -d "${BENCH_DIR:-/tmp}/np_bench_o2i.XXXXXX")
trap 'rm -rf "$work"' EXIT
cd "$work"
printf '{"task": "statistics", "dump_path": "%s/d_stats", "level": "L1"}\n' "$work" > stats.json
declare -A bins=([rel]=$rel [o2]=$o2 [plain]=$plain) ir
for b in rel o2 plain; do
  for v in none statistics; do
    extra=()
    [ "$v" = statistics ] && extra=(--dump-config stats.json)
    rm -rf d_stats
    OMP_NUM_THREADS=1 OPENBLAS_NUM_THREADS=1 valgrind --tool=callgrind --callgrind-out-file="cg_$b.$v" \
      "${bins[$b]}" train "${model[@]}" --steps "$steps" --threads 1 "${extra[@]}" >/dev/null 2>"cg_$b.$v.log"
    ir[$b:$v]=$(sed -n 's/^summary: *//p' "cg_$b.$v" | head -n1)
  done
done
ratio() { awk -v a="$1" -v b="$2" 'BEGIN { if (b > 0) printf "x%.3f", a / b; else print "-" }'; }
le() { awk -v a="$1" -v b="$2" -v t="$3" 'BEGIN { print (b > 0 && a / b <= t) ? "yes" : "no" }'; }
m() { awk -v a="$1" 'BEGIN { printf "%.1f M", a / 1e6 }'; }
echo "## Built the way distributions build, in instructions (bench_o2_instr.sh)"
echo
echo "\`scripts/bench/bench_o2_instr.sh$quick\`: instructions executed (valgrind callgrind, total Ir) by" \
     "\`nprobe train ${model[*]} --steps $steps --threads 1\`, without and with statistics at L1," \
     "for the three builds of bench_o2.sh. Independent of the machine's load."
echo
echo "| work | nprobe | baseline | ratio | target | met? |"
echo "|---|---|---|---|---|---|"
echo "| instructions, no probe, RelWithDebInfo over Release | $(m "${ir[o2:none]}") | $(m "${ir[rel:none]}") | $(ratio "${ir[o2:none]}" "${ir[rel:none]}") | <= x1.05 | $(le "${ir[o2:none]}" "${ir[rel:none]}" 1.05) |"
echo "| instructions, statistics L1, RelWithDebInfo over Release | $(m "${ir[o2:statistics]}") | $(m "${ir[rel:statistics]}") | $(ratio "${ir[o2:statistics]}" "${ir[rel:statistics]}") | <= x1.05 | $(le "${ir[o2:statistics]}" "${ir[rel:statistics]}" 1.05) |"
echo "| instructions of the statistics L1 dump (with minus without), RelWithDebInfo over Release | $(m $((ir[o2:statistics] - ir[o2:none]))) | $(m $((ir[rel:statistics] - ir[rel:none]))) | $(ratio $((ir[o2:statistics] - ir[o2:none])) $((ir[rel:statistics] - ir[rel:none]))) | <= x1.05 | $(le $((ir[o2:statistics] - ir[o2:none])) $((ir[rel:statistics] - ir[rel:none])) 1.05) |"
echo "| instructions, no probe, RelWithDebInfo NP_HOT_O3=OFF over Release | $(m "${ir[plain:none]}") | $(m "${ir[rel:none]}") | $(ratio "${ir[plain:none]}" "${ir[rel:none]}") | - | - |"
echo "| instructions of the statistics L1 dump, RelWithDebInfo NP_HOT_O3=OFF over Release | $(m $((ir[plain:statistics] - ir[plain:none]))) | $(m $((ir[rel:statistics] - ir[rel:none]))) | $(ratio $((ir[plain:statistics] - ir[plain:none])) $((ir[rel:statistics] - ir[rel:none]))) | - | - |"
