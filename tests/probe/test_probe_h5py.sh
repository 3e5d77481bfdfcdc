#!/usr/bin/env bash
# test_probe_h5py.sh - runs the h5py/pandas example of docs/FORMAT.md on a
# fresh GPT dump (tensor task) and checks what it read against the file's
# own row count and a payload (skips with 77 when h5py or pandas is missing;
# the HDF5 C API reading is covered by test_probe_dump).
set -eu
py=${NP_PYTHON:-/usr/bin/python3}
"$py" -c "import h5py, pandas" 2>/dev/null || { echo "SKIP: h5py/pandas not importable"; exit 77; }
tmp=$(mktemp -d)
trap 'rm -rf "$tmp"' EXIT
cd "$tmp"
cat > cfg.json <<JSON
{"task": "tensor", "dump_path": "$tmp/dump", "level": "mix", "step": [0]}
JSON
"$NPROBE_BIN" train --model gpt --layers 1 --width 32 --context 16 --batch 2 --steps 1 \
  --dump-config cfg.json >train.log 2>&1 || { cat train.log; exit 1; }
# The example, verbatim from the docs.
sed -n '/^```python$/,/^```$/p' "$NP_SOURCE_DIR/docs/FORMAT.md" | sed '1d;$d' > example.py
test -s example.py
cat >> example.py <<'PY'
import numpy as np
with h5py.File("dump/step0/rank0/dump.h5", "r") as g:
    rows = g["entries"].shape[0]
    assert len(df) == rows and rows > 100, (len(df), rows)
    first = df.name[0]
    assert first == "Functional.embedding.0.forward.input.0" or first.startswith(("Functional.", "Module.")), first
    assert x is not None and np.asarray(x).size == df.numel[0]
    # the payload's statistics agree with the row (finite values, float64)
    k = int(np.argmax(df.numel.values))
    big = g["data"][df.name[k]][()].astype(np.float64).ravel()
    assert abs(big.max() - df["max"][k]) == 0 and abs(big.min() - df["min"][k]) == 0
    assert abs(big.mean() - df["mean"][k]) <= 1e-9 * max(1.0, abs(df["mean"][k]))
    assert set(df.role) <= {"input", "output", "parameters", "kwargs", "parameters_grad"}
    assert (df.role == "parameters_grad").any() and df.call.str.contains(".backward").any()
print("h5py example ok:", len(df), "rows")
PY
"$py" example.py
