#!/usr/bin/env bash
# test_hf_bugs.sh - issue 31: porting bugs injected into HF transformers
# models (scripts/tools/hf_bug_sweep.py) are named in the module they were put
# in, under the three-way verdicts and data-following tolerances: a subset of
# the sweep, the bugged run under CPU bf16 autocast against the clean fp32
# run, tensor task at level mix (replay on), 2 steps, seed 0: Llama's rotary
# base changed (named in model.rotary_emb) and layer 1's attention scaled by
# 1/head_dim (model.layers.1.self_attn); Mixtral's layer-1 router softmax in
# bfloat16 (model.layers.1.mlp.gate: a gap beside the culprit's module).
# Skipped in the sanitized pass (torch runs, no C path the plain pass misses).
set -u
SRC=${NP_SOURCE_DIR:?}
[ "${NP_SANITIZED:-0}" = 1 ] && { echo "SKIP: sanitized pass (torch model runs)"; exit 77; }
"${NP_PYTHON:-/usr/bin/python3}" -c 'import importlib.util as u, sys; sys.exit(not all(map(u.find_spec, ("torch", "h5py", "transformers"))))' 2>/dev/null \
  || { echo "SKIP: torch, h5py or transformers missing"; exit 77; }
exec "$SRC/tests/python/pyrun.sh" "$SRC/scripts/tools/hf_bug_sweep.py" "${NPROBE_BIN:?}" \
  --bugs rope_base,attn_scale,router_dtype --archs llama,mixtral --dtypes bf16 --modes tensor --no-clean
