#!/usr/bin/env bash
# test_out_files.sh - every file nprobe writes is created exclusively in its
# output folder (common/outfile.c): symlinks planted (also dangling) at the
# probe's dump.h5.partial, at compare's report names, at config_check's
# result.json/result.xlsx and at a pack are never followed, and nothing
# outside the folder changes; parallel compares into one -o folder each get
# their own complete reports; a file size limit (ulimit -f) makes compare and
# config_check fail with exit 2 and one message, leaving nothing partial under
# a final name.
set -u
nprobe=$NPROBE_BIN
py=${NP_PYTHON:-python3}
tmp=$(mktemp -d)
trap 'rm -rf "$tmp"' EXIT
cd "$tmp"
fail=0
bad() { echo "FAIL: $*"; fail=1; }
train=(train --model gpt --layers 1 --width 32 --context 16 --batch 2 --steps 2 --threads 2)

mkdir outside
echo "precious" > outside/victim
victim_sum=$(sha256sum outside/victim | cut -d' ' -f1)
victim_ok() { [ "$(sha256sum outside/victim | cut -d' ' -f1)" = "$victim_sum" ] || bad "$1: outside/victim changed"; }
nothing_created() { [ ! -e "outside/$1" ] || bad "$2: outside/$1 was created through a dangling symlink"; }

# ---- the probe: symlinks at dump.h5.partial (to a file, dangling) and dump.h5
cat > s.json <<JSON
{"task": "statistics", "dump_path": "d", "level": "L1", "step": [0, 1]}
JSON
mkdir -p d/step0/rank0 d/step1/rank0
ln -s "$tmp/outside/victim" d/step0/rank0/dump.h5.partial
ln -s "$tmp/outside/dangling_partial" d/step1/rank0/dump.h5.partial
"$nprobe" "${train[@]}" --dump-config s.json >out.txt 2>err.txt || { bad "train exit $?"; cat err.txt; }
victim_ok probe
nothing_created dangling_partial probe
for s in 0 1; do
  f=d/step$s/rank0/dump.h5
  { [ -f "$f" ] && [ ! -L "$f" ]; } || bad "probe: $f is not a regular file"
  [ ! -e "$f.partial" ] && [ ! -L "$f.partial" ] || bad "probe: $f.partial left behind"
done
"$nprobe" ls d >/dev/null 2>&1 || bad "probe: the dump written past the symlinks does not list"
# a symlink at the final name is replaced, not followed
ln -sf "$tmp/outside/victim" d/step0/rank0/dump.h5
"$nprobe" "${train[@]}" --dump-config s.json >out.txt 2>err.txt || bad "train 2 exit $?"
victim_ok "probe (dump.h5)"
[ ! -L d/step0/rank0/dump.h5 ] || bad "probe: dump.h5 is still a symlink"

# ---- the trainer's checkpoint: symlinks at its name and its old temporary name
ln -s "$tmp/outside/victim" ck.h5
ln -s "$tmp/outside/dangling_ckpt" ck.h5.tmp
"$nprobe" "${train[@]}" --save ck.h5 >/dev/null 2>err.txt || { bad "train --save exit"; cat err.txt; }
victim_ok "checkpoint"
nothing_created dangling_ckpt "checkpoint"
{ [ -f ck.h5 ] && [ ! -L ck.h5 ]; } || bad "checkpoint: ck.h5 is not a regular file"
"$nprobe" "${train[@]}" --load ck.h5 >/dev/null 2>err.txt || { bad "train --load exit"; cat err.txt; }

# ---- compare: dangling symlinks at the report names of the next seconds
cp -r d d2
plant_reports() { # dir: symlinks at every report name of the next 20 seconds
  local now; now=$(date +%s)
  for i in $(seq 0 20); do
    local t; t=$(date -d "@$((now + i))" +%Y%m%d%H%M%S)
    for e in xlsx csv json; do
      ln -s "$tmp/outside/rep_$t.$e" "$1/compare_result_rank0_step0_$t.$e"
      ln -s "$tmp/outside/part_$t.$e" "$1/compare_result_rank0_step0_$t.$e.part"
    done
  done
}
mkdir rep
plant_reports rep
"$nprobe" compare -b d -c d2 -o rep --step 0 --format xlsx,csv,json >out.txt 2>err.txt
rc=$?
[ $rc -eq 0 ] || { bad "compare exit $rc"; cat err.txt; }
n_out=$(find outside -type f | wc -l)
[ "$n_out" -eq 1 ] || bad "compare: $n_out files outside (expected only victim): $(ls outside)"
grep -q "report: rep/compare_result_rank0_step0_[0-9]*_2.csv" out.txt || bad "compare: the report did not move to a free name (_2)"
for p in $(sed -n 's/^  report: //p' out.txt); do
  { [ -f "$p" ] && [ ! -L "$p" ]; } || bad "compare: printed path $p is not the regular file written"
