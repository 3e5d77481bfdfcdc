#!/usr/bin/env bash
# demo.sh - the precision-debugging story end to end, from a fresh machine:
# install, build, then find which operation of an accelerator run departs
# from the reference run.
#   scripts/demo.sh [--fault NAME] [--out DIR] [--nprobe PATH]
# (--nprobe uses an nprobe already built and skips the install and build)
# A reference run (cpu, fp32) and a device run (npu-sim, bf16, with a fault
# injected) of the runtime's GPT are
#   1. packed with config_check and the packs diffed,
#   2. dumped at mix level with statistics and compared,
#   3. dumped in tensor mode around the suspect operation and compared,
# and the script ends with the culprit and the report paths, the HTML
# report (open it in a browser) last.
set -euo pipefail
root=$(cd "$(dirname "$0")/.." && pwd)
fault=attn_mask_off_by_one
out=$root/demo-out
nprobe=""
while [ $# -gt 0 ]; do
  case $1 in
    --fault) fault=${2:?--fault needs a name (see: nprobe train --list-faults)}; shift 2 ;;
    --out) out=${2:?--out needs a directory}; shift 2 ;;
    --nprobe) nprobe=${2:?--nprobe needs the path of an nprobe binary}; shift 2 ;;
    -h|--help) sed -n '2,13p' "$0" | sed 's/^# \{0,1\}//'; exit 0 ;;
    *) echo "demo.sh: unknown option '$1' (see --help)" >&2; exit 2 ;;
  esac
done

step() { printf '\n\033[1m[%s] %s\033[0m\n' "$1" "$2"; }

if [ -z "$nprobe" ]; then
  step 1/7 "installing dependencies (Debian packages)"
  "$root/scripts/install-deps.sh"
  step 2/7 "building nprobe"
  nprobe=$("$root/scripts/build.sh")
  echo "built $nprobe"
else
  step 1-2/7 "using $nprobe (no install, no build)"
  nprobe=$(cd "$(dirname "$nprobe")" && pwd)/$(basename "$nprobe")
fi
if ! "$nprobe" train --list-faults | grep -w -- "$fault" > /dev/null; then
  echo "demo.sh: unknown fault '$fault'; the catalog:" >&2
  "$nprobe" train --list-faults >&2
  exit 2
fi

rm -rf "$out"
mkdir -p "$out"
cd "$out"
# The same model, seed and data on both sides; the device run differs in
# device, precision and the injected fault.
model=(--model gpt --layers 2 --heads 2 --width 64 --context 32 --batch 8 --seed 7 --threads 2)
bench=(--device cpu --precision fp32)
cmp=(--device npu-sim --precision bf16 --fault "$fault")

step 3/7 "config_check: pack both environments and diff them"
"$nprobe" train "${model[@]}" "${bench[@]}" --steps 1 --config-check-out bench.zip >/dev/null
"$nprobe" train "${model[@]}" "${cmp[@]}" --steps 1 --config-check-out cmp.zip >/dev/null
set +e
"$nprobe" config_check compare bench.zip cmp.zip -o config_check
set -e
echo "(differences in device, precision and fault are expected: they are what we are porting)"

write_config() { # write_config FILE TASK DUMP_PATH [LIST_JSON]
  local list=${4:-[]}
  cat > "$1" <<JSON
{
  "task": "$2",
  "dump_path": "$3",
  "rank": [],
  "step": [0],
  "level": "mix",
  "$2": { "scope": [], "list": $list, "data_mode": ["all"] }
}
JSON
}

step 4/7 "dump both runs: statistics at mix level (modules and APIs), 1 step"
write_config stats_bench.json statistics dump_stats_bench
write_config stats_cmp.json statistics dump_stats_cmp
"$nprobe" dump -c stats_bench.json -- "$nprobe" train "${model[@]}" "${bench[@]}" --steps 1 >/dev/null
"$nprobe" dump -c stats_cmp.json -- "$nprobe" train "${model[@]}" "${cmp[@]}" --steps 1 >/dev/null

step 5/7 "compare the statistics dumps"
set +e
"$nprobe" compare -b dump_stats_bench -c dump_stats_cmp -o compare_statistics | tee compare_statistics.txt
set -e
suspect=$(sed -n 's/^ *first culprit: \([^ ]*\).*/\1/p' compare_statistics.txt | head -n 1)
if [ -z "$suspect" ]; then
  echo "demo.sh: the statistics comparison named no culprit; dumping every tensor instead"
  api_list='[]'
else
  api=$(printf '%s' "$suspect" | sed -E 's/\.[0-9]+\.(forward|backward)$//; s/\.(forward|backward)\.[0-9]+$//')
  echo "suspect: $suspect -> dumping every call of $api in tensor mode"
  api_list="[\"$api\"]"
fi

step 6/7 "dump both runs again in tensor mode, around the suspect"
write_config tensor_bench.json tensor dump_tensor_bench "$api_list"
write_config tensor_cmp.json tensor dump_tensor_cmp "$api_list"
"$nprobe" dump -c tensor_bench.json -- "$nprobe" train "${model[@]}" "${bench[@]}" --steps 1 >/dev/null
"$nprobe" dump -c tensor_cmp.json -- "$nprobe" train "${model[@]}" "${cmp[@]}" --steps 1 >/dev/null

step 7/7 "compare the tensors"
set +e
"$nprobe" compare -b dump_tensor_bench -c dump_tensor_cmp -o compare_tensor --format xlsx,csv,json,html | tee compare_tensor.txt
set -e

culprit=$(sed -n 's/^ *first culprit: \(.*\)$/\1/p' compare_tensor.txt | head -n 1)
printf '\n\033[1mResult\033[0m\n'
echo "  fault injected on the device run: $fault"
if [ -n "$culprit" ]; then
  echo "  culprit named by nprobe compare:  $culprit"
else
  echo "  nprobe compare named no culprit (the fault is below this precision's noise; try --fault attn_scale)"
fi
echo "  config_check report: $out/config_check/result.xlsx"
for f in compare_statistics/*.xlsx compare_tensor/*.xlsx; do
  [ -e "$f" ] && echo "  compare report:      $out/$f"
done
# the pages to open in a browser (self-contained, no network): the whole
# model's tree from the statistics compare, then the tensor compare's
for f in compare_statistics/*.html compare_tensor/*.html; do
  [ -e "$f" ] && echo "  html report:         $out/$f"
done
