#!/usr/bin/env bash
# bench_torch.sh - the PyTorch package's dump overhead (DESIGN.md section 8):
# scripts/bench/torch_dump_overhead.py on the GPT 4x256 (context 128, batch
# 8) and on a tiny 2x32 GPT, one thread, the same script without the
# debugger as the baseline, processes interleaved; then issue 23's HF Llama
# 4x256 beside msprobe 26's own PrecisionDebugger (where transformers and
# mindstudio-probe are installed). Prints two Markdown sections.
#   bench_torch.sh [--quick]
set -euo pipefail
root=$(cd "$(dirname "$0")/../.." && pwd)
py=${NP_PYTHON:-$(dirname "$0")/../../.venv/bin/python}
bin=${NPROBE_BIN:-$root/build/release/nprobe}
"$py" -c 'import torch' 2>/dev/null || { printf '## PyTorch package dump overhead (bench_torch.sh)\n\nPyTorch is not installed: not measured.\n'; exit 0; }
export PYTHONPATH="$root/python" NPROBE_LIB="$(dirname "$bin")/lib/libnprobe.so"
big=(--rounds 3 --steps 3 --warmup 1 --tensor)
tiny=(--rounds 5 --steps 30 --warmup 3)
llama=(--rounds 5 --steps 5 --warmup 2 --msprobe --tensor)
if [ "${1:-}" = "--quick" ]; then
  big=(--rounds 1 --steps 2 --warmup 1 --tensor); tiny=(--rounds 1 --steps 5 --warmup 1)
  llama=(--rounds 1 --steps 2 --warmup 1 --msprobe --tensor)
fi
echo "## PyTorch package dump overhead (bench_torch.sh)"
echo
echo "\`scripts/bench/bench_torch.sh\`: \`scripts/bench/torch_dump_overhead.py\`, the GPT of"
echo "torch_gpt.py (AdamW, clipping) trained one thread with and without"
echo "\`nprobe.torch.PrecisionDebugger\` (every step dumped at L1, every API call), each"
echo "variant a process of its own, the variants interleaved round by round; the"
echo "median over rounds of each round's median step time, wall clock and the"
echo "process's CPU time, the ratio the median of the rounds' ratios. The tensor"
echo "task (async writes) against a plain sequential write of the same bytes per"
echo "step left as the dump leaves its steps (4 MiB os.write blocks into a new file"
echo "per step in the same folder, kept, fsync'ed before the step ends: the dump's"
echo "payloads go to the disk with O_DIRECT): write speed = bytes / (tensor step -"
echo "plain step). For information, the same against a write into the page cache"
echo "whose file is removed at once (a memory copy) and against an O_DIRECT write"
echo "(the disk itself). Load: \`$(uptime | sed 's/.*load/load/')\`."
echo "msprobe's figures (issue 15, measured on another"
echo "occasion with the same models): x2.75 / x4.25 on the GPT 4x256, x57 / x117 on"
echo "the tiny model (statistics / md5)."
echo
echo "| work | nprobe | baseline | ratio | target | met? |"
echo "|---|---|---|---|---|---|"
"$py" "$root/scripts/bench/torch_dump_overhead.py" --model big "${big[@]}" --markdown
"$py" "$root/scripts/bench/torch_dump_overhead.py" --model tiny "${tiny[@]}" --markdown
echo
echo "## PyTorch package on HF Llama, beside msprobe 26 (torch_dump_overhead.py --model llama)"
echo
if ! "$py" -c 'import transformers, msprobe' >/dev/null 2>&1; then
  echo "transformers or mindstudio-probe (msprobe) is not installed: not measured."
  exit 0
fi
echo "Issue 23's benchmark: \`scripts/bench/torch_dump_overhead.py --model llama ${llama[*]} --markdown\`."
echo "transformers' \`LlamaForCausalLM\` built from its config (random weights, no"
echo "hub): 4 layers x 256 (MLP 688, 4 heads), sequence 128, batch 8, vocabulary"
echo "512; AdamW (torch's per-parameter loop on CPU: its in-place ops are"
echo "captured, as msprobe captures them), \`clip_grad_norm_\`, one thread, every"
echo "step dumped at L1. msprobe 26's own \`PrecisionDebugger\` runs the same"
echo "script and config (statistics; md5 as its \`summary_mode\`) as more"
echo "variants of the same interleaved rounds; each variant a process of its"
echo "own, medians over rounds, the ratios the median of the rounds' ratios;"
echo "\"cpu\" is the process's CPU time, the figure to read on a shared machine."
echo "Load at the start: \`$(uptime | sed 's/.*load/load/')\`."
echo
echo "| work | nprobe | baseline | ratio | target | met? |"
echo "|---|---|---|---|---|---|"
"$py" "$root/scripts/bench/torch_dump_overhead.py" --model llama "${llama[@]}" --markdown
echo
echo "Load at the end: \`$(uptime | sed 's/.*load/load/')\`."
