#!/usr/bin/env bash
# html_cli.sh - nprobe compare over many steps as a user runs it: a tiny GPT
# trained 12 steps on each side (cpu fp32 against npu-sim fp32 with a fault
# from step 0), dumped with statistics at level mix every step, compared
# with the default formats plus json. stdout is the short summary (one
# line per failing pair, the first 8, then a count; the overall first
# culprit; the xlsx reports as a count; the HTML path); the HTML page opens
# in headless Chromium (check_html.py) with the culprit the json report
# names, on an open path, and as many call nodes as the cmp dump's /calls
# of that step holds (read with h5py); a screenshot is not blank.
set -u
nprobe=${NPROBE_BIN:?NPROBE_BIN not set}
py=${NP_PYTHON:-/usr/bin/python3}
src=${NP_SOURCE_DIR:?NP_SOURCE_DIR not set}
command -v chromium >/dev/null || { echo "SKIP: chromium is not installed"; exit 77; }
tmp=$(mktemp -d)
trap 'rm -rf "$tmp"' EXIT
cd "$tmp"
fail=0
check() { if ! grep -qF -- "$2" "$1"; then echo "FAIL: $1 lacks: $2"; cat "$1"; fail=1; fi; }
steps=12
for side in b c; do
  printf '{"task": "statistics", "dump_path": "%s", "level": "mix", "step": [%s]}\n' \
    "$tmp/$side" "$(seq -s, 0 $((steps - 1)))" > $side.json
done
model=(--model gpt --layers 1 --width 32 --context 16 --batch 2 --steps $steps --threads 1 --seed 3)
"$nprobe" train "${model[@]}" --device cpu --dump-config b.json > /dev/null 2>&1 || { echo "FAIL: train b"; exit 1; }
"$nprobe" train "${model[@]}" --device npu-sim --fault attn_scale --dump-config c.json > /dev/null 2>&1 \
  || { echo "FAIL: train c"; exit 1; }

"$nprobe" compare -b b -c c -o out --format xlsx,json,html > out.txt 2> err.txt; rc=$?
[ $rc = 1 ] || { echo "FAIL: compare exit $rc, expected 1"; cat err.txt; fail=1; }
cat out.txt
check out.txt "compared $steps step/rank pairs over $steps steps (statistics mode)"
check out.txt "$steps of $steps pairs fail:"
check out.txt "  ... and $((steps - 8)) more failing pairs"
check out.txt "first culprit: Functional.scaled_dot_product_attention.0.forward"
check out.txt "  in step 0 rank 0"
check out.txt "  reports: $steps xlsx files in out (one per step and rank"
check out.txt "  reports: $steps json files in out"
n=$(wc -l < out.txt)
[ "$n" -le 20 ] || { echo "FAIL: the summary of $steps steps is $n lines, want at most 20"; fail=1; }
[ "$(grep -c '^  step [0-9]* rank 0: ' out.txt)" = 8 ] || { echo "FAIL: not 8 failing-pair lines"; fail=1; }
html=$(sed -n 's/^  report: \(.*\.html\)$/\1/p' out.txt)
[ -f "$html" ] || { echo "FAIL: no HTML report path printed"; exit 1; }
case $html in out/compare_report_[0-9]*.html) ;; *) echo "FAIL: HTML name $html"; fail=1;; esac

# the culprit from the json report of the first step, the calls from the dump
read -r culprit step < <("$py" - out/compare_result_rank0_step0_*.json <<'PY'
import json, sys
j = json.load(open(sys.argv[1]))
print(j["first_culprit"]["call"], j["inputs"]["step"])
PY
)
calls=$("$py" -c 'import h5py, sys; print(len(h5py.File(sys.argv[1], "r")["calls"]))' "c/step$step/rank0/dump.h5")
echo "json culprit $culprit in step $step; the cmp dump holds $calls calls"
"$py" "$src/tests/compare/check_html.py" "$html" --culprit "$culprit" --calls "$calls" --step "$step" --shot \
  || fail=1

# every pair but the detailed one is shrunk as soon as its reports are
# written: the failing lines of later pairs still name their culprit, the
# one their json report (written from the whole pair) names
culprit_of() { "$py" -c 'import json, sys; print(json.load(open(sys.argv[1]))["first_culprit"]["call"])' "$@"; }
c5=$(culprit_of out/compare_result_rank0_step5_*.json)
c1=$(culprit_of out/compare_result_rank0_step1_*.json)
grep -qF "  step 5 rank 0: " out.txt && grep "^  step 5 rank 0: " out.txt | grep -qF "; culprit $c5" \
  || { echo "FAIL: the line of step 5 does not name its culprit $c5"; fail=1; }
# step 0 made equal on both sides: the first failing pair (step 1) is the one
# detailed, after step 0 was shrunk
cp b/step0/rank0/dump.h5 c/step0/rank0/dump.h5
"$nprobe" compare -b b -c c -o later --format csv,html > later.txt 2> later.err; rc=$?
[ $rc = 1 ] || { echo "FAIL: compare with step 0 equal: exit $rc"; cat later.err; fail=1; }
check later.txt "$((steps - 1)) of $steps pairs fail:"
check later.txt "first culprit: $c1 "
check later.txt "  in step 1 rank 0"
check later.txt "  reports: $steps csv files in later"
grep -q "step 1, rank 0" later/compare_report_*.html || { echo "FAIL: the page does not detail step 1"; fail=1; }
grep -qF "First culprit: <code>$c1" later/compare_report_*.html \
  || { echo "FAIL: the page does not name the culprit of step 1, $c1"; fail=1; }

# one step alone: the block of one pair, as before (and the page too)
"$nprobe" compare -b b -c c --step 3 -o one > one.txt; rc=$?
[ $rc = 1 ] || { echo "FAIL: --step 3 exit $rc"; fail=1; }
check one.txt "step 3 rank 0 (statistics mode): "
check one.txt "  report: one/compare_result_rank0_step3_"
[ "$(ls one/*.html | wc -l)" = 1 ] || { echo "FAIL: no HTML page for one step"; fail=1; }
[ $fail = 0 ] && echo ok
exit $fail
