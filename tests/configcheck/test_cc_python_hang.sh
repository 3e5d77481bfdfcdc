#!/usr/bin/env bash
# test_cc_python_hang.sh - `config_check pack --python` with an interpreter
# that hangs: bounded by --python-timeout (one limit for pip and the
# importlib fallback together), the interpreter and what it started are
# killed, the pack is written without pip.txt and its manifest says why.
# Two hangs: one that keeps stdout open (and started a child that keeps it
# open too), one that closes stdout and goes on running.
set -u
nprobe=$NPROBE_BIN
py=${NP_PYTHON:-python3}
tmp=$(mktemp -d)
cleanup() {
  for f in "$tmp"/pids_*; do
    [ -f "$f" ] && while read -r p; do kill -KILL "$p" 2>/dev/null; done <"$f"
  done
  rm -rf "$tmp"
}
trap cleanup EXIT
cd "$tmp"
fail=0
bad() { echo "FAIL: $*"; fail=1; }

cat > hang_open <<SH
#!/bin/sh
echo \$\$ >> $tmp/pids_open
sleep 300 &
echo \$! >> $tmp/pids_open
sleep 300
SH
cat > hang_closed <<SH
#!/bin/sh
echo \$\$ >> $tmp/pids_closed
exec >&-
sleep 300
SH
chmod +x hang_open hang_closed

for kind in open closed; do
  # `timeout` only guards the test itself against a hang of today's code
  timeout 60 "$nprobe" config_check pack -o p_$kind.zip --python "$tmp/hang_$kind" \
    --python-timeout 2 >out_$kind.txt 2>err_$kind.txt
  rc=$?
  [ $rc -ne 124 ] || { bad "$kind: config_check pack still runs after 60 s"; continue; }
  [ $rc -eq 0 ] || { bad "$kind: exit $rc"; cat err_$kind.txt; continue; }
  sleep 0.2
  while read -r p; do
    # alive = exists and is not a zombie waiting for a parent to reap it
    state=$(awk '{print $3}' "/proc/$p/stat" 2>/dev/null)
    if [ -n "$state" ] && [ "$state" != Z ]; then bad "$kind: process $p of the hanging python still runs"; fi
  done <pids_$kind
  "$py" - p_$kind.zip <<'PY' || bad "$kind: the pack does not say pip.txt could not be collected"
import json, sys, zipfile
z = zipfile.ZipFile(sys.argv[1])
assert "pip.txt" not in z.namelist(), z.namelist()
why = json.loads(z.read("manifest.json"))["collected"]["pip"]
assert "not collected" in why and "did not finish within 2 s" in why, why
PY
done
[ $fail -eq 0 ] && echo "a hanging python is bounded and reported"
exit $fail
