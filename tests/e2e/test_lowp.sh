#!/usr/bin/env bash
# test_lowp.sh - the low-precision GEMM formats end to end on the runtime
# GPT (one step, default size): clean MxFP8 and HiF8 runs compare clean
# against the cpu fp32 reference (exit 0) in tensor and statistics mode;
# the dumped quantization statistics and linear outputs equal a float64
# recomputation (lowp_stats_check.py: torch's float8_e4m3fn cast for MX,
# the paper's HiF8 table; skipped without torch/h5py); the precision faults
# are named: a wrong block scale (the first linear) and a saturating
# operand (its saturation row, the call's reason).
set -u
N=${NPROBE_BIN:?}
PY=${NP_PYTHON:-python3}
SRC=${NP_SOURCE_DIR:?}
tmp=$(mktemp -d)
trap 'rm -rf "$tmp"' EXIT
cd "$tmp"
fail=0
gpt=(--model gpt --steps 1 --seed 3 --threads 1)

dump() { # dump NAME TASK -- train args...
  local name=$1 task=$2
  shift 3
  printf '{"task":"%s","dump_path":"%s","step":[0],"level":"L1"}' "$task" "$name" > "$name.json"
  "$N" dump -c "$name.json" -- "$N" train "$@" > "$name.log" 2>&1 || { echo "FAIL: dump $name"; cat "$name.log"; fail=1; }
}

expect() { # expect BENCH CMP CODE [PATTERN in the first culprit line]
  "$N" compare -b "$1" -c "$2" -o "out_$2" --format csv > "$2.out" 2>&1
  local code=$?
  [ "$code" -eq "$3" ] || { echo "FAIL: compare $1 $2: exit $code, want $3"; cat "$2.out"; fail=1; return; }
  if [ -n "${4:-}" ]; then
    grep -m1 'first culprit:' "$2.out" | grep -q -- "$4" \
      || { echo "FAIL: compare $1 $2: first culprit not '$4'"; cat "$2.out"; fail=1; return; }
  fi
  echo "ok: $2 -> $code $(head -n1 "$2.out" | sed 's/.*: \([0-9]* rows\)/\1/')"
}

tasks=(tensor statistics)
[ "${NP_SANITIZED:-0}" = 1 ] && tasks=(tensor) # the C paths once (CI time)
for task in "${tasks[@]}"; do
  dump "ref_$task" "$task" -- "${gpt[@]}"
  for p in mxfp8 hif8; do
    dump "${p}_$task" "$task" -- "${gpt[@]}" --device npu-sim --precision "$p"
    expect "ref_$task" "${p}_$task" 0
  done
done

if "$PY" -c 'import importlib.util as u, sys; sys.exit(not all(map(u.find_spec, ("torch", "h5py"))))' 2>/dev/null; then
  for p in mxfp8 hif8; do
    env -u LD_PRELOAD "$PY" "$SRC/tests/e2e/lowp_stats_check.py" "${p}_tensor/step0/rank0/dump.h5" "$p" \
      || { echo "FAIL: the $p statistics"; fail=1; }
  done
else
  echo "note: torch or h5py missing, the float64 check of the statistics skipped"
fi

dump mx_scale tensor -- "${gpt[@]}" --device npu-sim --precision mxfp8 --fault lowp_block_scale
expect ref_tensor mx_scale 1 'Functional.linear.0.forward'
dump hif8_sat tensor -- "${gpt[@]}" --device npu-sim --precision hif8 --fault lowp_saturate
expect ref_tensor hif8_sat 1 'Functional.linear.0.forward.*saturates'
[ "${NP_SANITIZED:-0}" = 1 ] && exit $fail
dump mx_sat statistics -- "${gpt[@]}" --device npu-sim --precision mxfp8 --fault lowp_saturate
expect ref_statistics mx_sat 1 'Functional.linear.0.forward.*saturates'
grep -q 'lowp_x_saturation,.*saturating GEMM input' out_mx_sat/*.csv \
  || { echo "FAIL: no saturation row names the input"; fail=1; }
# a clean run's saturation rows pass
grep 'lowp_x_saturation' out_mxfp8_statistics/*.csv | grep -q ',error,' \
  && { echo "FAIL: a clean MxFP8 run has a saturation error"; fail=1; }
exit $fail
