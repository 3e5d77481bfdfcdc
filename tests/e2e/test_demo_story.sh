#!/usr/bin/env bash
# test_demo_story.sh - scripts/demo.sh as a newcomer runs it (minus install
# and build): it must end with the injected fault's operation named as the
# culprit and print report paths that exist and open as xlsx (zip) files,
# and end with the HTML reports' paths.
set -u
N=${NPROBE_BIN:?}
SRC=${NP_SOURCE_DIR:?}
tmp=$(mktemp -d)
trap 'rm -rf "$tmp"' EXIT
fail=0
out=$tmp/demo
if ! "$SRC/scripts/demo.sh" --nprobe "$N" --out "$out" > "$tmp/log" 2>&1; then
  echo "FAIL: demo.sh exited non-zero"; cat "$tmp/log"; echo "0 passed, 1 failed"; exit 1
fi
tail -8 "$tmp/log"
grep -q "culprit named by nprobe compare:  Functional.scaled_dot_product_attention.0.forward" "$tmp/log" \
  || { echo "FAIL: the demo did not name the attention call as the culprit"; fail=1; }
n=0
for f in $(sed -n 's/^ *\(config_check\|compare\) report: *//p' "$tmp/log"); do
  n=$((n + 1))
  if ! unzip -tq "$f" >/dev/null 2>&1; then echo "FAIL: $f is not a readable xlsx"; fail=1; fi
done
[ $n -eq 3 ] || { echo "FAIL: $n report paths printed, want 3"; fail=1; }
# it ends with the HTML reports (statistics, then tensor): pages that exist
last=$(tail -1 "$tmp/log" | sed -n 's/^ *html report: *//p')
[ -n "$last" ] && grep -q "</html>" "$last" || { echo "FAIL: the demo does not end with an HTML report path"; fail=1; }
h=$(sed -n 's/^ *html report: *//p' "$tmp/log" | wc -l)
[ "$h" -eq 2 ] || { echo "FAIL: $h html report paths printed, want 2"; fail=1; }
# idempotent: a second run over the same folder works too. Sanitized (CI
# time): left out; demo.sh starts with rm -rf of its folder, so the rerun
# runs the first run's C paths again (the plain pass checks the rerun).
if [ "${NP_SANITIZED:-0}" != 1 ]; then
  "$SRC/scripts/demo.sh" --nprobe "$N" --out "$out" > "$tmp/log2" 2>&1 || { echo "FAIL: second demo run failed"; fail=1; }
fi
# an unknown fault is refused with the catalog
"$SRC/scripts/demo.sh" --nprobe "$N" --out "$out" --fault no_such_fault > "$tmp/log3" 2>&1
[ $? -eq 2 ] && grep -q "unknown fault 'no_such_fault'" "$tmp/log3" || { echo "FAIL: unknown fault not refused"; fail=1; }
[ $fail -eq 0 ] && echo "1 passed, 0 failed" || echo "0 passed, 1 failed"
exit $fail
