"""scripts/bench/profile_hta.py [--trace CPU_TRACE] [--repeat N | --sizes MB,MB,...]
[--steps S] [--rounds R] [--hta-python PY] [--hta-max-mb MB] [--hta-as-gb GB]
[--nprobe BIN] [--workdir DIR] [--skip-hta] - nprobe profile against HTA
(HolisticTraceAnalysis, PyPI) on the same device traces (docs/PROFILE.md,
docs/PERFORMANCE.md).

HTA is not in the project's venv (it pulls jupyterlab, plotly, networkx,
pytest); make one apart: `python3.11 -m venv /tmp/hta &&
/tmp/hta/bin/pip install HolisticTraceAnalysis==0.5.0` (it needs no torch)
and pass --hta-python /tmp/hta/bin/python.

The device traces are profile_synth.py's (a real torch.profiler CPU trace
whose ops each launch a kernel, in the layout torch writes: CPU events, then
kernels, runtime calls and their flows; the CPU trace is made with
tests/profile/gen_traces.py when --trace is not given). --repeat N: one
trace of N repetitions with the source's steps repeated (the first
benchmark). --sizes: one trace per size (about MB * 10^6 bytes) with S
ProfilerSteps (default 5, a profiler schedule's active steps); on each,
interleaved: nprobe profile, HTA, nprobe profile, ... (R rounds of each,
one HTA run above 300 MB), each process alone under /usr/bin/time -v (wall,
user + system CPU, peak RSS), then a Markdown table. HTA runs only up to
--hta-max-mb; --hta-as-gb caps its address space (it fails with
MemoryError instead of waking the OOM killer on a shared machine).

Checks that nprobe's temporal breakdown (idle, compute, non-compute =
communication + memory + other, the span) equals HTA's
get_temporal_breakdown within 1 % and exits 1 when they differ; HTA is
timed from TraceAnalysis(...) (its parse: it has no other way in) to the
breakdown, and the process as a whole."""
import argparse
import json
import os
import re
import resource
import shutil
import statistics
import subprocess
import sys
import tempfile
import time

HERE = os.path.dirname(os.path.abspath(__file__))
ROOT = os.path.dirname(os.path.dirname(HERE))

HTA_CODE = r"""
import json, sys, time, logging
logging.disable(logging.WARNING)
from hta.trace_analysis import TraceAnalysis
t = time.perf_counter()
ta = TraceAnalysis(trace_dir=sys.argv[1])
t1 = time.perf_counter()
df = ta.get_temporal_breakdown(visualize=False)
r = df.iloc[0]
print(json.dumps({"idle": float(r["idle_time(us)"]), "compute": float(r["compute_time(us)"]),
                  "non_compute": float(r["non_compute_time(us)"]), "span": float(r["kernel_time(us)"]),
                  "parse_s": t1 - t, "breakdown_s": time.perf_counter() - t1}))
"""


def gnu_time(cmd, as_gb=None):
    """Run cmd alone under /usr/bin/time -v: (rc, stdout, stderr, wall s,
    cpu s, peak RSS MiB)."""
    def limit():
        if as_gb:
            b = int(as_gb * 2**30)
            resource.setrlimit(resource.RLIMIT_AS, (b, b))
    p = subprocess.run(["/usr/bin/time", "-v"] + cmd, stdout=subprocess.PIPE, stderr=subprocess.PIPE,
                       text=True, preexec_fn=limit)

    def field(name):
        m = re.search(r"^\s*%s: (.*)$" % re.escape(name), p.stderr, re.M)
        return m.group(1).strip() if m else "0"
    wall = 0.0
    for part in field("Elapsed (wall clock) time (h:mm:ss or m:ss)").split(":"):
        wall = wall * 60 + float(part)
    cpu = float(field("User time (seconds)")) + float(field("System time (seconds)"))
    rss = int(field("Maximum resident set size (kbytes)")) / 1024.0
    return p.returncode, p.stdout, p.stderr, wall, cpu, rss


def load():
    return os.getloadavg()[0]


