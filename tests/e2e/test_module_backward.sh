#!/usr/bin/env bash
# test_module_backward.sh - a module call's backward output is the gradient
# for the module's own input only: every Module.*.backward.0.output.0 of the
# runtime's GPT dump against PyTorch's full backward hooks on the same
# modules (module_backward_ref.py). The Block's input x is also its ln_1's
# input and receives the residual add's gradient too; ln_1's backward must
# not include it. Skips (77) without python3-torch or python3-h5py.
set -u
N=${NPROBE_BIN:?}
SRC=${NP_SOURCE_DIR:?}
tmp=$(mktemp -d)
trap 'rm -rf "$tmp"' EXIT
cd "$tmp"
model=(--model gpt --layers 2 --heads 2 --width 32 --context 16 --batch 4 --seed 3 --threads 1)
"$N" train "${model[@]}" --steps 0 --save init.h5 >/dev/null || { echo "train --save failed"; exit 1; }
printf '{"task":"tensor","dump_path":"dump_rt","step":[0],"level":"mix"}' > rt.json
"$N" dump -c rt.json -- "$N" train "${model[@]}" --steps 1 >/dev/null 2>&1 || { echo "runtime dump failed"; exit 1; }
"$SRC/tests/python/pyrun.sh" "$SRC/tests/e2e/module_backward_ref.py" dump_rt/step0/rank0/dump.h5 init.h5
