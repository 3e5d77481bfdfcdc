#!/usr/bin/env bash
# scripts/bench/bench_html.sh [--quick] - the HTML report of nprobe compare
# (docs/COMPARE.md, Reports) in a real browser: Debian's chromium, headless,
# no driver. Two pages:
#   the GPT (the runtime's default size) trained 100 steps on each side (cpu
#   fp32 against npu-sim bf16 with a fault), dumped with statistics at level
#   mix every step, compared: one page for the 100 steps;
#   141k statistics rows per side in one step (gen_compare_dumps.py, the
#   compare benchmark's dumps).
# For each: the page's size, and the time from navigation start to
# DOMContentLoaded with the first layout forced (a probe script appended
# to a copy of the page writes performance.now() into the DOM, read back
# with --dump-dom), median of REPS, side by side (interleaved) with a
# trivial page opened the same way; and the cost of writing the page:
# compare with --format xlsx,html against --format xlsx.
# --quick: 5 steps, 20k rows, 1 repetition. Prints a Markdown section.
# Env: NPROBE_BIN (default build/release/nprobe), NP_PYTHON.
set -euo pipefail
root=$(cd "$(dirname "$0")/../.." && pwd)
bin=${NPROBE_BIN:-$root/build/release/nprobe}
py=${NP_PYTHON:-$(dirname "$0")/../../.venv/bin/python}
STEPS=100 SROWS=141000 REPS=5
for a in "$@"; do
  case $a in
    --quick) STEPS=5 SROWS=20000 REPS=1;;
    *) echo "bench_html: unknown option $a" >&2; exit 2;;
  esac
done
[ -x "$bin" ] || { echo "bench_html: $bin is not built (set NPROBE_BIN)" >&2; exit 2; }
chrome=$(command -v chromium || true)
[ -n "$chrome" ] || { echo "bench_html: chromium is not installed (scripts/install-deps.sh)" >&2; exit 2; }
work=$(mktemp -d "${TMPDIR:-/tmp}/np_bench_html.XXXXXX")
trap 'rm -rf "$work"' EXIT
median() { sort -g | awk '{ v[NR] = $1 } END { m = (NR % 2) ? v[(NR + 1) / 2] : (v[NR / 2] + v[NR / 2 + 1]) / 2; print m }'; }

# open PAGE -> ms from navigation start to DOMContentLoaded + first layout
open_ms() {
  cp "$1" "$work/probe.html"
  echo "<script>document.addEventListener('DOMContentLoaded',function(){document.body.offsetHeight;document.body.setAttribute('data-dcl',performance.now().toFixed(1))});</script>" >> "$work/probe.html"
  rm -rf "$work/profile"
  "$chrome" --headless --no-sandbox --disable-gpu --disable-quic --no-first-run \
    --disable-background-networking --disable-component-update --disable-sync \
    --user-data-dir="$work/profile" --dump-dom "file://$work/probe.html" 2>/dev/null |
    grep -o 'data-dcl="[0-9.]*"' | head -1 | tr -dc '0-9.'
}

# a page of the same shape with nothing in it: the browser's own floor
printf '<!DOCTYPE html><html><head><meta charset=utf-8><title>t</title></head><body><p>t</p></body></html>\n' > "$work/trivial.html"

page_row() { # label page
  local label=$1 page=$2 t=() b=()
  for _ in $(seq "$REPS"); do
    t+=("$(open_ms "$page")")
    b+=("$(open_ms "$work/trivial.html")")
  done
  local tm bm size
  tm=$(printf '%s\n' "${t[@]}" | median)
  bm=$(printf '%s\n' "${b[@]}" | median)
  size=$(stat -c %s "$page")
  awk -v l="$label" -v t="$tm" -v b="$bm" -v s="$size" 'BEGIN {
    met = (t < 2000 && s < 5 * 1024 * 1024) ? "yes" : "no";
    printf "| %s: DOM ready | %.0f ms, page %.2f MB | trivial page %.0f ms | %.1fx | < 2 s, < 5 MB | %s |\n", l, t, s / 1048576, b, t / b, met }'
}

