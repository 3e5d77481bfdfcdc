#!/usr/bin/env bash
# scripts/bench/bench_train.sh [--quick] - GPT training step time of
# `nprobe train` against the same model in PyTorch CPU (torch_gpt.py), at
# the same thread count, batch and size, for several model sizes. Prints a
# Markdown section: one row per size with both medians and the ratio.
# Env: NPROBE_BIN (default build/nprobe), NP_PYTHON (default the project venv, .venv),
# BENCH_THREADS (default: all cores).
set -euo pipefail
root=$(cd "$(dirname "$0")/../.." && pwd)
bin=${NPROBE_BIN:-$root/build/release/nprobe}
py=${NP_PYTHON:-$(dirname "$0")/../../.venv/bin/python}
threads=${BENCH_THREADS:-$(nproc)}
steps=30 warm=5 rounds=3
# sizes: "layers heads width context batch"
sizes=("2 2 64 32 8" "4 4 128 64 8" "6 6 192 128 8")
if [ "${1:-}" = "--quick" ]; then
  steps=6 warm=2 rounds=1
  sizes=("2 2 64 32 8" "4 4 128 64 8")
fi
[ -x "$bin" ] || { echo "bench_train: $bin is not built (set NPROBE_BIN)" >&2; exit 2; }
have_torch=1
"$py" -c 'import torch' 2>/dev/null || have_torch=0
# Each side runs as it is fastest. nprobe: libgomp's default wait policy
# (spinning briefly between parallel regions), which is what a user gets;
# it is also measured with OMP_WAIT_POLICY=PASSIVE, for information.
# PyTorch: OMP_WAIT_POLICY=PASSIVE, since its OpenMP workers spinning next
# to OpenBLAS's own threads make it several times slower otherwise (no
# PyTorch user gets this setting by default). Spinning suits a quiet
# machine: on a busy one, take the PASSIVE column.
# Debian's OpenBLAS 0.3.21 does not recognise newer Xeons and falls back to
# its SSE3 "Prescott" kernels; nprobe's runtime switches to the kernels the
# CPU supports. PyTorch uses the same OpenBLAS, so it is measured twice: as
# Debian ships it, and with OPENBLAS_CORETYPE set to those kernels (the fair
# baseline).
coretype=""
if grep -qw avx512f /proc/cpuinfo; then coretype=SkylakeX
elif grep -qw avx2 /proc/cpuinfo; then coretype=Haswell; fi

# median ms per step of nprobe train: from the tok/s of each logged step
nprobe_ms() { # policy ("" = libgomp's default) L H C T B
  local pol=$1; shift
  local L=$1 H=$2 C=$3 T=$4 B=$5
  env -u OMP_WAIT_POLICY ${pol:+OMP_WAIT_POLICY=$pol} OMP_NUM_THREADS=$threads OPENBLAS_NUM_THREADS=$threads "$bin" train --model gpt \
    --layers "$L" --heads "$H" --width "$C" --context "$T" --batch "$B" \
    --steps $((steps + warm)) --threads "$threads" |
    awk -v tok=$((B * T)) -v warm="$warm" '
      /^step / { s = $2; r = 0; for (i = 1; i <= NF; i++) if ($i == "tok/s") r = $(i - 1);
                 if (s >= warm && r > 0) printf "%.6f\n", 1000.0 * tok / r }' |
    sort -g | awk '{ v[NR] = $1 } END { if (NR == 0) { print "nan"; exit }
      m = (NR % 2) ? v[(NR + 1) / 2] : (v[NR / 2] + v[NR / 2 + 1]) / 2; printf "%.3f\n", m }'
}

# median ms per step of the PyTorch twin; $1 = OPENBLAS_CORETYPE or ""
torch_ms() {
  local ct=$1; shift
  local L=$1 H=$2 C=$3 T=$4 B=$5
  env OMP_WAIT_POLICY=PASSIVE ${ct:+OPENBLAS_CORETYPE=$ct} OMP_NUM_THREADS=$threads "$py" "$root/scripts/bench/torch_gpt.py" \
    --layers "$L" --heads "$H" --width "$C" --context "$T" --batch "$B" --vocab 13 \
    --steps $steps --warmup $warm --threads "$threads" | awk '/^median_ms/ {print $2}'
}

echo "## GPT training step (nprobe train vs PyTorch CPU)"
echo
echo "Median milliseconds per training step (forward, backward, clipping, AdamW),"
echo "$steps timed steps after $warm warmup steps, $threads thread(s), vocabulary 13;"
echo "$rounds rounds, each running nprobe (twice), tuned PyTorch and PyTorch as shipped in"
echo "turn; the figure is the median of the rounds' medians."
echo "Ratio = nprobe / PyTorch (target <= 1), nprobe as a user runs it (libgomp's default"
echo "wait policy). \"PyTorch tuned\" runs Debian's torch with OPENBLAS_CORETYPE=${coretype:-unset}"
echo "(the kernels nprobe uses) and OMP_WAIT_POLICY=PASSIVE (without it PyTorch is several times"
echo "slower here); \"as shipped\" with PASSIVE only. \"nprobe PASSIVE\" is nprobe with"
echo "OMP_WAIT_POLICY=PASSIVE, for information: the setting to use on a busy machine."
echo "Command: \`scripts/bench/bench_train.sh ${1:-}\`, on a quiet machine."
echo
echo "| layers | heads | width | context | batch | nprobe ms | nprobe PASSIVE ms | PyTorch tuned ms | ratio (tuned) | PyTorch as shipped ms | ratio (shipped) | target |"
echo "|---:|---:|---:|---:|---:|---:|---:|---:|---:|---:|---:|---|"
med() { sort -g | awk '{ v[NR] = $1 } END { if (NR == 0) { print "nan"; exit }
  m = (NR % 2) ? v[(NR + 1) / 2] : (v[NR / 2] + v[NR / 2 + 1]) / 2; printf "%.3f\n", m }'; }
for s in "${sizes[@]}"; do
  read -r L H C T B <<<"$s"
  # rounds interleave the three runs so that machine noise hits each alike;
  # the figure is the median of the per-round medians
  nr=() pr=() tr=() dr=()
  for _ in $(seq "$rounds"); do
    nr+=("$(nprobe_ms "" "$L" "$H" "$C" "$T" "$B")")
    pr+=("$(nprobe_ms PASSIVE "$L" "$H" "$C" "$T" "$B")")
    if [ $have_torch = 1 ]; then
      tr+=("$(torch_ms "$coretype" "$L" "$H" "$C" "$T" "$B")")
      dr+=("$(torch_ms "" "$L" "$H" "$C" "$T" "$B")")
    fi
  done
  n_ms=$(printf '%s\n' "${nr[@]}" | med)
  p_ms=$(printf '%s\n' "${pr[@]}" | med)
  if [ $have_torch = 1 ]; then
    t_ms=$(printf '%s\n' "${tr[@]}" | med)
    d_ms=$(printf '%s\n' "${dr[@]}" | med)
    ratio=$(awk -v a="$n_ms" -v b="$t_ms" 'BEGIN { if (b > 0) printf "%.2f", a / b; else print "n/a" }')
    dratio=$(awk -v a="$n_ms" -v b="$d_ms" 'BEGIN { if (b > 0) printf "%.2f", a / b; else print "n/a" }')
  else
    t_ms="(no torch)" d_ms="(no torch)" ratio="n/a" dratio="n/a"
  fi
  echo "| $L | $H | $C | $T | $B | $n_ms | $p_ms | $t_ms | $ratio | $d_ms | $dratio | <= 1 |"
done
