#!/usr/bin/env bash
# e2e_replay.sh - `nprobe replay` on real dumps: clean runs of the runtime
# (GPT and CNN, cpu fp32 and npu-sim bf16/fp16) and of PyTorch (when
# python3-torch and h5py are there) flag no call and exit 0; a faulted run
# exits 1 with the faulted API as the worst exceeding call; the csv, json
# and xlsx reports carry the same rows; a statistics dump is all "not
# recomputable"; bad input exits 2 naming it.
set -u
N=${NPROBE_BIN:?}
PY=${NP_PYTHON:-/usr/bin/python3}
SRC=${NP_SOURCE_DIR:?}
tmp=$(mktemp -d)
trap 'rm -rf "$tmp"' EXIT
cd "$tmp"
fail=0
gpt=(--model gpt --steps 1 --seed 3 --threads 1)
cnn=(--model cnn --steps 1 --seed 2 --threads 1)

dump() { # dump NAME TASK -- train args...
  local name=$1 task=$2
  shift 3
  printf '{"task":"%s","dump_path":"%s","step":[0],"level":"L1"}' "$task" "$name" > "$name.json"
  "$N" dump -c "$name.json" -- "$N" train "$@" >/dev/null 2>&1 || { echo "FAIL: dump $name"; fail=1; }
}

expect() { # expect NAME CODE [PATTERN]: replay NAME, want exit CODE and PATTERN in the first exceeding line
  local name=$1 want=$2 pat=${3:-}
  "$N" replay "$name" --top 1 > "$name.out" 2> "$name.err"
  local code=$?
  [ "$code" -eq "$want" ] || { echo "FAIL: replay $name: exit $code, want $want"; cat "$name.out" "$name.err"; fail=1; return; }
  if [ -n "$pat" ]; then
    grep -m1 -E '^  (exceeds|defect signature): ' "$name.out" | grep -q "$pat" \
      || { echo "FAIL: replay $name: the worst call is not $pat"; cat "$name.out"; fail=1; return; }
  fi
  echo "ok: $name -> $code $(head -n1 "$name.out" | sed 's/.*: \([0-9]* calls\)/\1/')"
}

dump gpt_cpu tensor -- "${gpt[@]}"
expect gpt_cpu 0
dump gpt_bf16 tensor -- "${gpt[@]}" --device npu-sim --precision bf16
expect gpt_bf16 0
dump cnn_fp16 tensor -- "${cnn[@]}" --device npu-sim --precision fp16
expect cnn_fp16 0
grep -q ' 0 not recomputable' gpt_cpu.out || { echo "FAIL: a runtime call was not recomputable"; cat gpt_cpu.out; fail=1; }

faults=("bf16 gelu_tanh Functional.gelu" "bf16 layernorm_bwd_no_mean Functional.layer_norm.[0-9]*.backward"
        "fp16 attn_mask_off_by_one Functional.scaled_dot_product_attention"
        "bf16 linear_drop_bias Functional.linear.[0-9]*.backward")
[ "${NP_SANITIZED:-0}" = 1 ] && faults=("${faults[0]}")
for f in "${faults[@]}"; do
  set -- $f
  dump "gpt_$2" tensor -- "${gpt[@]}" --device npu-sim --precision "$1" --fault "$2"
  expect "gpt_$2" 1 "$3"
done
dump cnn_flip tensor -- "${cnn[@]}" --device npu-sim --precision bf16 --fault conv2d_flip_kernel
expect cnn_flip 1 "Functional.conv2d"

# defect signatures (docs/COMPARE.md): faults inside the budget, told by
# their pattern: the fp16 softmax without max subtraction (a fit) and the
# tanh GELU at small inputs (rounding votes; seed 2 has no GELU input
# beyond |x| 0.7), in bf16
sig=("softmax_fp16_nomax 3 Functional.scaled_dot_product_attention.[0-9]*.forward"
     "gelu_tanh 2 Functional.gelu.[0-9]*.backward")
[ "${NP_SANITIZED:-0}" = 1 ] && sig=("${sig[1]}")
for f in "${sig[@]}"; do
  set -- $f
  dump "sig_$1" tensor -- --model gpt --steps 1 --seed "$2" --threads 1 --device npu-sim --precision bf16 --fault "$1"
  "$N" replay "sig_$1" > "sig_$1.out" 2>&1
  code=$?
  if [ $code -eq 1 ] && grep -q "^  defect signature: $3 " "sig_$1.out" && ! grep -q '^  exceeds:' "sig_$1.out"; then
    echo "ok: sig_$1 -> $(grep -m1 '^  defect signature' "sig_$1.out" | cut -c1-160)"
  else
    echo "FAIL: replay sig_$1: exit $code, want 1 with a defect signature at $3"; cat "sig_$1.out"; fail=1
  fi
