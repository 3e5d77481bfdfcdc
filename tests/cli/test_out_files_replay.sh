#!/usr/bin/env bash
# test_out_files_replay.sh - `nprobe replay -o DIR` writes its reports as
# every nprobe output is written (common/outfile.c): symlinks planted (also
# dangling) at the report names of the next seconds are never followed and
# nothing outside the folder changes; parallel replays into one folder each
# get their own complete family of reports; a file size limit (ulimit -f)
# makes replay fail with exit 2 and one message, leaving nothing partial
# under a final name and no temporary.
set -u
nprobe=${NPROBE_BIN:?NPROBE_BIN not set}
py=${NP_PYTHON:-python3}
tmp=$(mktemp -d)
trap 'rm -rf "$tmp"' EXIT
cd "$tmp"
fail=0
bad() { echo "FAIL: $*"; fail=1; }

printf '{"task": "tensor", "dump_path": "d", "level": "L1", "step": [0]}\n' > t.json
"$nprobe" train --model gpt --layers 1 --width 32 --context 16 --batch 2 --steps 1 --threads 2 \
  --dump-config t.json >train.out 2>&1 || { echo "FAIL: setup train"; cat train.out; exit 1; }

mkdir outside
echo "precious" > outside/victim
victim_sum=$(sha256sum outside/victim | cut -d' ' -f1)
complete() { # dir: every report in it parses, no hidden temporary or reservation left
  "$py" - "$1" <<'PY' || bad "$1: a report is incomplete"
import csv, glob, json, os, sys, zipfile
mine = lambda e: [p for p in glob.glob(sys.argv[1] + "/*." + e) if not os.path.islink(p)]
for p in mine("json"):
    assert json.load(open(p))["rows"], p
for p in mine("csv"):
    assert len(list(csv.reader(open(p)))) > 1, p
for p in mine("xlsx"):
    assert zipfile.ZipFile(p).testzip() is None, p
PY
  local left; left=$(find "$1" -name '.*' -type f | wc -l)
  [ "$left" -eq 0 ] || bad "$1: $left temporary or reservation files left: $(ls -a "$1")"
}

# ---- symlinks at every report name of the next 300 seconds (UTC stamps)
mkdir rep
now=$(date +%s)
for i in $(seq 0 300); do
  t=$(date -u -d "@$((now + i))" +%Y%m%d%H%M%S)
  ln -s "$tmp/outside/victim" "rep/replay_result_rank0_step0_$t.csv"
  ln -s "$tmp/outside/dangling_$t.json" "rep/replay_result_rank0_step0_$t.json"
  ln -s "$tmp/outside/dangling_$t.xlsx" "rep/replay_result_rank0_step0_$t.xlsx"
done
"$nprobe" replay d -o rep --format xlsx,csv,json >rep.out 2>rep.err
rc=$?
[ $rc -le 1 ] || { bad "replay past symlinks: exit $rc"; cat rep.err; }
[ "$(sha256sum outside/victim | cut -d' ' -f1)" = "$victim_sum" ] || bad "replay: outside/victim changed"
n_out=$(find outside -type f | wc -l)
[ "$n_out" -eq 1 ] || bad "replay: $n_out files outside (expected only victim): $(ls outside)"
n_rep=$(grep -c '^  report: ' rep.out)
[ "$n_rep" -eq 3 ] || bad "replay: $n_rep reports printed (expected 3)"
for p in $(sed -n 's/^  report: //p' rep.out); do
  { [ -f "$p" ] && [ ! -L "$p" ]; } || bad "replay: printed path $p is not the regular file written"
  case $p in *_2.*) ;; *) bad "replay: $p is not at the free name _2" ;; esac
done
complete rep

# ---- parallel replays into one folder: each its own complete family
mkdir par
pids=()
for i in 1 2 3 4; do
  "$nprobe" replay d -o par --format xlsx,csv,json >par_$i.out 2>par_$i.err &
  pids+=($!)
done
for i in 0 1 2 3; do
  wait "${pids[$i]}"
  r=$?
  [ $r -le 1 ] || { bad "parallel replay $((i + 1)) exit $r"; cat "par_$((i + 1)).err"; }
done
for e in xlsx csv json; do
  n=$(ls par/*."$e" 2>/dev/null | wc -l)
  [ "$n" -eq 4 ] || bad "parallel: $n .$e reports for 4 replays (expected 4)"
done
n_fam=$(sed -n 's/^  report: par\/\(.*\)\.[a-z]*$/\1/p' par_*.out | sort -u | wc -l)
[ "$n_fam" -eq 4 ] || bad "parallel: $n_fam report names for 4 replays (each its own family)"
complete par

# ---- a file size limit: exit 2, one message, nothing partial under a final name
mkdir lim
( ulimit -f 4; exec "$nprobe" replay d -o lim --format csv,json,xlsx ) >lim.out 2>lim.err
rc=$?
[ $rc -eq 2 ] || bad "ulimit replay: exit $rc (expected 2)"
n=$(grep -c '^nprobe: ' lim.err)
[ "$n" -eq 1 ] || { bad "ulimit replay: $n messages (expected 1)"; cat lim.err; }
grep -q "File too large" lim.err || { bad "ulimit replay: the message does not say why"; cat lim.err; }
complete lim
for p in $(sed -n 's/^  report: //p' lim.out); do
  [ -f "$p" ] || bad "ulimit replay: printed report $p is not there"
done

[ $fail -eq 0 ] && echo "all replay output-file checks passed"
exit $fail
