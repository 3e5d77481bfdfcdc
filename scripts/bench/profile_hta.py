"""scripts/bench/profile_hta.py [--trace CPU_TRACE] [--repeat N] [--hta-python PY]
[--nprobe BIN] [--workdir DIR] - nprobe profile against HTA
(HolisticTraceAnalysis, PyPI) on the same device trace (docs/PROFILE.md,
docs/PERFORMANCE.md).

HTA is not in the project's venv (it pulls jupyterlab, plotly, networkx,
pytest); make one apart: `python3.11 -m venv /tmp/hta &&
/tmp/hta/bin/pip install HolisticTraceAnalysis==0.5.0` (it needs no torch)
and pass --hta-python /tmp/hta/bin/python.

The device trace is profile_synth.py's (a real torch.profiler CPU trace
whose ops each launch a kernel, repeated N times; the CPU trace is made with
tests/profile/gen_traces.py when --trace is not given). Checks that
nprobe's temporal breakdown (idle, compute, non-compute = communication +
memory + other, the span) equals HTA's get_temporal_breakdown within 1 %
and prints the wall time and peak memory (max RSS) of each: exit 1 when
they differ."""
import argparse
import json
import os
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
df = ta.get_temporal_breakdown(visualize=False)
r = df.iloc[0]
print(json.dumps({"idle": float(r["idle_time(us)"]), "compute": float(r["compute_time(us)"]),
                  "non_compute": float(r["non_compute_time(us)"]), "span": float(r["kernel_time(us)"]),
                  "seconds": time.perf_counter() - t}))
"""


RUSAGE = ("import resource, subprocess, sys, time; t = time.perf_counter(); "
          "p = subprocess.run(sys.argv[1:]); w = time.perf_counter() - t; "
          "sys.stderr.write('\\nRUSAGE %f %d\\n' % (w, resource.getrusage(resource.RUSAGE_CHILDREN).ru_maxrss)); "
          "sys.exit(p.returncode)")


def timed(cmd):
    """(stdout, wall seconds, max RSS MiB) of cmd alone (a fresh parent
    process reads its one child's rusage)."""
    p = subprocess.run([sys.executable, "-c", RUSAGE] + cmd, stdout=subprocess.PIPE,
                       stderr=subprocess.PIPE, text=True)
    if p.returncode:
        sys.exit("%s failed: %s" % (cmd[0], p.stderr[-2000:]))
    last = [ln for ln in p.stderr.splitlines() if ln.startswith("RUSAGE ")][-1].split()
    return p.stdout, float(last[1]), int(last[2]) / 1024.0


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--trace")
    ap.add_argument("--repeat", type=int, default=4)
    ap.add_argument("--hta-python", default="/tmp/hta/bin/python")
    ap.add_argument("--nprobe", default=os.path.join(ROOT, "build", "release", "nprobe"))
    ap.add_argument("--workdir")
    ap.add_argument("--skip-hta", action="store_true", help="time nprobe only")
    a = ap.parse_args()
    work = a.workdir or tempfile.mkdtemp(prefix="np_prof_hta_")
    src = a.trace
    if not src:
        subprocess.run([sys.executable, os.path.join(ROOT, "tests", "profile", "gen_traces.py"), work, "5"],
                       check=True, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
        src = os.path.join(work, "a.json")
    tdir = os.path.join(work, "device")
    os.makedirs(tdir, exist_ok=True)
    trace = os.path.join(tdir, "rank0.json")
    subprocess.run([sys.executable, os.path.join(HERE, "profile_synth.py"), src, trace,
                    "--repeat", str(a.repeat)], check=True)
    size = os.path.getsize(trace) / 2**20
    out = os.path.join(work, "np_out")
    _, np_wall, np_rss = timed([a.nprobe, "profile", trace, "-o", out, "--format", "json"])
    with open(os.path.join(out, "profile.json")) as f:
        r = json.load(f)["ranks"][0]
    mine = {"idle": r["time_us"]["idle"], "compute": r["time_us"]["compute"],
            "non_compute": r["time_us"]["communication"] + r["time_us"]["memory"] + r["time_us"]["other"],
            "span": r["span_us"]}
    print("trace %.1f MiB (%d events); load %.2f" % (size, r["events"], os.getloadavg()[0]))
    print("nprobe profile: %.2f s, max RSS %.0f MiB" % (np_wall, np_rss))
    if a.skip_hta:
        return 0
    so, hta_wall, hta_rss = timed([a.hta_python, "-c", HTA_CODE, tdir])
    hta = json.loads(so.strip().splitlines()[-1])
    print("HTA temporal breakdown: %.2f s, max RSS %.0f MiB (x%.1f nprobe's time)"
          % (hta_wall, hta_rss, hta_wall / np_wall))
    bad = 0
    for k in ("span", "idle", "compute", "non_compute"):
        rel = abs(mine[k] - hta[k]) / max(hta["span"], 1e-9)
        print("  %-12s nprobe %14.3f us  HTA %14.3f us  |diff|/span %.2e" % (k, mine[k], hta[k], rel))
        bad |= rel > 0.01
    print("FAIL: beyond 1 %" if bad else "ok: within 1 % of the span")
    return 1 if bad else 0


if __name__ == "__main__":
    sys.exit(main())
