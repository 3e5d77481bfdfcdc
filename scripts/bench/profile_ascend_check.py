"""nprobe profile on Ascend profiler output as it lies, checked independently.

    python3 scripts/bench/profile_ascend_check.py NPROBE FILE...

FILE: an Ascend PyTorch profiler trace_view.json or kernel_details.csv
(docs/PROFILE.md, "A real Ascend trace", names the public samples checked).
Each file is analysed by `NPROBE profile FILE -o TMP` and its reports are
compared with sums computed here in float64:

- trace_view.json: every cpu_op's count, total and self time (each thread's
  events sorted by start, nested by containment; self = duration less the
  direct children's), the device busy time (the union of the Ascend
  Hardware process's tasks) and, for reference, the sums of msprof's own
  Overlap Analysis lanes (Computing, Free) in the same file;
- kernel_details.csv: every kernel's count and total, the union of the
  rows' intervals (busy) and the span.

Exits 1 when a difference exceeds 1e-6 us. Not in CI (the samples are not
part of the project).
"""
import collections
import csv
import json
import os
import subprocess
import sys
import tempfile


def union(iv):
    iv = sorted(iv)
    busy, (s, e) = 0.0, iv[0]
    for a, b in iv[1:]:
        if a > e:
            busy, s, e = busy + e - s, a, b
        else:
            e = max(e, b)
    return busy + e - s, iv[0][0], max(b for _, b in iv)


def reports(nprobe, path, out):
    subprocess.run([nprobe, "profile", path, "-o", out, "--format", "csv"], check=True,
                   stdout=subprocess.DEVNULL)
    ops = list(csv.DictReader(open(os.path.join(out, "profile_ops.csv"))))
    summ = next(csv.DictReader(open(os.path.join(out, "profile_summary.csv"))))
    return ops, summ


def check_trace(path, ops, summ):
    ev = json.load(open(path))
    ev = ev["traceEvents"] if isinstance(ev, dict) else ev
    procs = {e["pid"]: e["args"]["name"] for e in ev if e.get("ph") == "M" and e.get("name") == "process_name"}
    by = collections.defaultdict(list)
    hw, lanes = [], collections.defaultdict(float)
    lane_names = {(e["pid"], e["tid"]): e["args"]["name"] for e in ev
                  if e.get("ph") == "M" and e.get("name") == "thread_name"}
    for e in ev:
        if e.get("ph") != "X":
            continue
        ts, dur = float(e["ts"]), float(e["dur"])
        proc = procs.get(e["pid"], "")
        if e.get("cat") == "cpu_op" and not e["name"].startswith("ProfilerStep#"):
            by[(e["pid"], e["tid"])].append((ts, -(ts + dur), dur, e["name"]))
        elif proc == "Ascend Hardware":
            hw.append((ts, ts + dur))
        elif proc == "Overlap Analysis":
            lanes[lane_names.get((e["pid"], e["tid"]), "?")] += dur
    self_t, total, count = collections.defaultdict(float), collections.defaultdict(float), collections.Counter()
    for evs in by.values():
        evs.sort()
        stack = []
        for ts, nend, dur, name in evs:
            while stack and stack[-1][0] <= ts:
                stack.pop()
            if stack:
                self_t[stack[-1][1]] -= dur
            self_t[name] += dur
            total[name] += dur
            count[name] += 1
            stack.append((-nend, name))
    rows = {r["name"]: r for r in ops if r["category"] == "cpu_op"}
    worst = 0.0
    for name in total:
        r = rows[name]
        if int(r["count"]) != count[name]:
            raise SystemExit(f"{path}: {name}: count {r['count']} != {count[name]}")
        self_n = float(r["self_us"]) if r["self_us"] else float("nan")
        worst = max(worst, abs(float(r["total_us"]) - total[name]), abs(self_n - self_t[name]))
    busy = union(hw)[0] if hw else 0.0
    worst_dev = abs(float(summ["busy_us"]) - busy) if hw else 0.0
    print(f"{path}: {sum(count.values())} cpu_op events of {len(total)} ops: largest |difference| of "
          f"total or self time {worst:.3g} us; device busy {float(summ['busy_us']):.3f} us (union of the "
          f"Ascend Hardware tasks {busy:.3f}): compute {float(summ['compute_us']):.3f} us, memory "
          f"{float(summ['memory_us']):.3f} us, idle {float(summ['idle_us']):.3f} us; msprof's Overlap "
          f"Analysis lanes: " + ", ".join(f"{k} {v:.3f} us" for k, v in sorted(lanes.items())))
    return max(worst, worst_dev) if worst == worst else float("inf")


def check_kernels(path, ops, summ):
    rows = list(csv.DictReader(open(path, encoding="utf-8-sig")))
    tot, cnt, iv = collections.defaultdict(float), collections.Counter(), []
    for r in rows:
        ts, d = float(r["Start Time(us)"].strip()), float(r["Duration(us)"])
        tot[r["Name"]] += d
        cnt[r["Name"]] += 1
        iv.append((ts, ts + d))
    by = {r["name"]: r for r in ops if r["category"] == "kernel"}
    worst = max(abs(float(by[n]["total_us"]) - tot[n]) for n in tot)
    if any(int(by[n]["count"]) != cnt[n] for n in tot):
        raise SystemExit(f"{path}: a kernel's count differs")
    busy, first, last = union(iv)
    worst = max(worst, abs(float(summ["busy_us"]) - busy), abs(float(summ["span_us"]) - (last - first)))
    print(f"{path}: {len(rows)} rows of {len(tot)} kernels: largest |difference| of total, busy "
          f"({busy:.3f} us) or span ({last - first:.3f} us) {worst:.3g} us")
    return worst


def main():
    nprobe, files = sys.argv[1], sys.argv[2:]
    worst = 0.0
    with tempfile.TemporaryDirectory() as tmp:
        for i, path in enumerate(files):
            ops, summ = reports(nprobe, path, os.path.join(tmp, str(i)))
            check = check_kernels if path.endswith(".csv") else check_trace
            worst = max(worst, check(path, ops, summ))
    sys.exit(0 if worst <= 1e-6 else 1)


if __name__ == "__main__":
    main()
