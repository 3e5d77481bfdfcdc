#!/usr/bin/env bash
# test_msprobe_vs_runtime.sh - a PyTorch reference in msprobe's on-disk
# format against nprobe's runtime on the same weights and batch: the
# reference (samples/torch/gpt_reference.py) is rewritten as msprobe 26
# writes a dump outside a distributed job (step0/proc{PID}/ dump.json, .pt
# payloads: tests/msprobe/nprobe_to_msprobe.py). The fp32 runtime must agree
# (exit 0, no culprit), a faulted npu-sim run must have the faulted op as the
# first culprit, and the reverse (runtime as the bench) must pair the same
# leaves. Skips (77) where python3-torch or python3-h5py is missing.
set -u
. "${NP_SOURCE_DIR:?}/tests/e2e/torch_reference_setup.sh"
"$PY" "$SRC/tests/msprobe/nprobe_to_msprobe.py" dump_torch/step0/rank0/dump.h5 dump_msp \
  || { echo "nprobe_to_msprobe.py failed"; exit 1; }
[ -f dump_msp/step0/proc4242/dump.json ] || { echo "FAIL: no msprobe layout written"; exit 1; }

"$N" compare -b dump_msp -c dump_rt -o rep_ok --format csv > ok.txt
code=$?
cat ok.txt
[ $code -eq 0 ] || { echo "FAIL: msprobe PyTorch vs runtime: exit $code, want 0"; fail=1; }
grep -q "first culprit: none" ok.txt || { echo "FAIL: a culprit was named for an agreeing run"; fail=1; }
# the msprobe form of the reference pairs exactly what its nprobe form pairs
# (the None gradients msprobe records where an op gives none aside)
"$N" compare -b dump_torch -c dump_rt -o rep_np --format csv -q
"$PY" - rep_ok rep_np <<'PY' || fail=1
import csv, glob, sys
def rows(d):
    return list(csv.DictReader(open(glob.glob(d + "/*.csv")[0])))
ms, np_ = rows(sys.argv[1]), rows(sys.argv[2])
def key(rs, m):
    return sorted(r["Bench Name"] if m == "bench-only" else r["NPU Name"] for r in rs
                  if r["Match"] == m and r["Bench Dtype"] != "None")
for m in ("exact", "bench-only", "cmp-only"):
    a, b = key(ms, m), key(np_, m)
    if a != b:
        print(f"FAIL: {m} rows differ between the msprobe and nprobe forms: "
              f"{sorted(set(a) ^ set(b))[:5]}"); sys.exit(1)
if len(key(ms, "exact")) < 300 or any(r["Verdict"] == "error" for r in ms):
    print("FAIL: too few exact matches or error rows"); sys.exit(1)
print(f"{len(key(ms, 'exact'))} exact matches as in the nprobe form, no error row")
PY

"$N" compare -b dump_msp -c dump_fault -o rep_fault > fault.txt
code=$?
cat fault.txt
[ $code -eq 1 ] || { echo "FAIL: msprobe PyTorch vs faulted run: exit $code, want 1"; fail=1; }
grep -q "first culprit: Functional.scaled_dot_product_attention.0.forward" fault.txt \
  || { echo "FAIL: the attn_scale fault was not named as the first culprit"; fail=1; }

# the reverse: the runtime as the bench, the msprobe dump under test
"$N" compare -b dump_rt -c dump_msp -o rep_rev > rev.txt
code=$?
cat rev.txt
[ $code -eq 0 ] || { echo "FAIL: runtime vs msprobe PyTorch: exit $code, want 0"; fail=1; }
grep -q "first culprit: none" rev.txt || { echo "FAIL: a culprit was named (reverse)"; fail=1; }
[ $fail -eq 0 ] && echo "1 passed, 0 failed" || echo "0 passed, 1 failed"
exit $fail
