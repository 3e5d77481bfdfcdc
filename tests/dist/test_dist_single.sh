#!/usr/bin/env bash
# test_dist_single.sh - a K-rank run against a single-process reference
# (`nprobe compare --single-ref`, docs/COMPARE.md "Distributed"): every rank
# of the 2-rank run is paired with the single run's step, on the reduced
# gradients (every step) and the parameters (step 0). Known answers: a
# clean fp32 K = 2 run and a clean bf16 one raise no error row and exit 0,
# their step-0 parameters are bit-equal to the single run's (same
# initialisation: MaxAbsErr 0); with the average divided by 2K
# (allreduce_wrong_count) every gradient row is an error whose norm is half
# the single run's (read from the json reports), exit 1; under mpirun the
# same reports byte for byte; a bench with two ranks per step is refused.
set -u
. "$(dirname "$0")/mpi_env.sh"
size=(--model gpt --layers 1 --width 32 --context 16 --batch 8 --steps 2 --threads 1)
run() { # dir K device precision fault
  printf '{"task": "tensor", "dump_path": "%s", "level": "mix", "step": [0, 1]}\n' "$tmp/$1" > "$1.json"
  local cmd=("$nprobe" train "${size[@]}" --device "$3" --precision "$4" --fault "$5" --dump-config "$1.json")
  if [ "$2" = 0 ]; then "${cmd[@]}" > "$1.log" 2>&1; else mpirun_k "$2" "${cmd[@]}" > "$1.log" 2>&1; fi ||
    { echo "FAIL train $*"; cat "$1.log"; exit 1; }
}
run single 0 cpu fp32 none
run k2 2 cpu fp32 none
run k2bf 2 npu-sim bf16 none
run k2wc 2 npu-sim fp32 allreduce_wrong_count

check() { # name expected-rc out-dir what(clean|half)
  "$py" - "$3" "$4" <<'PY'
import glob, json, sys
out, what = sys.argv[1:3]
files = sorted(glob.glob(out + "/compare_result_*.json"))
bad, n_grad, n_param0, ratios = [], 0, 0, []
if len(files) != 4:
    bad.append(f"{len(files)} reports (want 4: steps 0, 1 x ranks 0, 1)")
for f in files:
    j = json.load(open(f))
    h = j["headers"]; ix = {k: h.index(k) for k in ("NPU Name", "Verdict", "MaxAbsErr", "NPU l2norm", "Bench l2norm")}
    for r in j["rows"]:
        name = r[ix["NPU Name"]]
        if ".parameters_grad." in name:
            n_grad += 1
            ratios.append(r[ix["NPU l2norm"]] / r[ix["Bench l2norm"]])
        elif ".parameters." in name and "_step0_" in f:
            n_param0 += 1
            if r[ix["MaxAbsErr"]] != 0:
                bad.append(f"{name}: step-0 parameter differs (MaxAbsErr {r[ix['MaxAbsErr']]})")
        else:
            bad.append(f"{name}: not a gradient or a step-0 parameter")
        if what == "clean" and r[ix["Verdict"]] == "error":
            bad.append(f"{name}: error row in a clean run")
        if what == "half" and ".parameters_grad." in name and r[ix["Verdict"]] != "error":
            bad.append(f"{name}: gradient halved but not an error")
if n_grad == 0 or n_param0 == 0:
    bad.append(f"{n_grad} gradient rows, {n_param0} step-0 parameter rows")
if what == "half" and not all(abs(x - 0.5) < 1e-6 for x in ratios if x == x):
    bad.append(f"gradient norm ratios {min(ratios)}..{max(ratios)} (want 0.5)")
print("; ".join(bad[:5]) if bad else f"{n_grad} gradient rows, {n_param0} step-0 parameter rows")
sys.exit(1 if bad else 0)
PY
}
for c in k2:clean:0 k2bf:clean:0 k2wc:half:1; do
  IFS=: read -r d what want <<< "$c"
  "$nprobe" compare -b single -c "$d" --single-ref -o "o_$d" --format csv,json -q 2> "$d.err"
  rc=$?
  msg=$(check "$d" "$want" "o_$d" "$what")
  crc=$?
  if [ $rc = "$want" ] && [ $crc = 0 ]; then
    echo "ok   $d vs single ($what): exit $rc, $msg"
  else
    echo "FAIL $d vs single ($what): exit $rc (want $want), $msg"; cat "$d.err"; fail=1
  fi
done

# under mpirun: the same per-pair reports byte for byte
mpirun_k 2 "$nprobe" compare -b single -c k2wc --single-ref -o mpi_wc --format csv,json -q 2> mpi.err
rc=$?
n_same=0
for f in o_k2wc/compare_result_*; do
  b=$(basename "$f"); g=$(ls mpi_wc/"${b%_*}"_*."${b##*.}" 2>/dev/null)
  [ -n "$g" ] && cmp -s "$f" "$g" && n_same=$((n_same + 1))
done
if [ $rc = 1 ] && [ $n_same = 8 ]; then
  echo "ok   mpirun -n 2 compare --single-ref: exit 1, 8 of 8 report files byte-identical"
else
  echo "FAIL mpirun -n 2 compare --single-ref: exit $rc, $n_same of 8 identical"; cat mpi.err; fail=1
fi

# the bench must be a single-process run
"$nprobe" compare -b k2 -c k2bf --single-ref -o x -q > /dev/null 2> two.err
rc=$?
if [ $rc = 2 ] && grep -q "expected a single-process run" two.err; then
  echo "ok   a 2-rank bench: exit 2, refused"
else
  echo "FAIL a 2-rank bench: exit $rc"; cat two.err; fail=1
fi
exit $fail
