#!/usr/bin/env bash
# e2e_clean.sh - a small subset of scripts/tools/sweep_clean.sh (issue 16's
# false-culprit sweep) as a ctest: seed 5, the cnn and the GPT at default
# sizes, npu-sim bf16 against cpu fp32, initial and trained (20-step,
# shared checkpoint) weights, tensor task: every pair must name no culprit.
set -u
: "${NPROBE_BIN:?}" "${NP_SOURCE_DIR:?}"
models="cnn gpt"
[ "${NP_SANITIZED:-0}" = 1 ] && models="gpt"
NP_CLEAN_MODELS=$models NP_CLEAN_PRECS=bf16 NP_CLEAN_TASKS=tensor \
  exec bash "$NP_SOURCE_DIR/scripts/tools/sweep_clean.sh" "$NPROBE_BIN" 5 --no-torch
