"""tests/profile/test_profile.py - `nprobe profile` on real torch.profiler
traces (gen_traces.py: a clean MLP twice, export_chrome_trace and
tensorboard_trace_handler, and the same MLP with a slow GELU, gzipped),
checked against answers computed here with Python's json module:
- every operator's count and total time equal the float64 sum over the
  trace's complete events of that category and name, in file order;
- the CPU timeline's split (optimizer > data loading > communication >
  compute, idle the rest of the span) equals interval unions computed here;
- the self times of cpu_op add up to each thread's cpu_op busy time;
- `profile compare clean slow`: the first row is a GELU op, beyond the
  run-to-run noise the clean pair `profile compare clean clean2` measures
  (printed); the slow side's select/unbind rows are "B only";
- FLOP/s and MFU against --peak-flops on a small device trace with
  args.flops; a trace compared with itself has delta 0;
- bad input (not JSON, not a trace, a missing file) exits 2 naming the file.
The sanitized pass (NP_SANITIZED=1) runs only the checks without torch."""
import csv
import glob
import gzip
import json
import os
import shutil
import subprocess
import sys
import tempfile

sys.path.insert(0, os.path.join(os.path.dirname(os.path.abspath(__file__)), ".."))
from nptest import check, finish, run  # noqa: E402

HERE = os.path.dirname(os.path.abspath(__file__))


def load(path):
    op = gzip.open if path.endswith(".gz") else open
    with op(path, "rt") as f:
        return json.load(f)["traceEvents"]


def union(iv):
    out = []
    for a, b in sorted(iv):
        if out and a <= out[-1][1]:
            out[-1][1] = max(out[-1][1], b)
        else:
            out.append([a, b])
    return out


def length(iv):
    return sum(b - a for a, b in iv)


COMM = ("c10d::", "nccl:", "gloo:", "hccl", "allreduce", "all_reduce", "allgather", "all_gather",
        "reduce_scatter", "broadcast_", "alltoall", "all_to_all", "record_param_comms")


def cpu_class(e):
    cat, name = e.get("cat"), e.get("name", "")
    if cat not in ("cpu_op", "user_annotation"):
        return None
    if name.startswith("Optimizer."):
        return "optimizer"
    if "DataLoader" in name:
        return "data_loading"
    if cat == "user_annotation":
        return None
    return "communication" if any(p in name for p in COMM) else "compute"


def expected(events):
    ops = {}
    cls = {}
    threads = {}
    for e in events:
        if e.get("ph") != "X" or not isinstance(e.get("dur"), (int, float)):
            continue
        key = (e.get("cat", ""), e.get("name", ""))
        n, t = ops.get(key, (0, 0.0))
        ops[key] = (n + 1, t + float(e["dur"]))
        c = cpu_class(e)
        iv = (float(e["ts"]), float(e["ts"]) + float(e["dur"]))
        if c:
            cls.setdefault(c, []).append(iv)
        if e.get("cat") == "cpu_op":
            threads.setdefault((e.get("pid"), e.get("tid")), []).append(iv)
    split, acc = {}, []
    for c in ("optimizer", "data_loading", "communication", "compute"):
        before = length(union(acc)) if acc else 0.0
        acc = acc + cls.get(c, [])
        split[c] = length(union(acc)) - before
    u = union(acc)
    span = u[-1][1] - u[0][0]
    split["idle"] = span - length(u)
    busy = sum(length(union(v)) for v in threads.values())
    return ops, split, span, busy


def main():
    tmp = tempfile.mkdtemp(prefix="np_profile_")
    try:
        if os.environ.get("NP_SANITIZED") != "1":
            torch_checks(tmp)
        plain_checks(tmp)
        return finish()
    finally:
        shutil.rmtree(tmp, ignore_errors=True)


