#!/usr/bin/env bash
# test_input_validation.sh - inputs refused before any work (issue 13): a
# FIFO as a config or hyperparameter file must not block (refused as not a
# regular file); a dangling-symlink dump_path and a dump_path longer than
# PATH_MAX (or with a component longer than NAME_MAX) are refused before
# training starts, naming the key. Each command runs under `timeout` so a
# block fails the test instead of hanging it.
set -u
N=${NPROBE_BIN:?}
tmp=$(mktemp -d)
trap 'rm -rf "$tmp"' EXIT
cd "$tmp"
pass=0 fail=0
# expect NAME WANT_EXIT FRAGMENT -- CMD...: exit code and a stderr fragment
expect() {
  local name=$1 want=$2 frag=$3; shift 4
  timeout 20 "$@" >out.txt 2>err.txt </dev/null
  local rc=$?
  if [ "$rc" = 124 ]; then
    echo "FAIL $name: blocked (no answer in 20 s)"; fail=$((fail + 1)); return
  fi
  if [ "$rc" != "$want" ] || ! grep -qF -- "$frag" err.txt; then
    echo "FAIL $name: exit $rc (want $want), stderr:"; cat err.txt
    echo "  (wanted the fragment: $frag)"; fail=$((fail + 1)); return
  fi
  pass=$((pass + 1))
}
mkfifo fifo
expect dump-config-fifo 2 "fifo: cannot open the config: it is not a regular file" -- \
  "$N" dump -c fifo -- true
expect train-dump-config-fifo 2 "it is not a regular file" -- \
  "$N" train --model mlp --steps 1 --dump-config fifo
expect train-monitor-config-fifo 2 "fifo" -- \
  "$N" train --model mlp --steps 1 --monitor-config fifo
expect pack-hyperparams-fifo 2 "fifo: cannot read the hyperparameters: it is not a regular file" -- \
  "$N" config_check pack -o p.zip --no-python --hyperparams fifo
[ ! -e p.zip ] || { echo "FAIL pack-hyperparams-fifo: p.zip written"; fail=$((fail + 1)); }

ln -s "$tmp/nowhere/at/all" dangling
printf '{"task": "statistics", "dump_path": "./dangling"}\n' > dangling.json
expect dump-path-dangling 2 "is a symbolic link to nothing (dangling)" -- \
  "$N" dump -c dangling.json -- true
printf '{"task": "statistics", "dump_path": "./dangling/below"}\n' > dangling2.json
expect dump-path-below-dangling 2 "is a symbolic link to nothing (dangling)" -- \
  "$N" train --model mlp --steps 1 --dump-config dangling2.json
[ ! -e nowhere ] || { echo "FAIL: the dangling link's target was created"; fail=$((fail + 1)); }

long=$("${NP_PYTHON:-/usr/bin/python3}" -c "print('/'.join(['d' * 200] * 25))")
printf '{"task": "statistics", "dump_path": "./%s"}\n' "$long" > long.json
expect dump-path-too-long 2 "more than the system's limit" -- "$N" dump -c long.json -- true
comp=$("${NP_PYTHON:-/usr/bin/python3}" -c "print('c' * 300)")
printf '{"task": "statistics", "dump_path": "./%s"}\n' "$comp" > comp.json
expect dump-path-long-component 2 "(NAME_MAX)" -- "$N" train --model mlp --steps 1 --dump-config comp.json

expect dump-command-missing 2 "cannot run 'no-such-program-here'" -- \
  "$N" dump -c dangling.json -- no-such-program-here
echo "$pass passed, $fail failed"
[ $fail -eq 0 ]