done

# ---- config_check: result.json / result.xlsx and the pack through symlinks
"$nprobe" config_check pack -o pa.zip >/dev/null 2>&1 || bad "pack exit"
ln -s "$tmp/outside/victim" pb.zip
"$nprobe" config_check pack -o pb.zip >/dev/null 2>err.txt || { bad "pack pb exit"; cat err.txt; }
victim_ok "pack"
{ [ -f pb.zip ] && [ ! -L pb.zip ]; } || bad "pack: pb.zip is not a regular file"
mkdir ccj ccx
ln -s "$tmp/outside/victim" ccj/result.json
ln -s "$tmp/outside/dangling_result" ccx/result.xlsx
"$nprobe" config_check compare pa.zip pb.zip -o ccj --format json >/dev/null 2>err.txt
[ $? -le 1 ] || { bad "config_check compare json"; cat err.txt; }
"$nprobe" config_check compare pa.zip pb.zip -o ccx >/dev/null 2>err.txt
[ $? -le 1 ] || { bad "config_check compare xlsx"; cat err.txt; }
victim_ok "config_check result.json"
nothing_created dangling_result "config_check result.xlsx"
{ [ -f ccj/result.json ] && [ ! -L ccj/result.json ]; } || bad "config_check: result.json not written in its folder"
{ [ -f ccx/result.xlsx ] && [ ! -L ccx/result.xlsx ]; } || bad "config_check: result.xlsx not written in its folder"

# ---- parallel compares into one folder: each gets its own complete reports
mkdir par
pids=()
for i in 1 2 3 4 5 6; do
  "$nprobe" compare -b d -c d2 -o par --format xlsx,csv,json --quiet >par_$i.out 2>par_$i.err &
  pids+=($!)
done
for i in 0 1 2 3 4 5; do
  wait "${pids[$i]}" || { bad "parallel compare $((i + 1)) exit $?"; cat "par_$((i + 1)).err"; }
done
for e in xlsx csv json; do
  n=$(ls par/*."$e" 2>/dev/null | wc -l)
  [ "$n" -eq 12 ] || bad "parallel: $n .$e reports for 6 compares of 2 steps (expected 12)"
done
left=$(find par -name '.*' -type f | wc -l)
[ "$left" -eq 0 ] || bad "parallel: $left temporary or reservation files left: $(ls -a par)"
"$py" - par <<'PY' || bad "parallel: a report is incomplete"
import glob, json, sys, zipfile
for p in glob.glob(sys.argv[1] + "/*.json"):
    json.load(open(p))
for p in glob.glob(sys.argv[1] + "/*.xlsx"):
    assert zipfile.ZipFile(p).testzip() is None, p
PY

# ---- a file size limit: exit 2, one message, nothing partial under a final name
mkdir lim
( ulimit -f 8; exec "$nprobe" compare -b d -c d2 -o lim --format csv,json,xlsx --quiet ) >lim.out 2>lim.err
rc=$?
[ $rc -eq 2 ] || bad "ulimit compare: exit $rc (expected 2)"
n=$(grep -c '^nprobe: ' lim.err)
[ "$n" -eq 1 ] || { bad "ulimit compare: $n messages (expected 1)"; cat lim.err; }
grep -q "File too large" lim.err || bad "ulimit compare: the message does not say why"
for p in lim/*; do
  [ -e "$p" ] || continue
  case $p in
  *.json) "$py" -c 'import json,sys; json.load(open(sys.argv[1]))' "$p" 2>/dev/null || bad "ulimit: truncated $p" ;;
  *.csv) [ "$(wc -l <"$p")" -gt 100 ] || bad "ulimit: truncated $p" ;;
  *) bad "ulimit: unexpected file $p" ;;
  esac
done
[ "$(find lim -name '.*' -type f | wc -l)" -eq 0 ] || bad "ulimit: temporaries left: $(ls -a lim)"
mkdir limcc
( ulimit -f 1; exec "$nprobe" config_check compare pa.zip pb.zip -o limcc --format json ) >limcc.out 2>limcc.err
rc=$?
[ $rc -eq 2 ] || bad "ulimit config_check: exit $rc (expected 2)"
[ -z "$(ls -A limcc)" ] || bad "ulimit config_check: files left: $(ls -a limcc)"

[ $fail -eq 0 ] && echo "all output-file checks passed"
exit $fail
