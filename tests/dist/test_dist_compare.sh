#!/usr/bin/env bash
# test_dist_compare.sh - `mpirun -n P nprobe compare` (docs/COMPARE.md,
# "Distributed"): the (step, rank) pairs of two 4-rank dumps (2 steps, so 8
# pairs) spread over P = 1, 2, 3 processes. Against the single process (no
# mpirun): the same exit code, the same per-pair report files byte for byte
# (csv and json; the stamp in the names is the run's), and a summary whose
# first culprit is the lowest (step, seq, rank) of the single process's own
# json reports, computed here from them: the drifting rank 3's first call;
# and the one HTML page, written by the process that compared the pair it
# shows (rank 3's: process 1 of 2), equal to the single process's page but
# for the run's stamp and clock. Then a dump missing on one side and a path
# that does not exist. The sanitized pass leaves P = 1 out (CI time).
set -u
. "$(dirname "$0")/mpi_env.sh"
train() { # dir device fault
  printf '{"task": "tensor", "dump_path": "%s", "level": "mix", "step": [0, 1]}\n' "$tmp/$1" > "$1.json"
  mpirun_k 4 "$nprobe" train --model gpt --layers 1 --width 32 --context 16 --batch 8 --steps 2 \
    --threads 1 --device "$2" --fault "$3" --dump-config "$1.json" > "$1.log" 2>&1 ||
    { echo "FAIL train $*"; cat "$1.log"; exit 1; }
}
train ref cpu none
train run npu-sim shard_drift

"$nprobe" compare -b ref -c run -o single --format csv,json,html -q 2> single.err
want_rc=$?
[ "$want_rc" = 1 ] || { echo "FAIL single-process compare: exit $want_rc (expected 1)"; cat single.err; fail=1; }
want=$("$py" - single <<'PY'
import glob, json, os, sys
best = None
for f in glob.glob(sys.argv[1] + "/compare_result_*.json"):
    j = json.load(open(f))
    fc = j["first_culprit"]
    step = int(f.split("_step")[1].split("_")[0]); rank = int(f.split("_rank")[1].split("_")[0])
    if fc and (best is None or (step, fc["seq"], rank) < best[:3]):
        best = (step, fc["seq"], rank, fc["call"])
print("none" if best is None else f"{best[0]} {best[2]} {best[3]}")
PY
)
[ "$want" = "0 3 Functional.embedding.0.forward" ] || { echo "FAIL the single process's first culprit: '$want'"; fail=1; }

# Sanitized (CI time): P = 2 and 3 only; P = 1 under mpirun runs the MPI
# paths of P = 2 with one process (the plain pass checks it).
procs="1 2 3"; [ -n "${NP_SANITIZED:-}" ] && procs="2 3"
for p in $procs; do
  mpirun_k $p "$nprobe" compare -b ref -c run -o out$p --format csv,json,html > p$p.out 2> p$p.err
  rc=$?
  "$py" - single out$p "$want" "$p" <<'PY' || fail=1
import json, os, re, sys
a, b, want, p = sys.argv[1:5]
strip = lambda f: re.sub(r"_\d{14}(\.\w+)$", r"\1", f)
fa = {strip(f): f for f in os.listdir(a) if f.startswith("compare_result_")}
fb = {strip(f): f for f in os.listdir(b) if f.startswith("compare_result_")}
bad = []
if sorted(fa) != sorted(fb) or len(fa) != 16:
    bad.append(f"report files {sorted(fb)} vs {sorted(fa)}")
for k in fa:
    if k in fb and open(os.path.join(a, fa[k]), "rb").read() != open(os.path.join(b, fb[k]), "rb").read():
        bad.append(f"{k} differs")
stamps = {re.search(r"_(\d{14})\.", f).group(1) for f in fb.values()}
sums = [f for f in os.listdir(b) if f.startswith("compare_summary_")]
if len(stamps) != 1 or sums != [f"compare_summary_{min(stamps)}.json"]:
    bad.append(f"one stamp and one summary expected: {stamps}, {sums}")
else:
    s = json.load(open(os.path.join(b, sums[0])))
    fc = s["first_culprit"]
    got = f"{fc['step']} {fc['rank']} {fc['call']}" if fc else "none"
    if got != want or s["processes"] != int(p) or len(s["pairs"]) != 8:
        bad.append(f"summary: first culprit '{got}' (want '{want}'), processes {s['processes']}, {len(s['pairs'])} pairs")
# the page: the same as the single process's but for the stamp and the clock
clock = lambda t: re.sub(rb"\d{4}-\d\d-\d\d \d\d:\d\d:\d\d", b"T", re.sub(rb"_\d{14}", b"_S", t))
ha = [f for f in os.listdir(a) if f.startswith("compare_report_")]
hb = [f for f in os.listdir(b) if f.startswith("compare_report_")]
if len(ha) != 1 or len(hb) != 1:
    bad.append(f"one HTML page expected: {hb} (single process: {ha})")
elif clock(open(os.path.join(a, ha[0]), "rb").read()) != clock(open(os.path.join(b, hb[0]), "rb").read()):
    bad.append("the HTML page differs from the single process's")
elif f"report: {b}/{hb[0]}" not in open(f"p{p}.out").read():
    bad.append("the HTML page's path is not on stdout")
print(("FAIL" if bad else "ok  "), f"P={p}:", "; ".join(bad) if bad else "16 report files byte-identical to the single process, the same HTML page, summary names " + want)
sys.exit(1 if bad else 0)
PY
  [ "$rc" = "$want_rc" ] || { echo "FAIL P=$p: exit $rc, the single process $want_rc"; cat p$p.err; fail=1; }
  grep -q "^first culprit across all steps and ranks: step 0 rank 3 Functional.embedding.0.forward" p$p.out ||
    { echo "FAIL P=$p: stdout"; cat p$p.out; fail=1; }
done

# ranks 2 and 3 only on the cmp side: compared pairs still match the single
# process's reports (which list the one-sided pairs as issues), exit 1
rm -rf ref/step*/rank2 ref/step*/rank3
"$nprobe" compare -b ref -c run -o half1 --format json -q 2>/dev/null
mpirun_k 2 "$nprobe" compare -b ref -c run -o half2 --format json -q 2> half.err
rc=$?
n_same=0
for f in half1/compare_result_*.json; do
  b=$(basename "$f"); g=$(ls half2/"${b%_*}"_*.json 2>/dev/null)
  [ -n "$g" ] && cmp -s "$f" "$g" && n_same=$((n_same + 1))
done
if [ $rc = 1 ] && [ $n_same = 4 ] && grep -q "present on the cmp side only" half.err; then
  echo "ok   one-sided ranks: exit 1, 4 of 4 reports byte-identical, the missing pairs named"
else
  echo "FAIL one-sided ranks: exit $rc, $n_same of 4 identical"; cat half.err; fail=1
fi
mpirun_k 2 "$nprobe" compare -b ref -c nowhere -o x -q > /dev/null 2> bad.err
rc=$?
if [ $rc != 0 ] && grep -q "nowhere" bad.err; then
  echo "ok   missing dump under mpirun: exit $rc, named"
else
  echo "FAIL missing dump under mpirun: exit $rc"; cat bad.err; fail=1
fi
exit $fail
