#!/usr/bin/env bash
# scripts/bench/run.sh - every benchmark side by side with its baseline, in
# one run, written into docs/PERFORMANCE.md (medians and ratios, with the
# machine they ran on).
#   scripts/bench/run.sh            full sizes (several minutes)
#   scripts/bench/run.sh --quick    small sizes, to check the scripts work
# Each scripts/bench/bench_*.sh prints a Markdown section (a table with the
# nprobe figure, the baseline figure, the ratio and the target) on stdout.
set -euo pipefail
root=$(cd "$(dirname "$0")/../.." && pwd)
cd "$root"
quick=""
[ "${1:-}" = "--quick" ] && quick="--quick"

scripts/install-deps.sh >/dev/null
bin=$(scripts/build.sh)
export NPROBE_BIN=$bin
export NP_PYTHON=${NP_PYTHON:-$(scripts/setup-venv.sh | tail -n 1)}
out=docs/PERFORMANCE.md
tmp=$(mktemp)
trap 'rm -f "$tmp"' EXIT

{
  echo "# Performance"
  echo
  echo "Produced by \`scripts/bench/run.sh $quick\` in one run on $(date -u +%Y-%m-%d)."
  echo "Machine: $(nproc) cores ($(grep -m1 'model name' /proc/cpuinfo | cut -d: -f2 | sed 's/^ *//'))," \
       "$(free -g | awk '/Mem:/{print $2}') GiB memory, $(uname -sr)."
  echo "Every figure is a median over repeated runs taken side by side with its"
  echo "baseline in the same run; the machine is shared, so read the ratios,"
  echo "not the absolute times. Targets come from DESIGN.md section 8."
  echo
} > "$tmp"

for b in bench_train.sh bench_dump.sh bench_compare.sh bench_files.sh bench_html.sh bench_torch.sh bench_dist.sh bench_msprobe.sh bench_replay.sh bench_o2.sh bench_o2_instr.sh bench_compare_pairs.sh bench_dtensor.sh; do
  if [ -x "scripts/bench/$b" ]; then
    echo "bench: running $b $quick" >&2
    if ! "scripts/bench/$b" $quick >> "$tmp"; then
      echo "bench: $b failed" >&2
      printf '\n**%s failed in this run.**\n\n' "$b" >> "$tmp"
    fi
    echo >> "$tmp"
  else
    printf '\n**%s is missing.**\n\n' "$b" >> "$tmp"
  fi
done
"$NP_PYTHON" scripts/bench/summarize.py "$tmp"
mv "$tmp" "$out"
trap - EXIT
echo "bench: wrote $out" >&2
