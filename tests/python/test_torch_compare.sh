#!/usr/bin/env bash
# test_torch_compare.sh - PyTorch runs dumped by the nprobe package, compared:
#  1. the PyTorch GPT (samples/torch/gpt_reference.py) against `nprobe train
#     --model gpt` on the same weights and batch: no error row, no culprit,
#     seeds 1-6 (one seed under the sanitizers);
#  2. PyTorch fp32 against PyTorch bf16 autocast: no culprit at the initial
#     and at trained (20-step) weights;
#  3. a bug injected into the PyTorch model is named as the first culprit:
#     a wrong layer-norm epsilon passed positionally, the MLP output bias
#     dropped, tanh GELU, the attention's residual left out (named at the
#     Block holding the gap), label smoothing 0.1 inside the loss (all fp32).
# The runtime's runs (C) come first; then every PyTorch run of the three
# parts, each with its own debugger and model, in one Python process
# (pymany.py: a process with torch and a hooked model costs ~5 s to start,
# more than a run of this GPT; CI time); then the compares.
set -u
N=${NPROBE_BIN:?}
SRC=${NP_SOURCE_DIR:?}
RUN="$SRC/tests/python/pyrun.sh"
REF=$(printf %q "$SRC/samples/torch/gpt_reference.py")   # a line of runs.txt (pymany.py)
"${NP_PYTHON:-/usr/bin/python3}" -c 'import importlib.util as u, sys; sys.exit(not all(map(u.find_spec, ("torch", "h5py"))))' 2>/dev/null || { echo "SKIP: torch or h5py missing"; exit 77; }
tmp=$(mktemp -d)
trap 'rm -rf "$tmp"' EXIT
cd "$tmp"
fail=0
model=(--model gpt --layers 2 --heads 2 --width 32 --context 16 --batch 4 --threads 1)
printf '{"task":"tensor","dump_path":"dump_rt","step":[0],"level":"mix"}' > rt.json
seeds="1 2 3 4 5 6"
[ "${NP_SANITIZED:-0}" = 1 ] && seeds="1"

# the runtime's side: per seed its initial weights and a tensor dump of step 0;
# trained weights (seed 1, 20 steps); the batch of the last seed for 2. and 3.
: > runs.txt
for s in $seeds; do
  rm -rf dump_rt "dump_rt_$s"
  "$N" train "${model[@]}" --seed "$s" --steps 0 --save "init_$s.h5" >/dev/null || { echo "FAIL: train --save seed $s"; exit 1; }
  "$N" dump -c rt.json -- "$N" train "${model[@]}" --seed "$s" --steps 1 >/dev/null 2>&1 || { echo "FAIL: runtime dump seed $s"; exit 1; }
  mv dump_rt "dump_rt_$s"
  echo "$REF --ckpt init_$s.h5 --batch-from dump_rt_$s/step0/rank0/dump.h5 --out dump_torch_$s" >> runs.txt
  last=$s
done
cp "init_$last.h5" init.h5
cp "dump_rt_$last/step0/rank0/dump.h5" batch.h5
"$N" train "${model[@]}" --seed 1 --steps 20 --save trained.h5 >/dev/null || { echo "FAIL: train 20 steps"; exit 1; }
for w in init trained; do
  echo "$REF --ckpt $w.h5 --batch-from batch.h5 --out f32_$w" >> runs.txt
  echo "$REF --ckpt $w.h5 --batch-from batch.h5 --out bf16_$w --bf16" >> runs.txt
done
bugs="ln_eps no_bias tanh_gelu no_residual label_smoothing"
for bug in $bugs; do
  echo "$REF --ckpt trained.h5 --batch-from batch.h5 --out dump_$bug --bug $bug" >> runs.txt
done
# every PyTorch run, one process (a failed run is named; its compare fails below)
"$RUN" "$SRC/tests/python/pymany.py" runs.txt > runs.log 2>&1 \
  || { echo "FAIL: a PyTorch run"; grep -v "^gpt_reference.py: step" runs.log; fail=1; }
tail -n 1 runs.log

# 1. PyTorch against the runtime, several seeds
for s in $seeds; do
  rm -rf rep
  "$N" compare -b "dump_torch_$s" -c "dump_rt_$s" -o rep > cmp.txt
  code=$?
  if [ $code -ne 0 ] || ! grep -q "first culprit: none" cmp.txt || ! grep -q " 0 error" cmp.txt; then
    echo "FAIL: seed $s: PyTorch vs runtime: exit $code"; cat cmp.txt; fail=1
  else
    echo "seed $s: $(head -n1 cmp.txt)"
  fi
done

# 2. fp32 against bf16 autocast, initial and trained weights
for w in init trained; do
  prec=$("$N" ls "bf16_$w" | sed -n 's/.*pytorch on cpu (\([a-z0-9]*\)).*/\1/p' | head -n1)
  [ "$prec" = "bf16" ] || { echo "FAIL: the autocast run's precision is '$prec', want bf16"; fail=1; }
  "${NP_PYTHON:?}" - "f32_$w" "bf16_$w" <<'PY' || { echo "FAIL: autocast left the linear output unchanged at $w weights"; fail=1; }
import sys, h5py, numpy as np
name = "data/Functional.linear.0.forward.output.0"
a = np.array(h5py.File(sys.argv[1] + "/step0/rank0/dump.h5")[name])
b = np.array(h5py.File(sys.argv[2] + "/step0/rank0/dump.h5")[name])
d = np.abs(a - b).max() / np.abs(a).max()
print(f"bf16 vs fp32 linear output: max relative difference {d:.2e}")
sys.exit(0 if 1e-4 < d < 0.1 else 1)
PY
  "$N" compare -b "f32_$w" -c "bf16_$w" -o "rep_bf16_$w" > "bf16_$w.txt"
  code=$?
  if [ $code -ne 0 ] || ! grep -q "first culprit: none" "bf16_$w.txt"; then
    echo "FAIL: fp32 vs bf16 autocast at $w weights: exit $code"; cat "bf16_$w.txt"; fail=1
  else
    echo "bf16 $w: $(head -n1 "bf16_$w.txt")"
  fi
done
# 3. injected bugs named (bench: the correct PyTorch model at trained weights:
# the runtime initialises biases to zero, so a dropped bias shows after training)
want_ln_eps="Functional.layer_norm.0.forward"
want_no_bias="Functional.linear.3.forward"
want_tanh_gelu="Functional.gelu.0.forward"
# rule 2: the attention's residual left out: named at the Block holding the gap
want_no_residual="Module.h.0.Block.forward.0"
want_label_smoothing="Functional.cross_entropy.0.forward"
for bug in $bugs; do
  "$N" compare -b f32_trained -c "dump_$bug" -o "rep_$bug" > "bug_$bug.txt"
  code=$?
  want_var="want_$bug"
  want=${!want_var}
  if [ $code -ne 1 ] || ! grep -q "first culprit: $want " "bug_$bug.txt"; then
    echo "FAIL: --bug $bug: exit $code, want 1 and first culprit $want"; cat "bug_$bug.txt"; fail=1
  else
    echo "bug $bug: $(grep 'first culprit' "bug_$bug.txt")"
  fi
done

[ $fail -eq 0 ] && echo "all passed" || echo "some failed"
exit $fail
