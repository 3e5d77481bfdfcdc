"""tests/profile/test_prof_task.py - the profile task of the runtime
(`nprobe train --profile DIR`, a config with "task": "profile") and the slow
faults, checked against answers computed here:
- one run with a dump and the profile together: the trace's cpu_op events
  of each step are exactly the API calls the dump holds for that step (names
  as the dump's, one slice per call), every call lies inside its step's
  ProfilerStep and inside the slice of its parent module (the nesting of the
  dump's parent links), the events of the thread come in start order;
- FLOPs: every linear, matmul and sdpa event's args.flops equals torch's own
  flop counter (torch.utils.flop_counter) on tensors of the event's shapes,
  forward and backward (skipped without torch);
- the schedule (skip_first, wait, warmup, active, repeat) records exactly the
  steps torch.profiler.schedule would, computed here;
- `nprobe profile` reads the trace: its operator totals equal float64 sums
  over the events; the xlsx sheets (ops, compare) hold the csv's rows;
- a slow fault on rank 1 of two (NPROBE_RANK labels, one process each): `nprobe profile
  compare clean slow` names a Functional.gelu call first with a ratio
  above 3 and a delta over 3x the clean pair's largest slowdown (its largest
  positive delta), and `nprobe profile DIR` names rank 1 the slow rank;
- a trace shaped as Ascend's trace_view.json (a bare array, string ts) is
  read with the same totals;
- the slow faults leave the run's final loss as it is (same function);
- bad configs exit 2 naming the key."""
import csv
import json
import os
import subprocess
import sys
import tempfile

sys.path.insert(0, os.path.join(os.path.dirname(os.path.abspath(__file__)), ".."))
from nptest import check, finish, run  # noqa: E402

SAN = os.environ.get("NP_SANITIZED") == "1"
GPT = ["--model", "gpt", "--threads", "1", "--layers", "2", "--width", "64", "--context", "32",
       "--batch", "8"]


def events(path):
    with open(path) as f:
        return json.load(f)["traceEvents"]


def dump_calls(root):
    """{step: [api call names]} from `nprobe ls --calls`"""
    rc, so, se = run(["ls", "dump", "--calls"], root)
    check(rc == 0, "nprobe ls --calls: exit %d %s" % (rc, se))
    out, step = {}, None
    for line in so.splitlines():
        w = line.split()
        if line.startswith("step "):
            step = int(w[1])
            out[step] = []
        elif len(w) >= 3 and w[0].isdigit() and w[1] == "api":
            out[step].append(w[2])
    return out


def check_calls_and_nesting(root, ev):
    calls = dump_calls(root)
    steps = {e["args"]["step"]: e for e in ev if e.get("cat") == "user_annotation"}
    check(sorted(steps) == sorted(calls), "steps: trace %s, dump %s" % (sorted(steps), sorted(calls)))
    for s, names in calls.items():
        ops = [e["name"] for e in ev if e.get("cat") == "cpu_op" and e["args"]["step"] == s]
        check(sorted(ops) == sorted(names),
              "step %d: the trace's %d API slices are not the dump's %d calls" % (s, len(ops), len(names)))
    # nesting: the dump's parent of each call encloses it in the trace
    rc, so, _ = run(["ls", "dump", "--calls"], root)
    parent, step = {}, None
    for line in so.splitlines():
        w = line.split()
        if line.startswith("step "):
            step = int(w[1])
        elif len(w) >= 4 and w[0].isdigit() and w[1] == "api" and w[3] != "-":
            parent[(step, w[2])] = w[3]
    span = {(e["args"]["step"], e["name"]): (e["ts"], e["ts"] + e["dur"])
            for e in ev if e.get("ph") == "X"}
    n_nested, bad = 0, []
    for (s, name), par in parent.items():
        if (s, par) not in span:
            continue
        a, b = span[(s, name)]
        pa, pb = span[(s, par)]
        n_nested += 1
        if not (pa <= a and b <= pb + 1e-3):
            bad.append((s, name, par))
    check(n_nested > 50 and not bad, "nesting: %d calls inside their modules, outside: %s" % (n_nested, bad[:3]))
    for e in ev:
        if e.get("ph") != "X":
            continue
        st = steps[e["args"]["step"]]
        if not (st["ts"] <= e["ts"] and e["ts"] + e["dur"] <= st["ts"] + st["dur"] + 1e-3):
            check(False, "%s outside ProfilerStep#%d" % (e["name"], e["args"]["step"]))
            break
    xs = [e["ts"] for e in ev if e.get("ph") == "X"]
    check(xs == sorted(xs), "the events are not in start order")