def torch_checks(tmp):
    gen = subprocess.run([sys.executable, os.path.join(HERE, "gen_traces.py"), tmp, "5"],
                         stdout=subprocess.PIPE, stderr=subprocess.STDOUT)
    if gen.returncode:
        print(gen.stdout.decode()[-3000:])
        check(False, "gen_traces.py failed")
        return
    a = os.path.join(tmp, "a.json")
    a2 = glob.glob(os.path.join(tmp, "a2", "*.json"))
    b = os.path.join(tmp, "b.json.gz")
    check(len(a2) == 1, "tensorboard_trace_handler wrote one trace: %s" % a2)

    # --- analysis against float64 sums and unions computed here ---
    for trace in (a, a2[0], b):
        out = os.path.join(tmp, "out_" + os.path.basename(trace).replace(".", "_"))
        rc, so, se = run(["profile", trace, "-o", out], tmp)
        check(rc == 0, "profile %s: exit %d %s" % (trace, rc, se))
        if rc:
            continue
        ops, split, span, busy = expected(load(trace))
        with open(os.path.join(out, "profile_ops.csv")) as f:
            rows = list(csv.DictReader(f))
        got = {(r["category"], r["name"]): r for r in rows}
        check(set(got) == set(ops), "%s: same operators (%d vs %d)" % (trace, len(got), len(ops)))
        bad = [k for k in ops if k in got and (int(got[k]["count"]) != ops[k][0] or
                                                float(got[k]["total_us"]) != ops[k][1])]
        check(not bad, "%s: count and float64 total of every op (%d differ: %s)" % (trace, len(bad), bad[:3]))
        self_sum = sum(float(r["self_us"]) for r in rows if r["category"] == "cpu_op")
        n_cpu = sum(int(r["count"]) for r in rows if r["category"] == "cpu_op")
        # timestamps near 5e12 us carry ~0.001 us of rounding each
        check(abs(self_sum - busy) <= 0.002 * n_cpu,
              "%s: cpu_op self times add up to the threads' busy time (%r vs %r)" % (trace, self_sum, busy))
        with open(os.path.join(out, "profile.json")) as f:
            rep = json.load(f)["ranks"][0]
        check(rep["timeline"] == "cpu" and rep["steps"] == 5, "%s: cpu timeline, 5 steps" % trace)
        check(abs(rep["span_us"] - span) <= 1e-9 * span, "%s: span %r vs %r" % (trace, rep["span_us"], span))
        for c, v in split.items():
            check(abs(rep["time_us"][c] - v) <= 1e-6 * span,
                  "%s: %s time %r vs %r" % (trace, c, rep["time_us"][c], v))
        check(split["optimizer"] > 0, "%s: the optimizer has time" % trace)
        check("top operators by total time" in so and "aten::" in so, "%s: top operators printed" % trace)

    # the folder as tensorboard writes it reads as one rank per trace
    rc, so, se = run(["profile", os.path.join(tmp, "a2")], tmp)
    check(rc == 0 and "rank 0:" in so, "profile FOLDER: exit %d %s" % (rc, se))

    # --- compare: the slow GELU first, beyond the clean pair's noise ---
    rc, so, se = run(["profile", "compare", a, a2[0], "-o", os.path.join(tmp, "cmp_clean")], tmp)
    check(rc == 0, "compare clean: exit %d %s" % (rc, se))
    with open(os.path.join(tmp, "cmp_clean", "profile_compare.csv")) as f:
        clean = list(csv.DictReader(f))
    with open(os.path.join(tmp, "cmp_clean", "profile_compare.json")) as f:
        step = json.load(f)["a_step_us"]
    noise = max(abs(float(r["delta_us"])) for r in clean)
    check(all(r["side"] == "both" for r in clean), "clean pair: every op on both sides")
    rc, so, se = run(["profile", "compare", a, b, "-o", os.path.join(tmp, "cmp_slow")], tmp)
    check(rc == 0, "compare slow: exit %d %s" % (rc, se))
    with open(os.path.join(tmp, "cmp_slow", "profile_compare.csv")) as f:
        slow = list(csv.DictReader(f))
    first = slow[0]
    print("clean pair: largest op delta %.1f us per step (%.2f%% of the %.0f us step); slow GELU: %s "
          "%+.1f us per step, B/A %s" % (noise, 100 * noise / step, step, first["name"],
                                         float(first["delta_us"]), first["ratio"]))
    check("gelu" in first["name"].lower(), "first row is a GELU op: %s" % first["name"])
    check(float(first["delta_us"]) > 5 * noise,
          "the slow GELU (%s us) beyond 5x the clean pair's noise (%s us)" % (first["delta_us"], noise))
    check(noise < 0.2 * step, "clean pair: no op moves more than 20%% of the step (%.1f us)" % noise)
    b_only = {r["name"] for r in slow if r["side"] == "b_only"}
    check({"aten::select", "aten::unbind"} <= b_only, "the loop's ops are B only: %s" % sorted(b_only))
    line = [ln for ln in so.splitlines() if "gelu" in ln.lower()]
    check(bool(line) and "A us/step" in so, "compare prints the table")

    # two traces as two ranks: the slow one is named, and the op that makes it slow
    rc, so, se = run(["profile", a, b], tmp)
    tail = so[so.find("slowest rank"):]
    check(rc == 0 and tail.startswith("slowest rank: 1") and "most regressed" in tail,
          "slowest rank named: %d %s" % (rc, tail[:300]))
    check("gelu" in tail.split("most regressed:")[-1].splitlines()[1].lower(),
          "what makes it slow: a GELU op first: %s" % tail[:400])