def run_nprobe(a, trace, out):
    rc, _, err, wall, cpu, rss = gnu_time([a.nprobe, "profile", trace, "-o", out, "--format", "json"])
    if rc:
        sys.exit("nprobe profile failed: %s" % err[-2000:])
    with open(os.path.join(out, "profile.json")) as f:
        r = json.load(f)["ranks"][0]
    mine = {"idle": r["time_us"]["idle"], "compute": r["time_us"]["compute"],
            "non_compute": r["time_us"]["communication"] + r["time_us"]["memory"] + r["time_us"]["other"],
            "span": r["span_us"], "events": r["events"], "steps": r["steps"], "streamed": r.get("streamed")}
    return mine, wall, cpu, rss


def run_hta(a, tdir):
    rc, so, err, wall, cpu, rss = gnu_time([a.hta_python, "-c", HTA_CODE, tdir], a.hta_as_gb)
    lines = so.strip().splitlines()
    if rc or not lines:
        tail = [ln for ln in err.splitlines() if ln.strip() and not ln.startswith("\t")][-3:]
        return {"failed": "exit %d: %s" % (rc, " | ".join(tail)[-300:])}, wall, cpu, rss
    return json.loads(lines[-1]), wall, cpu, rss


def compare(mine, hta):
    """Lines of the four figures and the largest |diff| / span."""
    worst, out = 0.0, []
    for k in ("span", "idle", "compute", "non_compute"):
        rel = abs(mine[k] - hta[k]) / max(hta["span"], 1e-9)
        out.append("  %-12s nprobe %18.3f us  HTA %18.3f us  |diff|/span %.2e" % (k, mine[k], hta[k], rel))
        worst = max(worst, rel)
    return out, worst


def synth(a, src, trace, size=None):
    cmd = [sys.executable, os.path.join(HERE, "profile_synth.py"), src, trace]
    cmd += ["--size", str(size), "--steps", str(a.steps)] if size else ["--repeat", str(a.repeat)]
    subprocess.run(cmd, check=True)


def one(a, src, work):
    """The first benchmark: one trace of --repeat repetitions."""
    tdir = os.path.join(work, "device")
    os.makedirs(tdir, exist_ok=True)
    trace = os.path.join(tdir, "rank0.json")
    synth(a, src, trace)
    size = os.path.getsize(trace) / 2**20
    mine, np_wall, _, np_rss = run_nprobe(a, trace, os.path.join(work, "np_out"))
    print("trace %.1f MiB (%d events); load %.2f" % (size, mine["events"], load()))
    print("nprobe profile: %.2f s, max RSS %.0f MiB" % (np_wall, np_rss))
    if a.skip_hta:
        return 0
    hta, hta_wall, _, hta_rss = run_hta(a, tdir)
    if "failed" in hta:
        sys.exit("HTA failed: %s" % hta["failed"])
    print("HTA temporal breakdown: %.2f s, max RSS %.0f MiB (x%.1f nprobe's time)"
          % (hta_wall, hta_rss, hta_wall / np_wall))
    lines, worst = compare(mine, hta)
    print("\n".join(lines))
    print("FAIL: beyond 1 %" if worst > 0.01 else "ok: within 1 % of the span")
    return 1 if worst > 0.01 else 0


def med(v):
    return statistics.median(v) if v else float("nan")


