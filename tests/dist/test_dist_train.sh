#!/usr/bin/env bash
# test_dist_train.sh - `mpirun -n K nprobe train` (K = 1, 2, 4) against the
# single-process run on the same global batch (docs/RUNTIME.md,
# "Distributed"). The reference is the single process, an independent code
# path (no gather, no shard). K = 1 must be bit-identical to it; K = 2 and 4
# must match every step's loss and the final parameters and optimizer state
# within the documented reduction rounding; two K = 4 runs are bit-identical;
# a batch that does not split into K shards is a usage error.
set -u
. "$(dirname "$0")/mpi_env.sh"
steps=20
[ -n "${NP_SANITIZED:-}" ] && steps=6
args=(train --model gpt --steps "$steps" --threads 1 --seed 7)

"$nprobe" "${args[@]}" --save ref.h5 > ref.log 2>&1 || { echo "FAIL single-process run"; cat ref.log; exit 1; }
for k in 1 2 4; do
  mpirun_k $k "$nprobe" "${args[@]}" --save k$k.h5 > k$k.log 2> k$k.err ||
    { echo "FAIL mpirun -n $k"; cat k$k.log k$k.err; fail=1; continue; }
  grep -q "^data parallel: $k rank(s), global batch 8, $((8 / k)) per rank" k$k.log ||
    { echo "FAIL mpirun -n $k: no data-parallel header"; cat k$k.log; fail=1; }
done
# the second K=4 run with the profile task (docs/PROFILE.md): it must change
# nothing (bit-identical below), and each rank's trace holds the collectives
mpirun_k 4 "$nprobe" "${args[@]}" --save k4b.h5 --profile prof4 > k4b.log 2>&1 || { echo "FAIL second K=4 run"; fail=1; }

"$py" - "$steps" <<'PY' || fail=1
import re, sys
import h5py, numpy as np
steps = int(sys.argv[1])
def losses(path):
    v = [float(m.group(1)) for m in re.finditer(r"^step \d+ loss (\S+)", open(path).read(), re.M)]
    assert len(v) == steps, (path, len(v))
    return np.array(v)
def tensors(path):
    out = {}
    with h5py.File(path, "r") as f:
        f.visititems(lambda n, o: out.__setitem__(n, o[()].astype(np.float64))
                     if isinstance(o, h5py.Dataset) and o.dtype.kind == "f" else None)
    return out
ref_l, ref_t = losses("ref.log"), tensors("ref.h5")
assert any(k.startswith("params/") for k in ref_t) and len(ref_t) > 20, sorted(ref_t)[:5]
bad = 0
def same(a, b):
    return a.keys() == b.keys() and all(np.array_equal(a[k], b[k]) for k in a)
# K = 1: one shard is the whole batch and the mean of one rank is exact
if not (np.array_equal(losses("k1.log"), ref_l) and same(tensors("k1.h5"), ref_t)):
    print("FAIL K=1 is not bit-identical to the single process"); bad = 1
else:
    print("ok   K=1 bit-identical to the single process")
# K = 2, 4: documented rounding (docs/RUNTIME.md): loss within 1e-5
# relative per step, parameters within 2e-4 absolute, optimizer moments
# within 1e-3 of their largest magnitude
for k in (2, 4):
    l, t = losses(f"k{k}.log"), tensors(f"k{k}.h5")
    dl = np.max(np.abs(l - ref_l) / np.abs(ref_l))
    dp = max(np.max(np.abs(t[n] - ref_t[n])) for n in ref_t if n.startswith("params/"))
    dm = max(np.max(np.abs(t[n] - ref_t[n])) / max(np.max(np.abs(ref_t[n])), 1e-30)
             for n in ref_t if n.startswith("optim/"))
    moved = max(np.max(np.abs(ref_t[n])) for n in ref_t if n.startswith("params/"))
    ok = dl <= 1e-5 and dp <= 2e-4 and dm <= 1e-3 and t.keys() == ref_t.keys()
    print(("ok  " if ok else "FAIL"), f"K={k}: loss rel diff {dl:.2e}, params abs diff {dp:.2e} (max |p| {moved:.2f}), moments rel diff {dm:.2e}")
    bad |= not ok
    # the runs do differ from the reference somewhere (the shard means round differently)
if same(tensors("k4.h5"), tensors("k4b.h5")) and np.array_equal(losses("k4.log"), losses("k4b.log")):
    print("ok   two K=4 runs bit-identical")
else:
    print("FAIL two K=4 runs differ"); bad = 1
sys.exit(bad)
PY

# the collectives as slices: per rank and step one Distributed.all_reduce
# slice per parameter (k4.h5's params), the loss and the squared gradient
# norm, inside its ProfilerStep; nprobe profile's communication time is their
# float64 sum (they do not overlap: one thread)
"$nprobe" profile prof4 -o prof4rep > prof4.log 2>&1 || { echo "FAIL nprobe profile prof4"; cat prof4.log; fail=1; }
"$py" - "$steps" <<'PY' || fail=1
import csv, json, math, sys
import h5py
steps = int(sys.argv[1])
with h5py.File("k4.h5", "r") as f:
    n_params = len(f["params"])
rows = {int(r["rank"]): r for r in csv.DictReader(open("prof4rep/profile_summary.csv"))}
bad = 0
for rank in range(4):
    ev = [e for e in json.load(open(f"prof4/rank{rank}.trace.json"))["traceEvents"] if e.get("ph") == "X"]
    st = {e["args"]["step"]: e for e in ev if e["name"].startswith("ProfilerStep#")}
    coll = [e for e in ev if e["name"].startswith("Distributed.all_reduce.")]
    per = {s: sorted(e["name"] for e in coll if e["args"]["step"] == s) for s in st}
    want = sorted(f"Distributed.all_reduce.{i}.forward" for i in range(n_params + 2))
    inside = all(st[e["args"]["step"]]["ts"] <= e["ts"] and
                 e["ts"] + e["dur"] <= st[e["args"]["step"]]["ts"] + st[e["args"]["step"]]["dur"] + 1e-3
                 for e in coll)
    tot = sum(float(e["dur"]) for e in coll)
    got = float(rows[rank]["communication_us"])
    # profile's timeline works in float64 microseconds since boot
    # (CLOCK_MONOTONIC): each slice's length carries up to one ulp of its
    # timestamps, which grows with the machine's uptime (1e12 us: 1.2e-4)
    tol = len(coll) * math.ulp(max(e["ts"] + e["dur"] for e in coll)) + 1e-12 * tot
    ok = len(st) == steps and all(v == want for v in per.values()) and inside and \
        abs(got - tot) <= tol and tot > 0
    print(("ok  " if ok else "FAIL"), f"rank {rank}: {len(coll)} all_reduce slices over {len(st)} steps "
          f"({n_params} params + loss + grad norm), communication {got:.6f} us, their sum {tot:.6f} (tolerance {tol:.1e})")
    bad |= not ok
sys.exit(bad)
PY

# a global batch that does not split into K equal shards
mpirun_k 3 "$nprobe" "${args[@]}" > k3.log 2> k3.err
rc=$?
if [ $rc -ne 0 ] && grep -q "batch: the global batch 8 does not split into 3 equal shards" k3.err; then
  echo "ok   K=3 with batch 8: usage error (exit $rc)"
else
  echo "FAIL K=3 with batch 8: exit $rc"; cat k3.err; fail=1
fi
exit $fail