def plain_checks(tmp):
    """What needs no torch (the sanitized pass runs only this)."""
    # --- FLOP/s and MFU on a small device trace with args.flops ---
    dev = os.path.join(tmp, "dev.json")
    kern = [(0.0, 40.0, 2.5e9), (50.0, 30.0, 1.5e9), (100.0, 20.0, None)]
    with open(dev, "w") as f:
        json.dump({"traceEvents": [
            {"ph": "X", "cat": "kernel", "name": "gemm", "pid": 0, "tid": 7, "ts": t, "dur": d,
             "args": dict({"stream": 7}, **({"flops": fl} if fl else {}))} for t, d, fl in kern]}, f)
    rc, so, se = run(["profile", dev, "--peak-flops", "1e14", "-o", os.path.join(tmp, "dev_out")], tmp)
    check(rc == 0 and "MFU" in so, "profile --peak-flops: exit %d %s" % (rc, se))
    with open(os.path.join(tmp, "dev_out", "profile_summary.csv")) as f:
        row = list(csv.DictReader(f))[0]
    want = 4e9 / (120e-6) / 1e14  # all flops over the span 0..120 us
    check(abs(float(row["mfu"]) - want) <= 1e-12 * want, "MFU %s vs %r" % (row["mfu"], want))
    check(float(row["idle_us"]) == 30.0 and float(row["compute_us"]) == 90.0,
          "device split: compute 90, idle 30 (%s %s)" % (row["compute_us"], row["idle_us"]))

    # --- bad input ---
    bad = os.path.join(tmp, "bad.json")
    with open(bad, "w") as f:
        f.write('{"traceEvents": [{"ph": "X", "ts": 1,')
    rc, so, se = run(["profile", bad], tmp)
    check(rc == 2 and "bad.json" in se, "truncated trace: exit 2 naming it (%d %s)" % (rc, se))
    with open(bad, "w") as f:
        f.write('{"schemaVersion": 1}')
    rc, so, se = run(["profile", bad], tmp)
    check(rc == 2 and "traceEvents" in se, "no traceEvents: exit 2 (%d %s)" % (rc, se))
    rc, so, se = run(["profile", os.path.join(tmp, "missing.json")], tmp)
    check(rc == 2 and "missing.json" in se, "missing file: exit 2 (%d %s)" % (rc, se))
    rc, so, se = run(["profile", "compare", dev], tmp)
    check(rc == 2 and "two traces" in se, "compare with one trace: exit 2 (%d %s)" % (rc, se))
    rc, so, se = run(["profile", "compare", dev, dev, "-o", os.path.join(tmp, "dev_cmp")], tmp)
    check(rc == 0 and "gemm" in so, "compare a trace with itself: %d %s" % (rc, se))
    with open(os.path.join(tmp, "dev_cmp", "profile_compare.json")) as f:
        rows = json.load(f)["ops"]
    check(len(rows) == 1 and rows[0]["delta_us"] == 0 and rows[0]["ratio"] == 1, "itself: delta 0: %s" % rows)
    rc, so, se = run(["profile", "--help"], tmp)
    check(rc == 0 and "usage: nprobe profile" in so and "--peak-flops" in so, "--help")


if __name__ == "__main__":
    sys.exit(main())