def torch_flops(name, ins, outs):
    """(forward, backward) FLOPs by torch's flop counter on tensors of these shapes"""
    import torch
    import torch.nn.functional as F
    from torch.utils.flop_counter import FlopCounterMode
    t = [torch.zeros(s, requires_grad=True) for s in ins]
    fwd = FlopCounterMode(display=False)
    with fwd:
        if ".linear." in name:
            y = F.linear(*t)
        elif ".matmul." in name:
            y = torch.matmul(*t)
        else:  # attention written out (torch counts no FLOPs for the CPU sdpa kernel)
            q, k, v = t[:3]
            y = torch.softmax(q @ k.transpose(-2, -1), -1) @ v
    bwd = FlopCounterMode(display=False)
    with bwd:
        y.backward(torch.ones_like(y))
    return fwd.get_total_flops(), bwd.get_total_flops()


def check_flops(ev):
    try:
        import torch  # noqa: F401
    except ImportError:
        print("flops: torch missing, not checked")
        return
    fwd_shapes = {}
    for e in ev:
        if e.get("cat") == "cpu_op" and e["name"].endswith(".forward"):
            fwd_shapes[(e["args"]["step"], e["name"][:-len(".forward")])] = e["args"]["Input Dims"]
    n, cache = 0, {}
    for e in ev:
        if e.get("cat") != "cpu_op" or not any(k in e["name"] for k in (".linear.", ".matmul.", "attention.")):
            continue
        base = e["name"].rsplit(".", 1)[0]
        ins = fwd_shapes[(e["args"]["step"], base)]
        key = (base.split(".")[1], json.dumps(ins))
        if key not in cache:
            cache[key] = torch_flops(e["name"], ins, None)
        want = cache[key][0 if e["name"].endswith(".forward") else 1]
        check(e["args"].get("flops", 0) == want, "%s: flops %s, torch counts %s" % (e["name"], e["args"].get("flops"), want))
        n += 1
    check(n > 10, "flops checked on %d events" % n)
    print("flops: %d events equal torch's flop counter (%d shapes)" % (n, len(cache)))


def torch_schedule_steps(skip_first, wait, warmup, active, repeat, steps):
    """the steps torch.profiler.schedule records (RECORD or RECORD_AND_SAVE),
    computed from its definition"""
    out = []
    for s in range(steps):
        if s < skip_first:
            continue
        k = s - skip_first
        cycle = wait + warmup + active
        if repeat > 0 and k // cycle >= repeat:
            continue
        if k % cycle >= wait + warmup:
            out.append(s)
    return out


def check_profile_totals(root, trace):
    rc, so, se = run(["profile", trace, "-o", "rep", "--format", "csv,xlsx"], root)
    check(rc == 0, "nprobe profile: exit %d %s" % (rc, se))
    sums = {}
    for e in events(os.path.join(root, trace)):
        if e.get("ph") == "X":
            k = (e["cat"], e["name"])
            sums[k] = sums.get(k, 0.0) + float(e["dur"])
    with open(os.path.join(root, "rep", "profile_ops.csv")) as f:
        rows = list(csv.DictReader(f))
    bad = [r for r in rows if abs(float(r["total_us"]) - sums[(r["category"], r["name"])]) > 1e-6]
    check(len(rows) == len(sums) and not bad, "profile_ops.csv: %d rows for %d ops, %d totals differ %s"
          % (len(rows), len(sums), len(bad), bad[:2]))
    check_xlsx_sheet(os.path.join(root, "rep", "profile.xlsx"), "ops", rows)


def check_xlsx_sheet(path, sheet, rows):
    """the xlsx sheet holds the csv's rows: the same texts, numbers equal"""
    try:
        import openpyxl
    except ImportError:
        print("xlsx: openpyxl missing, not checked")
        return
    ws = openpyxl.load_workbook(path, read_only=True)[sheet]
    it = ws.iter_rows(values_only=True)
    head = list(next(it))
    got = [dict(zip(head, r)) for r in it]
    bad = []
    for g, w in zip(got, rows):
        for k, v in w.items():
            x = g.get(k)
            if v in ("", None):
                ok = x is None
            else:
                try:
                    ok = abs(float(x) - float(v)) <= 1e-9 * max(1.0, abs(float(v)))
                except (TypeError, ValueError):
                    ok = str(x) == v
            if not ok:
                bad.append((k, v, x))
    check(len(got) == len(rows) and not bad, "%s sheet %s: %d rows for %d, differing %s"
          % (path, sheet, len(got), len(rows), bad[:3]))


