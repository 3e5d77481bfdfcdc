#!/usr/bin/env bash
# test_data_tolerance.sh - issue 31: tolerances follow the data. A tiny
# Llama-style decoder (tests/python/llama_tiny.py), fp32 against bf16
# autocast, both declared fp32, statistics task, 2 steps: the float32
# residual adds and RMSNorm outputs computed from bf16-rounded inputs
# inherit the bf16 level, so the clean pair has no error row and no culprit
# (before: "Tensor.__add__ ... inputs pass, outputs fail").
set -u
N=${NPROBE_BIN:?}
SRC=${NP_SOURCE_DIR:?}
RUN="$SRC/tests/python/pyrun.sh"
"${NP_PYTHON:-/usr/bin/python3}" -c 'import importlib.util as u, sys; sys.exit(not all(map(u.find_spec, ("torch", "h5py"))))' 2>/dev/null || { echo "SKIP: torch or h5py missing"; exit 77; }
tmp=$(mktemp -d)
trap 'rm -rf "$tmp"' EXIT
cd "$tmp"
# both runs in one process (tests/python/pymany.py; CI time)
lt=$(printf %q "$SRC/tests/python/llama_tiny.py")
printf '%s f32 f32 statistics 1\n%s bf16 bf16 statistics 1\n' "$lt" "$lt" > runs.txt
"$RUN" "$SRC/tests/python/pymany.py" runs.txt > runs.log 2>&1 || { echo "FAIL: the fp32 or bf16 run"; cat runs.log; exit 1; }
"$N" compare -b f32 -c bf16 -o rep > out.txt
code=$?
cat out.txt | head -4
if [ $code -ne 0 ] || ! grep -q "first culprit: none" out.txt || ! grep -q " 0 error" out.txt; then
  echo "FAIL: clean fp32 vs bf16 pair: exit $code"; cat out.txt; exit 1
fi
grep -rq "the data carry bfloat16 rounding" rep || { echo "FAIL: the reports do not say the tolerance was inherited"; exit 1; }
echo ok
