"""scripts/bench/profile_msprof.py - msprof-analyze (Ascend's performance
tool, PyPI msprof-analyze 26.2) as a reference for `nprobe profile` and
`nprobe profile compare` on the same two traces.

msprof-analyze compare refuses traces without device kernels, so each torch
CPU trace (A clean, B with the slow GELU: tests/profile/gen_traces.py) is
first made a device trace by profile_synth.py (each cpu_op launches one
kernel; the cpu_op events stay as they are, in whole microseconds). Then:
  msprof-analyze compare -d B' -bp A'   its ApiCompare sheet: per API name
                                        the calls and self time (ms, two
                                        decimals) of each side
  nprobe profile A' / B'                profile_ops.csv: per cpu_op count
                                        and self_us
Checked: every API on both sides has the same calls and total time within
msprof's rounding (0.005 ms). Self times are printed side by side, not
checked: msprof-analyze nests every torch op of all threads into one tree by
start time (ties in file order) with user annotations as parents, nprobe
nests cpu_op events per thread, so where a parent and its child start in the
same microsecond or threads overlap the two split self time differently.
The API whose self time grew most in each, and nprobe compare's first row,
are printed.
msprof-analyze is not a CI dependency (it pulls pandas, plotly, sqlalchemy):
python3.11 -m venv /tmp/msprofa && /tmp/msprofa/bin/pip install msprof-analyze==26.2

usage: profile_msprof.py --msprof /tmp/msprofa/bin/msprof-analyze --nprobe build/release/nprobe A B
"""
import argparse
import csv
import glob
import gzip
import os
import shutil
import subprocess
import sys
import tempfile

import openpyxl

HERE = os.path.dirname(os.path.abspath(__file__))


def plain_json(src, dst):
    opener = gzip.open if src.endswith(".gz") else open
    with opener(src, "rb") as f, open(dst, "wb") as g:
        shutil.copyfileobj(f, g)


def msprof_api(msprof, a, b, out):
    p = subprocess.run([msprof, "compare", "-d", b, "-bp", a, "-o", out, "--force"],
                       capture_output=True, text=True)
    xs = glob.glob(os.path.join(out, "*.xlsx"))
    if p.returncode or not xs:
        sys.exit(f"msprof-analyze compare failed ({p.returncode}): {p.stdout[-1500:]} {p.stderr[-1500:]}")
    ws = openpyxl.load_workbook(xs[0], read_only=True)["ApiCompare"]
    rows = list(ws.iter_rows(values_only=True))
    head = rows[2]       # Order Id, api name, [Total, Self, Avg, Calls] x 2, ratios
    assert head[1] == "api name" and head[3] == "Self Time(ms)" and head[5] == "Calls", head
    out = {}
    for r in rows[3:]:
        if r[1]:
            out[r[1]] = (r[5], r[3], r[9], r[7], r[2], r[6])   # calls, self a; calls, self b; totals
    return out


def nprobe_ops(nprobe, trace, out):
    subprocess.run([nprobe, "profile", trace, "-o", out], check=True, capture_output=True)
    with open(os.path.join(out, "profile_ops.csv")) as f:
        return {r["name"]: (int(r["count"]), float(r["self_us"] or "nan") / 1e3,
                            float(r["total_us"]) / 1e3)
                for r in csv.DictReader(f) if r["category"] in ("cpu_op", "user_annotation", "cuda_runtime")}


def main():
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--msprof", required=True)
    ap.add_argument("--nprobe", required=True)
    ap.add_argument("a")
    ap.add_argument("b")
    a = ap.parse_args()
    with tempfile.TemporaryDirectory() as tmp:
        syn = []
        for k, src in (("a", a.a), ("b", a.b)):
            raw = os.path.join(tmp, k + "_cpu.json")
            plain_json(src, raw)
            dst = os.path.join(tmp, k + ".json")
            subprocess.run([sys.executable, os.path.join(HERE, "profile_synth.py"), raw, dst], check=True)
            syn.append(dst)
        ms = msprof_api(a.msprof, syn[0], syn[1], os.path.join(tmp, "ms"))
        na = nprobe_ops(a.nprobe, syn[0], os.path.join(tmp, "na"))
        nb = nprobe_ops(a.nprobe, syn[1], os.path.join(tmp, "nb"))
        cmp = subprocess.run([a.nprobe, "profile", "compare", syn[0], syn[1]], capture_output=True,
                             text=True).stdout.splitlines()
    bad, worst, n, same_self, diff_self = 0, 0.0, 0, 0, []
    for name, (ca, sa, cb, sb, ta, tb) in ms.items():
        for side, calls, self_ms, tot_ms, ours in (("A", ca, sa, ta, na), ("B", cb, sb, tb, nb)):
            if not calls:
                continue
            if name not in ours:
                print(f"FAIL {name} ({side}): in msprof-analyze's ApiCompare, not in nprobe's ops")
                bad = 1
                continue
            n += 1
            d = abs(ours[name][2] - tot_ms)
            worst = max(worst, d)
            if ours[name][0] != calls or d > 0.005 + 1e-9:
                print(f"FAIL {name} ({side}): msprof {calls} calls {tot_ms} ms, nprobe "
                      f"{ours[name][0]} calls {ours[name][2]:.4f} ms")
                bad = 1
            if abs(ours[name][1] - self_ms) <= 0.005 + 1e-9:
                same_self += 1
            else:
                diff_self.append(f"{name} ({side}: {self_ms} vs {ours[name][1]:.3f})")
    ms_top = max(ms, key=lambda k: (ms[k][3] or 0) - (ms[k][1] or 0))
    np_top = max(set(na) | set(nb), key=lambda k: (nb.get(k, (0, 0))[1] or 0) - (na.get(k, (0, 0))[1] or 0))
    print(f"{n} (API, side) pairs: calls equal, total time within {worst:.4f} ms "
          f"(msprof rounds to 0.01 ms)")
    print(f"self time within 0.005 ms: {same_self} of {n}; different (msprof vs nprobe, ms): "
          f"{'; '.join(diff_self[:8])}{' ...' if len(diff_self) > 8 else ''}")
    print(f"most grown self time: msprof-analyze {ms_top} "
          f"(+{(ms[ms_top][3] or 0) - (ms[ms_top][1] or 0):.2f} ms), nprobe {np_top} "
          f"(+{nb.get(np_top, (0, 0))[1] - na.get(np_top, (0, 0))[1]:.2f} ms)")
    first = next((ln for ln in cmp if "[cpu_op]" in ln), "")
    print(f"nprobe profile compare's first row (medians per step): {first.strip()}")
    sys.exit(bad)


if __name__ == "__main__":
    main()