def compare_rows(root, a, b, out):
    rc, so, se = run(["profile", "compare", a, b, "-o", out, "--format", "json,csv,xlsx"], root)
    check(rc == 0, "profile compare %s %s: exit %d %s" % (a, b, rc, se))
    with open(os.path.join(root, out, "profile_compare.csv")) as f:
        check_xlsx_sheet(os.path.join(root, out, "profile_compare.xlsx"), "compare", list(csv.DictReader(f)))
    with open(os.path.join(root, out, "profile_compare.json")) as f:
        return json.load(f)["ops"]


def slow_fault_pair(root):
    """one measurement: the clean pair's largest delta and the faulty pair's
    rows (profile compare), after the runs' final losses are checked equal"""
    args = GPT + ["--steps", "4", "--profile", "two", "--fault", "slow_gelu", "--fault-rank", "1"]
    done = {}
    for r in (0, 1):
        rc, so, se = run(["train"] + args, root, env={"NPROBE_RANK": str(r), "NPROBE_WORLD_SIZE": "2"})
        check(rc == 0, "train --fault slow_gelu rank %d: exit %d %s" % (r, rc, se))
        done["slow_gelu"] = [ln for ln in so.splitlines() if ln.startswith("done:")]
    rc, so, se = run(["train"] + GPT + ["--steps", "4", "--profile", "clean"], root)
    check(rc == 0, "clean train: exit %d %s" % (rc, se))
    done["none"] = [ln for ln in so.splitlines() if ln.startswith("done:")]
    rc, so, se = run(["train"] + GPT + ["--steps", "4", "--fault", "slow_linear"], root)
    done["slow_linear"] = [ln for ln in so.splitlines() if ln.startswith("done:")]
    # a slow path computes the same function: the same final loss (6 digits)
    check(done["none"] and done["slow_gelu"] == done["none"] and done["slow_linear"] == done["none"],
          "the slow faults changed the result: %s" % done)
    # the clean run is both pairs' bench: a call of it preempted is a negative
    # delta in both (it lowers the slow GELU's, it cannot come first: rows
    # are most regressed first); the noise that competes for the first row
    # is a call slower in the other clean run (a positive delta)
    noise = max([0.0] + [r["delta_us"] for r in compare_rows(root, "clean/rank0.trace.json",
                                                             "two/rank0.trace.json", "cc")])
    rows = compare_rows(root, "clean/rank0.trace.json", "two/rank1.trace.json", "cs")
    return noise, rows[0]


def check_slow_fault(root):
    """rank 1 of two runs GELU through the slow path; rank 0 and a run
    without labels are the clean pair (run-to-run noise). Wall times on a
    shared machine: a preemption inside one call of the clean pair can
    reach the slow path's own delta (6.5 ms against 12.6 ms seen at load
    30), so the measurement is taken up to 3 times and one clear answer
    suffices; a GELU that is not the first row, or not beyond 3x the clean
    pair's noise (its largest positive delta: a call slower in the other
    clean run; a call of the shared clean bench preempted, a negative delta
    in both pairs, 6.6-34 ms seen in the sanitized pass at load 15, cannot
    put a row first), in all three fails."""
    for attempt in range(3):
        noise, top = slow_fault_pair(root)
        print("slow_gelu (try %d): first row %s, +%.1f us/step, B/A %.2f; clean pair's largest "
              "slowdown %.1f us/step" % (attempt + 1, top["name"], top["delta_us"], top["ratio"], noise))
        ok = top["name"].startswith("Functional.gelu.") and top["ratio"] > 3 and top["delta_us"] > 3 * noise
        # the same traces: rank 1 the slowest, for a GELU call
        rc, so, se = run(["profile", "two"], root)
        lines = so.splitlines()
        at = [i for i, l in enumerate(lines) if l.startswith("slowest rank:")]
        slow_ok = (rc == 0 and at and lines[at[0]].startswith("slowest rank: 1 ")
                   and "Functional.gelu." in lines[at[0] + 2])
        if ok and slow_ok:
            break
    check(ok, "slow_gelu: the first row %s (ratio %.2f, delta %.1f us) is not a GELU call beyond 3x the "
          "clean pair's largest slowdown %.1f us, in 3 tries" % (top["name"], top["ratio"], top["delta_us"], noise))
    check(slow_ok, "nprobe profile two: rank 1 and a GELU call not named the slow rank and its cause "
          "in 3 tries:\n%s" % so[-600:])


