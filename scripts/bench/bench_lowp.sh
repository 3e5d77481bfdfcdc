#!/usr/bin/env bash
# scripts/bench/bench_lowp.sh BUILD_DIR [ROUNDS] - the cost of MxFP8/HiF8
# quantization (issue 28):
#  1. ns per element of np_lowp_quantize (the block kernels of common/lowp.c)
#     against the scalar quantizer it replaced (tests/runtime/lowp_ref.c) on
#     a 768x768 tensor (bench_lowp.c, built here with cc -O2 against
#     BUILD_DIR's libnp_common.a);
#  2. nprobe train of the GPT at fp32, mxfp8 and hif8, interleaved in each
#     round so all three see the same load: the median ms per step and the
#     ratios to fp32.
# Env: BENCH_SIZE "layers heads width context batch" (default "2 2 64 32 8",
# nprobe train's defaults), BENCH_THREADS (default 1).
set -euo pipefail
B=${1:?usage: bench_lowp.sh BUILD_DIR [ROUNDS]}
rounds=${2:-5}
here=$(cd "$(dirname "$0")" && pwd)
root=$(cd "$here/../.." && pwd)
threads=${BENCH_THREADS:-1}
read -r L H C T Bt <<<"${BENCH_SIZE:-2 2 64 32 8}"
steps=20 warm=4
tmp=$(mktemp -d)
trap 'rm -rf "$tmp"' EXIT
cc -O2 -std=c11 -ffp-contract=off -I"$root/include" -I"$root/include/internal" -I"$root/tests/runtime" -o "$tmp/bench_lowp" \
  "$here/bench_lowp.c" "$root/tests/runtime/lowp_ref.c" "$B/common/libnp_common.a" -lm
"$tmp/bench_lowp" 768 768 20
median() { sort -g | awk '{ v[NR] = $1 } END { if (NR == 0) { print "nan"; exit }
    m = (NR % 2) ? v[(NR + 1) / 2] : (v[NR / 2] + v[NR / 2 + 1]) / 2; printf "%.3f\n", m }'; }
ms() { # median ms per step of one run at precision $1
  OMP_NUM_THREADS=$threads OPENBLAS_NUM_THREADS=$threads "$B/nprobe" train --model gpt --layers "$L" --heads "$H" \
    --width "$C" --context "$T" --batch "$Bt" --seed 3 --steps $((steps + warm)) --threads "$threads" \
    --precision "$1" 2>/dev/null |
    awk -v tok=$((Bt * T)) -v warm=$warm '/^step / { s = $2; r = 0;
        for (i = 1; i <= NF; i++) if ($i == "tok/s") r = $(i - 1);
        if (s >= warm && r > 0) printf "%.6f\n", 1000.0 * tok / r }' | median
}
echo "GPT $L x $C (heads $H, context $T, batch $Bt), $threads thread(s), $steps timed steps after $warm"
fs=() ms_=() hs=()
for r in $(seq "$rounds"); do
  a=$(ms fp32) b=$(ms mxfp8) c=$(ms hif8)
  fs+=("$a") ms_+=("$b") hs+=("$c")
  echo "round $r: fp32 $a ms, mxfp8 $b ms, hif8 $c ms, load $(cut -d' ' -f1 /proc/loadavg)"
done
mf=$(printf '%s\n' "${fs[@]}" | median) mm=$(printf '%s\n' "${ms_[@]}" | median) mh=$(printf '%s\n' "${hs[@]}" | median)
echo "median: fp32 $mf ms, mxfp8 $mm ms (x$(awk -v a="$mf" -v b="$mm" 'BEGIN { printf "%.2f", b / a }')), hif8 $mh ms (x$(awk -v a="$mf" -v b="$mh" 'BEGIN { printf "%.2f", b / a }'))"
