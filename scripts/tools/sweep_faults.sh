#!/usr/bin/env bash
# sweep_faults.sh - issue 16's acceptance sweep of the fault catalog: every
# fault of `nprobe train --list-faults` must be the first culprit (the
# faulted API, forward or backward as the catalog says), npu-sim bf16 and
# fp16 against the cpu fp32 reference, default model sizes, tensor task at
# L1 and mix, seeds 1-8 (the conv fault on the cnn); each seed's clean
# pairs (gpt, cnn) must name no culprit. The checks are those of the ctest
# tests/replay/e2e_isolated.sh (seed 3 only), run here over every seed.
#
#   scripts/tools/sweep_faults.sh build/release/nprobe [SEEDS] [RUNS]
#   (defaults: SEEDS "1 2 3 4 5 6 7 8", RUNS "bf16 L1,fp16 L1,bf16 mix,fp16 mix")
# Prints one line per pair and a tally; exit 1 if any pair fails.
set -u
bin=${1:?usage: sweep_faults.sh NPROBE [SEEDS] [RUNS]}
here=$(cd "$(dirname "$0")/../.." && pwd)
NPROBE_BIN=$(cd "$(dirname "$bin")" && pwd)/$(basename "$bin") \
NP_SWEEP_SEEDS=${2:-1 2 3 4 5 6 7 8} \
NP_SWEEP_RUNS=${3:-bf16 L1,fp16 L1,bf16 mix,fp16 mix} \
  exec bash "$here/tests/replay/e2e_isolated.sh"
