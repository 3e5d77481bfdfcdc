#!/usr/bin/env bash
# test_torch_reference.sh - a PyTorch reference run (samples/torch/gpt_reference.py,
# dumped through the nprobe package) against
# the runtime: the cpu fp32 runtime must agree with PyTorch (no error row, no
# culprit), and a faulted npu-sim run must have the faulted op as the first
# culprit. Skips (77) where python3-torch or python3-h5py is missing.
set -u
. "${NP_SOURCE_DIR:?}/tests/e2e/torch_reference_setup.sh"

# the same loss, printed by both
rt_loss=$("$N" show dump_rt Functional.cross_entropy.0.forward.output.0 | sed -n 's/.*max *\([-0-9.e+]*\).*/\1/p' | head -n1)
echo "runtime loss $rt_loss; $(cat ref.txt)"

"$N" compare -b dump_torch -c dump_rt -o rep_ok --format json > ok.txt
code=$?
cat ok.txt
[ $code -eq 0 ] || { echo "FAIL: PyTorch vs runtime: exit $code, want 0"; fail=1; }
grep -q "first culprit: none" ok.txt || { echo "FAIL: a culprit was named for an agreeing run"; fail=1; }
"$PY" - rep_ok <<'PY' || fail=1
import glob, json, sys
rows = json.load(open(glob.glob(sys.argv[1] + "/*.json")[0]))
rows = rows["rows"] if isinstance(rows, dict) and "rows" in rows else rows
text = json.dumps(rows)
n_exact = text.count('"exact"')
if n_exact < 200:
    print(f"FAIL: only {n_exact} exact matches between PyTorch and the runtime"); sys.exit(1)
print(f"{n_exact} exact matches")
PY

"$N" compare -b dump_torch -c dump_fault -o rep_fault > fault.txt
code=$?
cat fault.txt
[ $code -eq 1 ] || { echo "FAIL: PyTorch vs faulted run: exit $code, want 1"; fail=1; }
grep -q "first culprit: Functional.scaled_dot_product_attention.0.forward" fault.txt \
  || { echo "FAIL: the attn_scale fault was not named as the first culprit"; fail=1; }
[ $fail -eq 0 ] && echo "1 passed, 0 failed" || echo "0 passed, 1 failed"
exit $fail
