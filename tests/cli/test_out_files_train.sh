#!/usr/bin/env bash
# test_out_files_train.sh - `nprobe train` under a file size limit (ulimit
# -f): --save and --config-check-out fail with exit 2 and one message naming
# the file and why, no process is killed by SIGXFSZ (nor crashes in HDF5
# afterwards), nothing partial and no temporary stays in the folder, and a
# checkpoint saved before under the same name is kept intact and loadable.
set -u
nprobe=${NPROBE_BIN:?NPROBE_BIN not set}
tmp=$(mktemp -d)
trap 'rm -rf "$tmp"' EXIT
cd "$tmp"
fail=0
bad() { echo "FAIL: $*"; fail=1; }
train=(train --model gpt --layers 1 --width 32 --context 16 --batch 2 --threads 1)

limited() { # name blocks args...: run nprobe under ulimit -f blocks in folder name
  local name=$1 blocks=$2
  shift 2
  mkdir -p "$name"
  ( cd "$name" && ulimit -f "$blocks" && exec "$nprobe" "$@" ) >"$name.out" 2>"$name.err"
}
one_error() { # name file rc
  [ "$3" -eq 2 ] || bad "$1: exit $3 (expected 2)"
  local n; n=$(grep -c '^nprobe: ' "$1.err")
  [ "$n" -eq 1 ] || bad "$1: $n messages (expected 1)"
  grep -q "$2.*File too large" "$1.err" || bad "$1: the message does not name $2 and why"
  if [ $fail -ne 0 ]; then cat "$1.out" "$1.err"; fi
}

limited save 20 "${train[@]}" --steps 1 --save ck.h5
one_error save ck.h5 $?
[ -z "$(ls -A save)" ] || bad "save: files left: $(ls -A save)"

limited pack 2 "${train[@]}" --steps 1 --config-check-out p.zip
one_error pack p.zip $?
[ -z "$(ls -A pack)" ] || bad "pack: files left: $(ls -A pack)"

# a checkpoint already there is not lost to a failed save over it
mkdir keep
(cd keep && "$nprobe" "${train[@]}" --steps 2 --stop-after 1 --save ck.h5 >/dev/null 2>&1) || bad "keep: first save"
sum=$(sha256sum keep/ck.h5 | cut -d' ' -f1)
size=$(( $(stat -c %s keep/ck.h5) / 1024 - 2 ))
limited keep "$size" "${train[@]}" --steps 2 --save ck.h5
one_error keep ck.h5 $?
[ "$(sha256sum keep/ck.h5 | cut -d' ' -f1)" = "$sum" ] || bad "keep: the earlier checkpoint changed"
[ "$(ls -A keep)" = "ck.h5" ] || bad "keep: files left: $(ls -A keep)"
(cd keep && "$nprobe" "${train[@]}" --steps 2 --load ck.h5 >/dev/null 2>&1) || bad "keep: the earlier checkpoint does not load"

[ $fail -eq 0 ] && echo "all train output-file checks passed"
exit $fail
