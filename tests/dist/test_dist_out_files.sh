#!/usr/bin/env bash
# test_dist_out_files.sh - `mpirun -n P nprobe compare` writes its merged
# summary and per-pair reports as every nprobe output is written
# (common/outfile.c): a summary already in the folder under the name of the
# next seconds (another run's, or a planted symlink) is neither overwritten
# nor followed, the new one takes a free name (_2); under a file size limit
# (ulimit -f) every process fails with a write error (exit 2), none is killed
# by SIGXFSZ, and nothing partial stays under a final name.
set -u
. "$(dirname "$0")/mpi_env.sh"
bad() { echo "FAIL: $*"; fail=1; }
for d in ref run; do
  printf '{"task": "statistics", "dump_path": "%s", "level": "L1", "step": [0, 1]}\n' "$tmp/$d" > "$d.json"
  "$nprobe" train --model gpt --layers 1 --width 32 --context 16 --batch 2 --steps 2 --threads 1 \
    --dump-config "$d.json" > "$d.log" 2>&1 || { echo "FAIL: setup train $d"; cat "$d.log"; exit 1; }
done
mkdir outside
echo "precious" > outside/victim
victim_sum=$(sha256sum outside/victim | cut -d' ' -f1)

# ---- summaries of the next 120 seconds already there (local-time stamps)
mkdir out
now=$(date +%s)
for i in $(seq 0 120); do
  t=$(date -d "@$((now + i))" +%Y%m%d%H%M%S)
  if [ $((i % 2)) -eq 0 ]; then
    echo '{"earlier": "run"}' > "out/compare_summary_$t.json"
  else
    ln -s "$tmp/outside/victim" "out/compare_summary_$t.json"
  fi
done
sum_before=$(cat out/compare_summary_*.json 2>/dev/null | sha256sum)
mpirun_k 2 "$nprobe" compare -b ref -c run -o out --format csv,json > out.log 2>&1
rc=$?
[ $rc -le 1 ] || { bad "mpirun compare: exit $rc"; cat out.log; }
[ "$(sha256sum outside/victim | cut -d' ' -f1)" = "$victim_sum" ] || bad "summary: outside/victim changed"
n=0
for f in out/compare_summary_*.json; do
  [ -L "$f" ] && continue
  grep -q '"earlier"' "$f" && continue
  n=$((n + 1))
  case $f in *_2.json) ;; *) bad "summary $f is not at the free name _2" ;; esac
  "$py" -c 'import json, sys; assert len(json.load(open(sys.argv[1]))["pairs"]) == 2' "$f" ||
    bad "summary $f is incomplete"
done
[ "$n" -eq 1 ] || bad "$n new summaries (expected 1)"
grep -q "summary: out/compare_summary_[0-9]*_2.json" out.log || bad "the summary printed is not the one written"
left=$(find out -name '.*' -type f | wc -l)
[ "$left" -eq 0 ] || bad "$left temporary or reservation files left: $(ls -a out)"
earlier=$(grep -l '"earlier"' out/compare_summary_*.json 2>/dev/null | wc -l)
[ "$earlier" -eq 61 ] || bad "$earlier of the 61 earlier summaries left as they were"

# ---- a file size limit: exit 2 from write errors, no SIGXFSZ, nothing partial
mkdir lim
# the limit on the nprobe processes only, and Open MPI without its
# shared-memory files (its own runtime would meet the limit first); TCP over
# the loopback, which every machine has (Open MPI 5, Debian 13, found no
# route between two local ranks over this machine's other interfaces)
PMIX_MCA_gds=hash mpirun_k 2 --mca btl self,tcp --mca btl_tcp_if_include lo -x PMIX_MCA_gds=hash \
  bash -c 'ulimit -f 4; exec "$0" compare -b ref -c run -o lim --format csv,json' "$nprobe" > lim.log 2>&1
rc=$?
[ $rc -eq 2 ] || { bad "ulimit mpirun compare: exit $rc (expected 2)"; cat lim.log; }
grep -q "File too large" lim.log || { bad "ulimit mpirun compare: the message does not say why"; cat lim.log; }
grep -qi "signal\|SIGXFSZ\|File size limit exceeded" lim.log && { bad "ulimit mpirun compare: a process was killed"; cat lim.log; }
for p in lim/*; do
  [ -e "$p" ] || continue
  case $p in
  *.json) "$py" -c 'import json,sys; json.load(open(sys.argv[1]))' "$p" 2>/dev/null || bad "ulimit: truncated $p" ;;
  *.csv) [ "$(wc -l <"$p")" -gt 10 ] || bad "ulimit: truncated $p" ;;
  *) bad "ulimit: unexpected file $p" ;;
  esac
done
[ "$(find lim -name '.*' -type f | wc -l)" -eq 0 ] || bad "ulimit: temporaries left: $(ls -a lim)"

[ $fail -eq 0 ] && echo "all mpirun compare output-file checks passed"
exit $fail
