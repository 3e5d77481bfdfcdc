#!/usr/bin/env bash
# test_identical_dumps.sh - issue 31: a dump compared with itself names no
# culprit. samples/torch/train.py (PyTorch GPT with GELU, fp32, 2 steps)
# dumped by the package as tensors at L1 (whose Tensor.reshape backward has
# no produced gradient: replay crashed on it) and at mix (whose torch GELU
# backward the replay alone judged 63-337 x its budget): `nprobe compare
# -b D -c D` must exit 0 with "first culprit: none", replay on.
set -u
N=${NPROBE_BIN:?}
SRC=${NP_SOURCE_DIR:?}
RUN="$SRC/tests/python/pyrun.sh"
"${NP_PYTHON:-/usr/bin/python3}" -c 'import importlib.util as u, sys; sys.exit(not all(map(u.find_spec, ("torch", "h5py"))))' 2>/dev/null || { echo "SKIP: torch or h5py missing"; exit 77; }
tmp=$(mktemp -d)
trap 'rm -rf "$tmp"' EXIT
cd "$tmp"
fail=0
# both levels' runs in one process (tests/python/pymany.py; CI time)
train=$(printf %q "$SRC/samples/torch/train.py")
for lv in L1 mix; do
  printf '{"task":"tensor","dump_path":"d_%s","step":[0,1],"level":"%s"}' "$lv" "$lv" > "$lv.json"
  echo "$train --config $lv.json --steps 2 --seed 1" >> runs.txt
done
"$RUN" "$SRC/tests/python/pymany.py" runs.txt > runs.log 2>&1 || { echo "FAIL: train.py"; cat runs.log; fail=1; }
for lv in L1 mix; do
  [ -f "d_$lv/step1/rank0/dump.h5" ] || { echo "FAIL: train.py at $lv wrote no step 1"; fail=1; continue; }
  "$N" compare -b "d_$lv" -c "d_$lv" -o "rep_$lv" > "$lv.txt" 2>&1
  code=$?
  if [ $code -ne 0 ] || ! grep -q "first culprit: none" "$lv.txt"; then
    echo "FAIL: $lv: compare D D exit $code"; cat "$lv.txt"; fail=1
  else
    echo "ok: $lv: $(head -n1 "$lv.txt")"
  fi
  "$N" replay "d_$lv" > "replay_$lv.txt" 2>&1
  code=$?
  [ $code -le 1 ] || { echo "FAIL: $lv: replay exit $code"; cat "replay_$lv.txt"; fail=1; }
  grep -q "Functional.gelu.*exceeds\|exceeds: Functional.gelu" "replay_$lv.txt" \
    && { echo "FAIL: $lv: torch's fp32 GELU exceeds its budget"; cat "replay_$lv.txt"; fail=1; }
done
exit $fail
