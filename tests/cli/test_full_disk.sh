#!/usr/bin/env bash
# test_full_disk.sh - nprobe on a really full file system (issue 13): a
# small tmpfs is mounted for the test (plain mount as root, else in a user
# and mount namespace with unshare -rm; neither: skipped, exit 77, saying
# why) and filled up with a filler file. On it, `nprobe dump` (tensor task),
# `nprobe compare -o` (xlsx, csv, json, html), `nprobe replay -o`,
# `nprobe config_check pack -o` and `compare -o`, `nprobe train --save` and
# `--config-check-out` must each exit 2 (dump: the training command's exit
# 2) with one message naming the file (its final name, never a temporary)
# and "No space left on device", leave nothing partial under a final name
# and no temporary, and leave what was finished before (a dump's earlier
# steps, earlier reports, a pack or checkpoint under the same name) intact
# and readable (h5py, zipfile, json). The monitor (runtime and package) on
# a full disk: the training goes on, one message naming its file, the file
# readable up to its last finished step. The tmpfs is unmounted in a trap.
set -u
nprobe=${NPROBE_BIN:?NPROBE_BIN not set}
py=${NP_PYTHON:-python3}

tmp=$(mktemp -d)
mnt=$tmp/fs
mkdir "$mnt"
if ! why=$(mount -t tmpfs -o size=6m tmpfs "$mnt" 2>&1); then
  rm -rf "$tmp"
  if [ -z "${NP_FULL_DISK_NS:-}" ] && unshare -rm true 2>/dev/null; then
    NP_FULL_DISK_NS=1 exec unshare -rm bash "$0" "$@"
  fi
  echo "SKIP: cannot mount a tmpfs to fill up: mount says '$why'${NP_FULL_DISK_NS:+ (in a user namespace)}, and unshare -rm is not available"
  exit 77
fi
trap 'umount "$mnt" 2>/dev/null || umount -l "$mnt"; rm -rf "$tmp"' EXIT
cd "$tmp"
fail=0
bad() { echo "FAIL: $*"; fail=1; }
train=(train --model gpt --layers 1 --width 32 --context 16 --batch 2 --threads 2)

fill() { # leave about $1 bytes free on the tmpfs
  local avail
  avail=$(df -B1 --output=avail "$mnt" | tail -1)
  [ "$avail" -gt "$1" ] && head -c $((avail - $1)) /dev/zero >"$mnt/filler.$RANDOM" 2>/dev/null
  true
}
unfill() { rm -f "$mnt"/filler.*; }
one_error() { # name path_regex rc [want_rc]: exit 2, one nprobe message naming path and ENOSPC
  local name=$1 path=$2 rc=$3 want=${4:-2} failed=$fail
  fail=0
  [ "$rc" -eq "$want" ] || bad "$name: exit $rc (expected $want)"
  local n
  n=$(grep -c '^nprobe: .*\(No space\|failed\|cannot\)' "$name.err")
  [ "$n" -eq 1 ] || bad "$name: $n error messages (expected 1)"
  grep -q "^nprobe: $path.*No space left on device" "$name.err" ||
    bad "$name: no message naming $path and 'No space left on device'"
  # (libxlsxwriter 1.1.4 prints two [ERROR] lines of its own naming the
  # temporary it was given; nprobe's message names the final file)
  grep -q '^nprobe: .*\(\.tmp\b\|\.part\b\)' "$name.err" && bad "$name: the message names a temporary"
  if [ $fail -ne 0 ]; then cat "$name.out" "$name.err"; fi
  [ $failed -eq 0 ] || fail=1
}
no_temporaries() { # dir
  local left
  left=$(find "$1" -name '.*' -type f | wc -l)
  [ "$left" -eq 0 ] || bad "$1: temporaries left: $(ls -A "$1")"
}
sums() { (cd "$1" && find . -type f ! -name 'filler.*' | sort | xargs -r sha256sum); }
readable() { # files...: every report or pack present is complete
  "$py" - "$@" <<'PY' || bad "a file under a final name is incomplete: $*"
import csv, json, sys, zipfile
for p in sys.argv[1:]:
    if p.endswith(".json"):
        json.load(open(p))
    elif p.endswith((".xlsx", ".zip")):
        with zipfile.ZipFile(p) as z:
            assert z.testzip() is None, p
    elif p.endswith(".csv"):
        rows = list(csv.reader(open(p, newline="")))
        assert len(rows) > 1 and all(len(r) == len(rows[0]) for r in rows), p
    elif p.endswith(".html"):
        assert open(p).read().rstrip().endswith("</html>"), p
    elif p.endswith(".h5"):
        import h5py
        with h5py.File(p, "r") as f:
            assert len(f.keys()) > 0, p
PY
}

# ---- inputs, outside the tmpfs: a 3-step tensor dump (twice), a pack
cat >t.json <<JSON
{"task": "tensor", "dump_path": "d", "level": "L1", "step": [0, 1, 2]}
JSON
"$nprobe" dump -c t.json -- "$nprobe" "${train[@]}" --steps 3 >/dev/null 2>&1 || bad "dump to d"
cp -r d d2
"$nprobe" config_check pack -o pa.zip >/dev/null 2>&1 || bad "pack pa.zip"
step=$(stat -c %s d/step0/rank0/dump.h5)