def check_ascend_shape(root):
    """a trace shaped as Ascend's PyTorch profiler writes trace_view.json:
    a bare array, ts as a decimal string of microseconds (ns digits after
    the point), dur a number, process names as M events; nprobe profile's
    totals equal the float64 sums here"""
    ev = [{"ph": "M", "name": "process_name", "pid": 7, "tid": 0, "args": {"name": "Python"}}]
    t = 1700000000000000123  # ns
    for i in range(6):
        for name, d in (("aten::mm", 12345), ("aten::add", 2500 + i)):
            ev.append({"ph": "X", "name": name, "pid": 7, "tid": 7, "ts": "%d.%03d" % (t // 1000, t % 1000),
                       "dur": d / 1000.0, "cat": "cpu_op", "args": {}})
            t += d + 1000
    with open(os.path.join(root, "trace_view.json"), "w") as f:
        json.dump(ev, f)
    rc, so, se = run(["profile", "trace_view.json", "-o", "asc"], root)
    check(rc == 0, "nprobe profile on a trace_view.json-shaped trace: exit %d %s" % (rc, se))
    with open(os.path.join(root, "asc", "profile_ops.csv")) as f:
        rows = {r["name"]: r for r in csv.DictReader(f)}
    for name in ("aten::mm", "aten::add"):
        want = sum(e["dur"] for e in ev if e.get("name") == name)
        got = rows.get(name)
        check(got is not None and int(got["count"]) == 6 and abs(float(got["total_us"]) - want) < 1e-9,
              "trace_view.json %s: %s, want 6 calls %.3f us" % (name, got, want))


def main():
    with tempfile.TemporaryDirectory() as root:
        with open(os.path.join(root, "d.json"), "w") as f:
            f.write('{"task": "statistics", "dump_path": "dump", "level": "L1"}')
        rc, so, se = run(["train"] + GPT + ["--steps", "2", "--dump-config", "d.json", "--profile", "prof"], root)
        check(rc == 0, "train --profile with a dump: exit %d %s" % (rc, se))
        trace = os.path.join(root, "prof", "rank0.trace.json")
        ev = events(trace)
        check_calls_and_nesting(root, ev)
        if not SAN:
            check_flops(ev)
        check_profile_totals(root, "prof/rank0.trace.json")

        # the schedule from a config; torch's schedule computed here
        sched = dict(skip_first=1, wait=1, warmup=1, active=2, repeat=2)
        with open(os.path.join(root, "p.json"), "w") as f:
            json.dump({"task": "profile", "dump_path": "sched", "profile": sched}, f)
        rc, so, se = run(["train"] + GPT + ["--steps", "12", "--dump-config", "p.json"], root)
        check(rc == 0, "train with task profile: exit %d %s" % (rc, se))
        got = sorted({e["args"]["step"] for e in events(os.path.join(root, "sched", "rank0.trace.json"))
                      if e.get("ph") == "X"})
        want = torch_schedule_steps(steps=12, **sched)
        check(got == want, "schedule %s: steps %s, torch's schedule %s" % (sched, got, want))

        check_slow_fault(root)
        check_ascend_shape(root)

        for cfg, key in (({"task": "profile"}, "dump_path"),
                         ({"task": "profile", "dump_path": "x", "profile": {"wait": -1}}, "wait"),
                         ({"task": "profile", "dump_path": "x", "profile": {"activ": 1}}, "activ")):
            with open(os.path.join(root, "bad.json"), "w") as f:
                json.dump(cfg, f)
            rc, so, se = run(["train"] + GPT + ["--steps", "1", "--dump-config", "bad.json"], root)
            check(rc == 2 and key in se and "bad.json" in se, "bad config %s: exit %d %s" % (cfg, rc, se))
    sys.exit(finish())


if __name__ == "__main__":
    main()
