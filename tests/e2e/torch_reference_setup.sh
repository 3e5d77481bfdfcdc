# torch_reference_setup.sh - sourced by the tests that compare a PyTorch
# reference with the runtime (e2e/test_torch_reference.sh,
# msprobe/test_msprobe_vs_runtime.sh). In a fresh temporary folder (removed
# at exit, the current directory from then on) it writes
#   init.h5     the runtime GPT's initial weights (nprobe train --save)
#   dump_rt/    the cpu fp32 runtime's tensor dump of step 0 (level mix)
#   dump_fault/ the same run on npu-sim with the attn_scale fault
#   dump_torch/ samples/torch/gpt_reference.py on init.h5 and dump_rt's batch,
#               dumped through the nprobe package (ref.txt: what it printed)
# and sets N, PY, SRC, fail=0. Exits 77 where python3-torch or python3-h5py
# is missing, 1 when a run fails.
N=${NPROBE_BIN:?}
PY=${NP_PYTHON:-/usr/bin/python3}
SRC=${NP_SOURCE_DIR:?}
"$PY" -c 'import importlib.util as u, sys; sys.exit(not all(map(u.find_spec, ("torch", "h5py"))))' 2>/dev/null || { echo "SKIP: torch or h5py missing"; exit 77; }
tmp=$(mktemp -d)
trap 'rm -rf "$tmp"' EXIT
cd "$tmp" || exit 1
fail=0
model=(--model gpt --layers 2 --heads 2 --width 32 --context 16 --batch 4 --seed 11 --threads 1)
"$N" train "${model[@]}" --steps 0 --save init.h5 >/dev/null || { echo "train --save failed"; exit 1; }
printf '{"task":"tensor","dump_path":"dump_rt","step":[0],"level":"mix"}' > rt.json
printf '{"task":"tensor","dump_path":"dump_fault","step":[0],"level":"mix"}' > fault.json
"$N" dump -c rt.json -- "$N" train "${model[@]}" --steps 1 >/dev/null 2>&1 || { echo "runtime dump failed"; exit 1; }
"$N" dump -c fault.json -- "$N" train "${model[@]}" --steps 1 --device npu-sim --fault attn_scale >/dev/null 2>&1 \
  || { echo "faulted dump failed"; exit 1; }
"$SRC/tests/python/pyrun.sh" "$SRC/samples/torch/gpt_reference.py" --ckpt init.h5 --batch-from dump_rt/step0/rank0/dump.h5 \
  --out dump_torch > ref.txt || { echo "gpt_reference.py failed"; cat ref.txt; exit 1; }