def sizes(a, src, work):
    rows, bad = [], 0
    for mb in [float(x) for x in a.sizes.split(",")]:
        tdir = os.path.join(work, "s%g" % mb)
        os.makedirs(tdir, exist_ok=True)
        trace = os.path.join(tdir, "rank0.json")
        t = time.perf_counter()
        if not (a.keep and os.path.exists(trace)):  # --keep: a trace kept by an earlier run is used again
            synth(a, src, trace, mb)
        nbytes = os.path.getsize(trace)
        print("size %g MB: %.1f MiB written in %.0f s" % (mb, nbytes / 2**20, time.perf_counter() - t), flush=True)
        hta_rounds = 0 if a.skip_hta or mb > a.hta_max_mb else (1 if mb > 300 else a.rounds)
        row = {"mb": nbytes / 1e6, "np": [], "hta": [], "hta_fail": None, "loads": []}
        for k in range(max(a.rounds, hta_rounds + 1)):  # nprobe before and after each HTA run
            row["loads"].append(load())
            mine, w, c, m = run_nprobe(a, trace, os.path.join(work, "np_out"))
            row["np"].append((w, c, m))
            row["mine"] = mine
            print("  nprobe: %.2f s wall, %.2f s cpu, %.1f MiB peak (load %.1f)" % (w, c, m, row["loads"][-1]),
                  flush=True)
            if k < hta_rounds:
                if shutil.which("free"):
                    subprocess.run(["free", "-m"])
                row["loads"].append(load())
                hta, w, c, m = run_hta(a, tdir)
                row["hta"].append((w, c, m))
                print("  HTA: %.1f s wall, %.1f s cpu, %.0f MiB peak (load %.1f) %s"
                      % (w, c, m, row["loads"][-1], hta.get("failed", "parse %.1f s, breakdown %.1f s"
                                                             % (hta.get("parse_s", 0), hta.get("breakdown_s", 0)))),
                      flush=True)
                if "failed" in hta:
                    row["hta_fail"] = hta["failed"]
                    break
                lines, worst = compare(row["mine"], hta)
                print("\n".join(lines), flush=True)
                row["worst"] = max(row.get("worst", 0.0), worst)
                bad |= worst > 0.01
        rows.append(row)
        if not a.keep:
            os.unlink(trace)
    print("\n| trace | events | steps | nprobe profile wall / cpu | nprobe peak RSS | HTA temporal breakdown "
          "wall / cpu | HTA peak RSS | HTA / nprobe (wall, cpu) | breakdown max diff / span | load |")
    print("|---|---|---|---|---|---|---|---|---|---|")
    for r in rows:
        nw, nc, nm = (med([x[i] for x in r["np"]]) for i in range(3))
        s = "| %.0f MB | %d | %d | %.2f s / %.2f s | %.1f MiB | " % (r["mb"], r["mine"]["events"], r["mine"]["steps"],
                                                                  nw, nc, nm)
        if r["hta"] and not r["hta_fail"]:
            hw, hc, hm = (med([x[i] for x in r["hta"]]) for i in range(3))
            s += "%.1f s / %.1f s | %.0f MiB | x%.0f, x%.0f | %.1e |" % (hw, hc, hm, hw / nw, hc / nc, r["worst"])
        elif r["hta_fail"]:
            hw, hc, hm = r["hta"][-1]
            s += "failed after %.0f s / %.0f s (%s) | %.0f MiB | | |" % (hw, hc, r["hta_fail"], hm)
        else:
            s += "not run | | | |"
        s += " %.1f-%.1f |" % (min(r["loads"]), max(r["loads"]))
        print(s)
    print("\nnprobe's peak RSS in each run (MiB): %s; times are medians of the runs; HTA: %s" % (
        ", ".join("%.0f MB: %s" % (r["mb"], "/".join("%.1f" % x[2] for x in r["np"])) for r in rows),
        "one run above 300 MB" if not a.skip_hta else "not run"))
    print("FAIL: a breakdown beyond 1 %" if bad else "breakdowns within 1 % of the span where HTA ran")
    return 1 if bad else 0


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--trace")
    ap.add_argument("--repeat", type=int, default=4)
    ap.add_argument("--sizes", help="MB,MB,...: one trace per size (10^6 bytes)")
    ap.add_argument("--steps", type=int, default=5, help="ProfilerSteps of each --sizes trace")
    ap.add_argument("--rounds", type=int, default=2, help="runs of each tool per size (HTA: 1 above 300 MB)")
    ap.add_argument("--hta-python", default="/tmp/hta/bin/python")
    ap.add_argument("--hta-max-mb", type=float, default=float("inf"), help="run HTA up to this size")
    ap.add_argument("--hta-as-gb", type=float, help="cap HTA's address space (GiB)")
    ap.add_argument("--nprobe", default=os.path.join(ROOT, "build", "release", "nprobe"))
    ap.add_argument("--workdir")
    ap.add_argument("--keep", action="store_true", help="keep the --sizes traces (and use one kept in --workdir)")
    ap.add_argument("--skip-hta", action="store_true", help="time nprobe only")
    a = ap.parse_args()
    work = a.workdir or tempfile.mkdtemp(prefix="np_prof_hta_")
    src = a.trace
    if not src:
        subprocess.run([sys.executable, os.path.join(ROOT, "tests", "profile", "gen_traces.py"), work, "5"],
                       check=True, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
        src = os.path.join(work, "a.json")
    return sizes(a, src, work) if a.sizes else one(a, src, work)


if __name__ == "__main__":
    sys.exit(main())