write_row() { # label bench cmp
  local label=$1 h=() x=()
  for _ in $(seq "$REPS"); do
    rm -rf "$work/o"
    /usr/bin/time -f %e -o "$work/t" "$bin" compare -b "$2" -c "$3" -o "$work/o" -q --format xlsx,html >/dev/null 2>&1 || true
    h+=("$(tail -1 "$work/t")")
    rm -rf "$work/o"
    /usr/bin/time -f %e -o "$work/t" "$bin" compare -b "$2" -c "$3" -o "$work/o" -q --format xlsx >/dev/null 2>&1 || true
    x+=("$(tail -1 "$work/t")")
  done
  local hm xm
  hm=$(printf '%s\n' "${h[@]}" | median)
  xm=$(printf '%s\n' "${x[@]}" | median)
  awk -v l="$label" -v h="$hm" -v x="$xm" 'BEGIN {
    printf "| %s: compare --format xlsx,html | %.2f s | --format xlsx %.2f s | %.2fx | - | - |\n", l, h, x, h / x }'
}

# the GPT, STEPS steps, statistics at level mix every step
steps=$(seq -s, 0 $((STEPS - 1)))
for side in b c; do
  printf '{"task": "statistics", "dump_path": "%s", "level": "mix", "step": [%s]}\n' "$work/gpt_$side" "$steps" > "$work/$side.json"
done
"$bin" train --model gpt --steps "$STEPS" --threads 2 --device cpu --precision fp32 --dump-config "$work/b.json" > /dev/null 2>&1
"$bin" train --model gpt --steps "$STEPS" --threads 2 --device npu-sim --precision bf16 --fault attn_mask_off_by_one --dump-config "$work/c.json" > /dev/null 2>&1
"$bin" compare -b "$work/gpt_b" -c "$work/gpt_c" -o "$work/gpt_out" -q --format html > /dev/null || true
gpt_page=$(ls "$work"/gpt_out/*.html)
gpt_rows=$("$py" -c "import sys,re; print(re.search(r'rows<td><span class=c2>(\d+) error</span> &middot; <span class=c1>(\d+) warning</span> &middot; <span class=c0>(\d+) pass', open(sys.argv[1]).read()).groups())" "$gpt_page" | tr -d "()' " | awk -F, '{ print $1 + $2 + $3 }')

# 141k statistics rows in one step (the compare benchmark's dumps)
"$py" "$root/scripts/bench/gen_compare_dumps.py" "$work/sb" --tensors "$SROWS" --numel 1 --task statistics --seed 1 --noise 0
"$py" "$root/scripts/bench/gen_compare_dumps.py" "$work/sc" --tensors "$SROWS" --numel 1 --task statistics --seed 2 --noise 1e-3
"$bin" compare -b "$work/sb" -c "$work/sc" -o "$work/s_out" -q --format html > /dev/null || true
s_page=$(ls "$work"/s_out/*.html)

echo "## HTML report (nprobe compare --format html, headless chromium)"
echo
echo "Command: \`scripts/bench/bench_html.sh${*:+ $*}\` ($("$chrome" --version 2>/dev/null | head -1));"
echo "medians of $REPS, each page interleaved with a trivial page opened the same way."
echo
echo "| work | nprobe | baseline | ratio | target | met? |"
echo "|---|---|---|---|---|---|"
page_row "GPT, $STEPS steps, statistics, $gpt_rows rows over all steps" "$gpt_page"
page_row "$SROWS statistics rows, 1 step" "$s_page"
write_row "GPT, $STEPS steps" "$work/gpt_b" "$work/gpt_c"
write_row "$SROWS statistics rows" "$work/sb" "$work/sc"
echo
