#!/usr/bin/env bash
# test_moe_promote.sh - issue 28: `nprobe promote` through the PyTorch
# package on an HF model. A tiny HF Mixtral (moe_router.py: layer 0's
# router with a large shared component, so that its GEMM in bf16 changes
# the experts tokens go to) trained 3 steps under CPU bf16 autocast against
# the fp32 run, step 0's tensors dumped (level mix), the loss trajectory of
# the 3 steps judged too (--bench-log):
#  - the unpromoted run fails (first culprit in model.layers.0.mlp.gate);
#  - promote --granularity module names exactly model.layers.0.mlp.gate (the
#    router module, whose one GEMM is the router's) within ceil(log2 N) + 2
#    reruns, and the promoted run is clean: compare exit 0 and its loss
#    within 3 sigma of the reference's.
# Plain pass only (Python runs: 4 processes importing torch and
# transformers).
set -u
SRC=${NP_SOURCE_DIR:?}
N=${NPROBE_BIN:?}
[ "${NP_SANITIZED:-0}" = 1 ] && { echo "SKIP: sanitized pass (torch model runs)"; exit 77; }
"${NP_PYTHON:-/usr/bin/python3}" -c 'import importlib.util as u, sys; sys.exit(not all(map(u.find_spec, ("torch", "h5py", "transformers"))))' 2>/dev/null \
  || { echo "SKIP: torch, h5py or transformers missing"; exit 77; }
tmp=$(mktemp -d)
trap 'rm -rf "$tmp"' EXIT
cd "$tmp"
run=("$SRC/tests/python/pyrun.sh" "$SRC/tests/python/moe_router.py")
cfg() { printf '{"task":"tensor","dump_path":"%s","step":[0],"level":"mix"}' "$1" > "$1.json"; }
cfg ref
cfg run
"$N" dump -c ref.json -- "${run[@]}" fp32 3 > ref.log 2>&1 || { echo "FAIL: the fp32 reference"; cat ref.log; exit 1; }
"$N" promote -b ref -c run.json -o P --granularity module --candidates 2 --bench-log ref.log -- "${run[@]}" bf16 3 \
  > promote.out 2>&1
code=$?
cat promote.out
fail=0
grep -q '^run 0: .*-> fails' promote.out || { echo "FAIL: the unpromoted bf16 run does not fail"; fail=1; }
grep -q '^candidates (2, ranked by the compare of run 0): model.layers.0.mlp.gate ' promote.out \
  || { echo "FAIL: the router module is not the first candidate"; fail=1; }
[ $code -eq 0 ] && grep -qx 'promote: model.layers.0.mlp.gate' promote.out \
  || { echo "FAIL: promote exit $code, want 'promote: model.layers.0.mlp.gate'"; fail=1; }
reruns=$(sed -n 's/^reruns: \([0-9]*\) .*= \([0-9]*\)).*/\1/p' promote.out)
bound=$(sed -n 's/^reruns: \([0-9]*\) .*= \([0-9]*\)).*/\2/p' promote.out)
[ -n "$reruns" ] && [ "$reruns" -le "$bound" ] || { echo "FAIL: $reruns reruns, bound $bound"; fail=1; }
# the promoted run: its compare clean and its loss within the noise
last=$(grep '^run [0-9]*: .*promote {model.layers.0.mlp.gate} -> clean' promote.out | tail -n1 | sed 's/^run \([0-9]*\):.*/\1/')
if [ -z "$last" ]; then
  echo "FAIL: no clean run of exactly {model.layers.0.mlp.gate}"; fail=1
else
  "$N" compare -b ref -c "P/run$last" -o clast > clast.txt 2>&1 || { echo "FAIL: P/run$last does not compare clean"; cat clast.txt; fail=1; }
  grep -q '^run '"$last"': .*loss max |dev| [^ ]* <= 3 sigma' promote.out || { echo "FAIL: run $last's loss not within the noise"; fail=1; }
fi
[ $fail = 0 ] && echo "ok: promote: model.layers.0.mlp.gate in $reruns reruns (bound $bound), run $last clean"
exit $fail