# ---- nprobe dump: room for step 0 and half of step 1
sed 's#"d"#"fs/dd"#' t.json >tf.json
fill $((step + step / 2))
"$nprobe" dump -c tf.json -- "$nprobe" "${train[@]}" --steps 3 >dump.out 2>dump.err
one_error dump "$mnt/dd/step1/rank0/dump.h5" $?
[ -f fs/dd/step0/rank0/dump.h5 ] || bad "dump: step 0 was not kept"
for s in 1 2; do
  [ ! -e fs/dd/step$s/rank0/dump.h5 ] || bad "dump: step $s has a dump.h5 on a full disk"
done
readable fs/dd/step0/rank0/dump.h5
"$nprobe" compare -b d -c fs/dd --step 0 -o cmp0 --format csv >cmp0.out 2>&1 ||
  { bad "dump: step 0 on the full disk differs from the same step dumped elsewhere"; cat cmp0.out; }
rm -rf fs/dd
unfill

# ---- nprobe compare -o: earlier reports kept; nothing partial
mkdir fs/rep
"$nprobe" compare -b d -c d2 -o fs/rep --format xlsx,csv,json,html --quiet >/dev/null 2>&1 ||
  bad "compare with room"
before=$(sums fs/rep)
for left in 0 60000 150000; do
  fill $left
  "$nprobe" compare -b d -c d2 -o fs/rep --format xlsx,csv,json,html --quiet \
    >"cmp$left.out" 2>"cmp$left.err"
  one_error "cmp$left" "fs/rep/compare_" $?
  unfill
done
after=$(sums fs/rep | grep -F -f <(echo "$before" | awk '{print $2}') || true)
[ "$before" = "$after" ] || bad "compare: the earlier reports changed"
readable fs/rep/*
no_temporaries fs/rep
rm -rf fs/rep

# ---- nprobe replay -o
mkdir fs/rp
for left in 0 30000; do
  fill $left
  "$nprobe" replay d -o fs/rp --format xlsx,csv,json >"rp$left.out" 2>"rp$left.err"
  one_error "rp$left" "fs/rp/replay_result_" $?
  unfill
done
readable fs/rp/*
no_temporaries fs/rp
rm -rf fs/rp

# ---- config_check pack -o over an earlier pack of the same name, and compare -o
cp pa.zip fs/p.zip
mkdir fs/cc
"$nprobe" config_check compare pa.zip pa.zip -o fs/cc --format json >/dev/null 2>&1 ||
  bad "config_check compare with room"
before=$(sums fs)
fill 0
"$nprobe" config_check pack -o fs/p.zip >pack.out 2>pack.err
one_error pack fs/p.zip $?
"$nprobe" config_check pack -o fs/p2.zip >pack2.out 2>pack2.err
one_error pack2 fs/p2.zip $?
for fmt in json xlsx; do
  "$nprobe" config_check compare pa.zip pa.zip -o fs/cc --format $fmt >cc$fmt.out 2>cc$fmt.err
  one_error cc$fmt fs/cc/result.$fmt $?
done
# nprobe train --save over an earlier checkpoint, --config-check-out
unfill
"$nprobe" "${train[@]}" --steps 1 --save fs/ck.h5 >/dev/null 2>&1 || bad "save with room"
before=$(sums fs)
fill 0
"$nprobe" "${train[@]}" --steps 2 --save fs/ck.h5 >save.out 2>save.err
one_error save fs/ck.h5 $?
"$nprobe" "${train[@]}" --steps 1 --config-check-out fs/ccout.zip >ccout.out 2>ccout.err
one_error ccout fs/ccout.zip $?
[ "$before" = "$(sums fs)" ] || bad "config_check/train: what was there changed: $(sums fs)"
unfill
readable fs/p.zip fs/cc/result.json fs/ck.h5
[ ! -e fs/p2.zip ] && [ ! -e fs/cc/result.xlsx ] && [ ! -e fs/ccout.zip ] ||
  bad "a file was left under a final name: $(ls -R fs)"
no_temporaries fs

# the monitor (runtime and package): the training goes on to its last step,
# the monitor stops recording at the first refused write and says so once,
# naming its file; its file stays readable up to its last finished step
printf '{"task": "monitor", "dump_path": "fs/mon", "monitor": {}}\n' > mon.json
fill 262144
"$nprobe" "${train[@]}" --steps 400 --dump-config mon.json >mon.out 2>mon.err
one_error mon fs/mon/monitor_rank0.h5 $?
grep -q "monitor: [1-9][0-9]* step(s)" mon.err || bad "monitor: no steps recorded: $(cat mon.err)"
"$nprobe" monitor fs/mon >monr.out 2>monr.err; rc=$?
[ $rc -le 1 ] && grep -q " [1-9][0-9]* step(s)" monr.out ||
  bad "nprobe monitor of the runtime's file after the full disk: exit $rc $(cat monr.out monr.err)"
echo "runtime monitor on a full disk: $(grep -m1 'monitor: [0-9]* step' mon.err); $(grep -m1 'No space' mon.err)"
unfill
fill 262144
# pyrun.sh: this tree's package and libnprobe (the sanitizers' runtimes
# preloaded in the sanitized pass); 77: no torch or h5py
"${NP_SOURCE_DIR:?}/tests/python/pyrun.sh" "$NP_SOURCE_DIR/tests/python/monitor_full_disk.py" \
  fs/pmon "$tmp" >pmon.out 2>&1; rc=$?
if [ $rc = 77 ]; then
  echo "the package's monitor on a full disk: skipped ($(cat pmon.out))"
elif [ $rc != 0 ]; then
  bad "the package's monitor on a full disk: exit $rc"; cat pmon.out
else
  tail -1 pmon.out
fi
unfill

[ $fail -eq 0 ] && echo "full-disk checks passed"
exit $fail
