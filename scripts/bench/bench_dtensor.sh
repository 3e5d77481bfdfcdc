#!/usr/bin/env bash
# bench_dtensor.sh - the PyTorch package's dump cost on DTensor-parallel
# training (issue 26): scripts/bench/torch_dtensor_overhead.py, tensor
# parallel on 2 gloo ranks and FSDP2 x TP on 4, statistics L1 against the
# same run without the debugger, interleaved. Prints a Markdown section.
#   bench_dtensor.sh [--quick]
set -euo pipefail
root=$(cd "$(dirname "$0")/../.." && pwd)
py=${NP_PYTHON:-$root/.venv/bin/python}
bin=${NPROBE_BIN:-$root/build/release/nprobe}
echo "## PyTorch package on DTensor parallel runs (bench_dtensor.sh)"
echo
"$py" -c 'import torch.distributed.fsdp' 2>/dev/null || { echo "PyTorch with torch.distributed is not installed: not measured."; exit 0; }
export PYTHONPATH="$root/python" NPROBE_LIB="$(dirname "$bin")/lib/libnprobe.so"
args=(--rounds 3 --steps 4 --warmup 1)
[ "${1:-}" = "--quick" ] && args=(--rounds 1 --steps 2 --warmup 1)
echo "\`scripts/bench/torch_dtensor_overhead.py\`: pre-norm MLP blocks, ColwiseParallel"
echo "up and RowwiseParallel down (tp), then fully_shard on dp (fsdp_tp), SGD, one"
echo "thread per rank, the ranks forked per mode, the modes interleaved round by"
echo "round; rank 0's median step time (ranks in step by a barrier) and CPU time,"
echo "the ratio the median of the rounds'. Load: \`$(uptime | sed 's/.*load/load/')\`."
echo
"$py" "$root/scripts/bench/torch_dtensor_overhead.py" --layout tp "${args[@]}" 2>/dev/null
echo
"$py" "$root/scripts/bench/torch_dtensor_overhead.py" --layout fsdp_tp "${args[@]}" 2>/dev/null | tail -n 1