done

# the reports: the same rows in csv, json and xlsx
"$N" replay gpt_gelu_tanh -o rep --format csv,json,xlsx > rep.out
[ $? -eq 1 ] || { echo "FAIL: replay -o: want exit 1"; fail=1; }
"$PY" - rep <<'PY' || fail=1
import csv, glob, json, re, sys, zipfile
d = sys.argv[1]
rows_csv = list(csv.reader(open(glob.glob(d + "/*.csv")[0])))
js = json.load(open(glob.glob(d + "/*.json")[0]))
if rows_csv[0] != js["headers"]:
    print("FAIL: csv and json headers differ"); sys.exit(1)
if len(rows_csv) - 1 != len(js["rows"]):
    print("FAIL: csv has", len(rows_csv) - 1, "rows, json", len(js["rows"])); sys.exit(1)
bad = [r for r in js["rows"] if r[7] == "exceeds"]
if not bad or not all(r[0].startswith("Functional.gelu.") for r in bad):
    print("FAIL: exceeding rows", [r[0] for r in bad]); sys.exit(1)
if js["summary"]["exceeds"] != len({r[0] for r in bad}):
    print("FAIL: summary exceeds", js["summary"]["exceeds"]); sys.exit(1)
z = zipfile.ZipFile(glob.glob(d + "/*.xlsx")[0])
sheet = z.read("xl/worksheets/sheet2.xml").decode()
n_xlsx = len(re.findall(r"<row[ >]", sheet))  # the data rows are spliced in without r attributes
if n_xlsx != len(js["rows"]) + 1:
    print("FAIL: xlsx rows", n_xlsx, "want", len(js["rows"]) + 1); sys.exit(1)
try:
    import openpyxl
except ImportError:
    openpyxl = None
if openpyxl:  # every cell of the xlsx equals the csv's (numbers to the digits both keep)
    wb = openpyxl.load_workbook(glob.glob(d + "/*.xlsx")[0], read_only=True)
    for i, (xr, cr) in enumerate(zip(wb["rows"].iter_rows(values_only=True), rows_csv)):
        for x, c in zip(xr, cr):
            x = "" if x is None else x
            if isinstance(x, (int, float)):
                if abs(float(c) - x) > 1e-15 * max(1.0, abs(x)):
                    print("FAIL: xlsx row", i, x, "csv", c); sys.exit(1)
            elif str(x) != c:
                print("FAIL: xlsx row", i, repr(x), "csv", repr(c)); sys.exit(1)
    if wb["summary"]["A1"].value != "input":
        print("FAIL: xlsx summary"); sys.exit(1)
print("reports agree:", len(js["rows"]), "rows,", len(bad), "exceeding")
PY

# statistics only: nothing can be recomputed, nothing is guessed
dump gpt_stats statistics -- "${gpt[@]}"
expect gpt_stats 0
grep -q ' 0 pass, 0 exceed, 89 not recomputable' gpt_stats.out || { echo "FAIL: statistics dump"; cat gpt_stats.out; fail=1; }
grep -q 'has no payload' gpt_stats.out || { echo "FAIL: no reason given"; fail=1; }

# bad input
"$N" replay no_such_dir > bad.out 2> bad.err
[ $? -eq 2 ] && grep -q no_such_dir bad.err || { echo "FAIL: a missing dump: want exit 2 naming it"; cat bad.err; fail=1; }
"$N" replay gpt_cpu --format pdf > bad.out 2> bad.err
[ $? -eq 2 ] && grep -q -- '--format' bad.err || { echo "FAIL: --format pdf: want exit 2"; fail=1; }

# a PyTorch reference run (fp32) flags nothing either
if "$PY" -c 'import importlib.util as u, sys; sys.exit(not all(map(u.find_spec, ("torch", "h5py"))))' 2>/dev/null; then
  small=(--model gpt --layers 2 --heads 2 --width 32 --context 16 --batch 4 --seed 11 --threads 1)
  "$N" train "${small[@]}" --steps 0 --save init.h5 >/dev/null
  dump small tensor -- "${small[@]}" --steps 1
  "$SRC/tests/python/pyrun.sh" "$SRC/samples/torch/gpt_reference.py" --ckpt init.h5 --batch-from small/step0/rank0/dump.h5 \
    --out torch_fp32 > /dev/null || { echo "FAIL: gpt_reference.py"; fail=1; }
  expect torch_fp32 0
else
  echo "(python3-torch or h5py missing: the PyTorch case is skipped)"
fi
[ $fail -eq 0 ] && echo "e2e_replay: all passed" || echo "e2e_replay: FAILED"
exit $fail
