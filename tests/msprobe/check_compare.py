#!/usr/bin/env python3
"""tests/msprobe/check_compare.py - `nprobe compare` on the genuine msprobe
fp32/bf16 pair (tests/fixtures/msprobe, statistics and tensor tasks, as
msprobe wrote them) against msprobe 26.0.0's own compare output for the same
pair (msprobe_compare/*.csv, the oracle):

- every row msprobe pairs is paired by nprobe (exact name match), and no row
  more or less;
- every metric msprobe prints as a number (statistics: the four diffs, the
  four relative errors, the statistics of both sides; tensor: Cosine,
  EucDist, MaxAbsErr, MaxRelativeErr, the thousandths ratios) equals
  nprobe's to the digits msprobe prints, or where msprobe prints 17 digits,
  to the last few ulps (summation order), widened for the statistics diffs
  by the error msprobe's own reading of its statistics carries (pandas'
  fast float parser, computed here per value). The one documented difference:
  where both sides' statistic is absent (null: an int64 tensor's Mean/Norm,
  a None item), msprobe prints a difference of 0 and nprobe N/A;
- no row is an error only because the dtypes differ (bf16 against fp32),
  and the exit code and verdict counts are the documented ones;
- generated dumps (gen_msprobe.py): the md5 task compares CRC-32s and names
  the changed call, msprobe 8.x's rank/ layout pairs with 26's rank0/.
Usage: check_compare.py NPROBE MSP_INSPECT"""
import csv
import glob
import math
import os
import subprocess
import sys
import tempfile

import pandas

HERE = os.path.dirname(os.path.abspath(__file__))
FIX = os.path.join(os.environ.get("NP_SOURCE_DIR", os.path.join(HERE, "..", "..")),
                   "tests", "fixtures", "msprobe")
failures = []
EPS = 2.220446049250313e-16

STAT_COLS = ["Max diff", "Min diff", "Mean diff", "L2norm diff"]
REL_COLS = ["MaxRelativeErr", "MinRelativeErr", "MeanRelativeErr", "NormRelativeErr"]
SIDE_COLS = ["NPU max", "NPU min", "NPU mean", "NPU l2norm",
             "Bench max", "Bench min", "Bench mean", "Bench l2norm"]
TENSOR_COLS = ["Cosine", "EucDist", "MaxAbsErr", "MaxRelativeErr",
               "One Thousandth Err Ratio", "Five Thousandths Err Ratio"]
# documented verdicts on this pair (docs/COMPARE.md, "msprobe dumps")
EXPECT = {"statistics": {"rc": 1, "rows": 1300}, "tensor": {"rc": 0, "rows": 183}}


def fail(msg):
    failures.append(msg)


def num(s):
    s = s.strip()
    if s.endswith("%"):
        return float(s[:-1]) / 100.0
    try:
        return float(s)
    except ValueError:
        return None


def digits_tol(s):
    """Half a unit in the last digit msprobe printed."""
    s = s.strip().rstrip("%")
    scale = 0.01 if s != s.strip() else 1.0
    if "e" in s.lower():
        mant, exp = s.lower().split("e")
        dec = len(mant.split(".")[1]) if "." in mant else 0
        return 0.5 * 10.0 ** (int(exp) - dec)
    dec = len(s.split(".")[1]) if "." in s else 0
    return 0.5 * 10.0 ** (-dec) * scale


def agree(ms, np_, percent, extra=0.0):
    """nprobe's value np_ equals msprobe's printed ms to the digits printed;
    `extra` widens that by an error msprobe's own computation carries."""
    m = num(ms)
    n = num(np_)
    if m is None:
        return True  # msprobe printed no number (N/A, unsupported, None)
    if n is None:
        return False
    if math.isinf(m) or math.isinf(n) or math.isnan(m) or math.isnan(n):
        return m == n or (math.isnan(m) and math.isnan(n))
    # half a unit in the last printed digit plus a few ulps: a value exactly
    # halfway (msprobe's '{:.12f}' of 145.6776123046875 is 145.677612304688)
    # is half a unit off, and the decimal it printed is itself rounded to a
    # double; where it prints 17 digits, the ulps are the summation order
    tol = digits_tol(ms) / (100.0 if percent else 1.0) + 8 * EPS * abs(m) + extra
    return abs(m - n) <= tol


def pandas_error(s):
    """How far msprobe's reading of a statistic it wrote can be from the
    value: its compare parses the statistics with pandas.to_numeric, whose
    fast parser in the pandas the fixture was made with (1.x) is off by some
    ulps (e.g. 0.037292320281267166; -0.00156402587890625 by 5e-17, 230
    ulps); pandas 2+ parses exactly, so the installed pandas cannot measure
    it: bounded at 1e-12 relative (seen up to 4e-13 on the fixture)."""
    try:
        exact = float(s)
    except ValueError:
        return 0.0
    if math.isinf(exact) or math.isnan(exact):
        return 0.0
    here = abs(float(pandas.to_numeric(pandas.Series([s]))[0]) - exact)
    return max(here, 1e-12 * abs(exact))


def stat_extra(t, col):
    """The error msprobe's statistics diffs (and their relative errors) carry
    from that parse, for the row t of msprobe's csv."""
    k = STAT_COLS.index(col) if col in STAT_COLS else REL_COLS.index(col)
    side = ["max", "min", "mean", "l2norm"][k]
    a, b = t["NPU " + side], t["Bench " + side]
    pe = pandas_error(a) + pandas_error(b)
    if col in STAT_COLS:
        return pe if math.isfinite(pe) else 0.0
    try:
        fb = abs(float(b))
        d = abs(float(a) - float(b))
    except ValueError:
        return 0.0
    e = pe / fb + d * pandas_error(b) / fb ** 2 if fb > 0 else 0.0
    return e if math.isfinite(e) else 0.0


def leaf_names(tool, dump_dir):
    dj = glob.glob(os.path.join(dump_dir, "step0", "*", "dump.json"))[0]
    out = subprocess.run([tool, "leaves", dj], capture_output=True, text=True, check=True).stdout
    return {c[1]: c[0] for c in (line.split("\t") for line in out.splitlines())}


def check(kind, nprobe, tool, tmp):
    bench, cmp = (os.path.join(FIX, "%s_%s" % (kind, p)) for p in ("fp32", "bf16"))
    check_pair(kind, kind, nprobe, tool, bench, cmp,
               os.path.join(FIX, "msprobe_compare", "%s_bf16_vs_fp32.csv" % kind),
               os.path.join(tmp, kind), EXPECT[kind])


def check_pair(label, kind, nprobe, tool, bench, cmp, oracle_csv, out, expect=None):
    """nprobe compare of the msprobe dumps bench and cmp (kind statistics or
    tensor) against msprobe's own compare csv of the same pair: the same rows
    paired, every printed metric equal to its digits. expect: {"rc", "rows"}
    documented for the pair, or None (exit 0 or 1; as many rows as msprobe's).
    Returns the number of values checked."""
    p = subprocess.run([nprobe, "compare", "-b", bench, "-c", cmp, "-o", out, "--format", "csv",
                        "-q", "--step", "0"], capture_output=True, text=True, timeout=300)
    if (expect and p.returncode != expect["rc"]) or p.returncode not in (0, 1):
        fail("%s: exit %d, documented %s: %s" % (label, p.returncode,
                                                 expect["rc"] if expect else "0 or 1", p.stderr))
    reports = glob.glob(os.path.join(out, "*.csv"))
    if len(reports) != 1:
        fail("%s: %d csv reports" % (label, len(reports)))
        return 0
    with open(reports[0], newline="") as f:
        ours = {r["NPU Name"]: r for r in csv.DictReader(f)}
    with open(oracle_csv, newline="") as f:
        theirs = list(csv.DictReader(f))
    names = leaf_names(tool, cmp)
    want = expect["rows"] if expect else len(theirs)
    if len(ours) != want or len(theirs) != want or not theirs:
        fail("%s: %d rows, msprobe %d" % (label, len(ours), len(theirs)))
    cols = (STAT_COLS + REL_COLS if kind == "statistics" else TENSOR_COLS) + SIDE_COLS
    checked = absent = 0
    for t in theirs:
        # msprobe 26.2 names a tensor kwarg {call}.kwargs.{k} in tensor mode,
        # as nprobe does ({call}.input.{k} in msprobe 26.0 and in statistics)
        name = names.get(t["NPU Name"]) or (t["NPU Name"] if t["NPU Name"] in ours else None)
        o = ours.get(name or "")
        if o is None:
            fail("%s: msprobe's row %s has no nprobe row" % (label, t["NPU Name"]))
            continue
        if o["Match"] != "exact" or o["Bench Name"] != name:
            fail("%s: %s not paired (match %s)" % (label, name, o["Match"]))
        for col in cols:
            stats_col = kind == "statistics" and col in STAT_COLS + REL_COLS
            percent = stats_col and col in REL_COLS
            extra = stat_extra(t, col) if stats_col else 0.0
            if agree(t[col], o[col], percent, extra):
                checked += num(t[col]) is not None
                continue
            # msprobe's 0 for the difference of two absent statistics
            k = (-1 if not stats_col else STAT_COLS.index(col) if col in STAT_COLS else
                 REL_COLS.index(col))
            if k >= 0 and o[col] == "N/A":
                side = ["max", "min", "mean", "l2norm"][k]
                # None, or a string argument (msprobe 26.2 prints the value:
                # reduction "mean", dtype "torch.float32")
                if num(t["NPU " + side]) is None and num(t["Bench " + side]) is None:
                    absent += 1
                    continue
            fail("%s: %s %s: nprobe %s, msprobe %s" % (label, name, col, o[col], t[col]))
        if o["Verdict"] == "error" and "type" in o["Reason"].lower():
            fail("%s: %s is an error for its dtype: %s" % (label, name, o["Reason"]))
    verdicts = {}
    for o in ours.values():
        verdicts[o["Verdict"]] = verdicts.get(o["Verdict"], 0) + 1
    print("%s: %d rows, %d values equal to msprobe's digits, %d absent-statistic diffs "
          "(msprobe 0, nprobe N/A), verdicts %s" % (label, len(ours), checked, absent, verdicts))
    return checked


def check_md5_pair(label, nprobe, tool, bench, cmp, oracle_csv, out):
    """md5 task (summary_mode md5): nprobe compare of the msprobe dumps bench
    and cmp, each row's verdict msprobe's Result (pass where its md5 matches,
    error where it differs), as many rows as msprobe's. Returns the number of
    verdicts checked."""
    p = subprocess.run([nprobe, "compare", "-b", bench, "-c", cmp, "-o", out, "--format", "csv",
                        "-q"], capture_output=True, text=True, timeout=300)
    if p.returncode not in (0, 1):
        fail("%s: nprobe compare exit %d: %s" % (label, p.returncode, p.stderr))
    rows = []
    for r in sorted(glob.glob(os.path.join(out, "*.csv"))):
        with open(r, newline="") as f:
            rows += list(csv.DictReader(f))
    names = leaf_names(tool, cmp)
    ours = {r["NPU Name"]: r for r in rows}
    with open(oracle_csv, newline="") as f:
        theirs = list(csv.DictReader(f))
    same = 0
    for t in theirs:
        o = ours.get(names.get(t["NPU Name"]) or t["NPU Name"])
        if o is None:
            fail("%s: msprobe's row %s has no nprobe row" % (label, t["NPU Name"]))
            continue
        if t["NPU MD5"] in ("", "None", "N/A"):
            continue
        same += 1
        want = "pass" if t["Result"] == "pass" else "error"
        if o["Verdict"] != want:
            fail("%s: %s: nprobe %s, msprobe %s (md5 %s/%s)" % (
                label, t["NPU Name"], o["Verdict"], t["Result"], t["NPU MD5"], t["BENCH MD5"]))
    if same == 0 or len(ours) != len(theirs):
        fail("%s: %d md5 rows checked, nprobe %d rows, msprobe %d" % (label, same, len(ours),
                                                                     len(theirs)))
    print("%s: %d rows, %d md5 verdicts equal to msprobe's" % (label, len(ours), same))
    return same


def msprobe_compare_many(pairs, cwd, timeout=900):
    """msprobe's own compare CLI on each (bench_dir, cmp_dir, out) pair of
    msprobe dumps (`msprobe compare -tp CMP -gp BENCH -o OUT`), all in one
    process (tests/python/msprobe_compare_many.py): [csv path or None]."""
    dj = lambda d: glob.glob(os.path.join(d, "step0", "*", "dump.json"))  # noqa: E731
    specs = []
    for b, c, out in pairs:
        jb, jc = dj(b), dj(c)
        if len(jb) != 1 or len(jc) != 1:
            fail("%s / %s: not one step0/*/dump.json" % (b, c))
            return [None] * len(pairs)
        specs.append("%s,%s,%s" % (jc[0], jb[0], out))
    helper = os.path.join(HERE, "..", "python", "msprobe_compare_many.py")
    env = dict(os.environ)
    env.pop("LD_PRELOAD", None)   # msprobe runs no nprobe code (the sanitized pass's preload)
    p = subprocess.run([sys.executable, helper] + specs, capture_output=True, text=True,
                       timeout=timeout, cwd=cwd, env=env)
    got = []
    for i, (b, c, out) in enumerate(pairs):
        csvs = glob.glob(os.path.join(out, "*.csv"))
        ok = ("PAIR %d: exit 0" % i) in p.stdout and len(csvs) == 1
        if not ok:
            fail("msprobe compare -tp %s -gp %s: %d csv, helper exit %d\n%s"
                 % (c, b, len(csvs), p.returncode, p.stderr[-2000:]))
        got.append(csvs[0] if ok else None)
    return got


def compare_text(nprobe, b, c, out):
    p = subprocess.run([nprobe, "compare", "-b", b, "-c", c, "-o", out, "--format", "csv"],
                       capture_output=True, text=True, timeout=300)
    return p.returncode, p.stdout + p.stderr


def check_generated(nprobe, tmp):
    """Dumps of gen_msprobe.py: the md5 task (CRC-32 equality), the 8.x
    layout against msprobe 26's (steps paired), bf16 against fp32."""
    sys.path.insert(0, HERE)
    import gen_msprobe
    g = lambda name, **kw: gen_msprobe.write_dump(os.path.join(tmp, name), **kw)  # noqa: E731
    g("md5_a", task="md5", n_calls=3)
    g("md5_b", task="md5", n_calls=3)
    g("md5_c", task="md5", n_calls=3, fault=1.01)
    rc, out = compare_text(nprobe, *(os.path.join(tmp, x) for x in ("md5_a", "md5_b", "o_m1")))
    if rc != 0 or "(md5 mode): 27 rows: 27 pass" not in out:
        fail("md5, equal dumps: exit %d\n%s" % (rc, out))
    rc, out = compare_text(nprobe, *(os.path.join(tmp, x) for x in ("md5_a", "md5_c", "o_m2")))
    if rc != 1 or "first culprit: Functional.linear.1.forward" not in out or "crc32 differs" not in out:
        fail("md5, a changed output: exit %d\n%s" % (rc, out))
    check_uninitialized(nprobe, tmp, g)
    g("v8_bf16", task="tensor", layout="8", steps=2, n_calls=2, dtype="bfloat16")
    g("v26_fp32", task="tensor", layout="26", steps=2, n_calls=2)
    rc, out = compare_text(nprobe, *(os.path.join(tmp, x) for x in ("v26_fp32", "v8_bf16", "o_l")))
    reports = sorted(glob.glob(os.path.join(tmp, "o_l", "*.csv")))
    verdicts = []
    for r in reports:
        with open(r, newline="") as f:
            verdicts.append(sorted({row["Verdict"] for row in csv.DictReader(f)}))
    if rc != 0 or len(reports) != 2 or verdicts != [["pass"], ["pass"]]:
        fail("8.x bf16 against 26 fp32, two steps: exit %d, reports %s\n%s" % (rc, verdicts, out))
    # hostile payloads: each row an error naming the file, the rest compared, nothing run
    g("good", task="tensor", n_calls=2)
    g("bad", task="tensor", n_calls=2)
    d = os.path.join(tmp, "bad", "step0", "rank0")
    with open(os.path.join(d, "dump.json")) as f:
        text = f.read()
    with open(os.path.join(d, "dump.json"), "w") as f:
        f.write(text.replace('"Functional.linear.0.forward.output.0.pt"', '"../../../../etc/passwd"'))
    cases = gen_msprobe.write_hostile(os.path.join(tmp, "hostile"))
    assert "evil_global.pt" in cases
    for src, leaf in (("evil_global.pt", "Functional.linear.1.forward.output.0"),
                      ("zip_bomb.pt", "Tensor.masked_fill.0.forward.output.0"),
                      ("short_storage.pt", "Tensor.masked_fill.1.forward.output.0")):
        with open(os.path.join(tmp, "hostile", src), "rb") as f, \
                open(os.path.join(d, "dump_tensor_data", leaf + ".pt"), "wb") as g2:
            g2.write(f.read())
    rc, out = compare_text(nprobe, *(os.path.join(tmp, x) for x in ("good", "bad", "o_h")))
    reports = glob.glob(os.path.join(tmp, "o_h", "*.csv"))
    text = open(reports[0]).read() if reports else ""
    for want in ("would leave dump_tensor_data/", "global not allowed: posix.system",
                 "never inflates", "shorter than shape x stride"):
        if want not in text:
            fail("hostile payloads: %r not in the report" % want)
    if rc != 1 or "18 rows: 14 pass, 0 warning, 4 error" not in out:
        fail("hostile payloads: exit %d, want 1 with 14 rows compared\n%s" % (rc, out))
    if os.path.exists(os.path.join(tmp, "hostile", "PWNED")):
        fail("a hostile .pt ran code")


def check_uninitialized(nprobe, tmp, g):
    """Uninitialized memory is not judged: two identical runs where
    torch.empty_like's output and __setitem__'s destination (its input 0,
    before the write: HF Mixtral's inv_perm = empty_like(perm); inv_perm[perm]
    = arange) hold different garbage compare clean (exit 0, those rows pass,
    "not judged", their diffs printed), in statistics and md5 mode;
    __setitem__'s value (input 2) differing is still an error."""
    import json
    for task in ("statistics", "md5"):
        for side, garbage, value in (("a", 140729963773952, 7), ("b", 94891743620461, 7),
                                     ("c", 94891743620461, 8)):
            root = os.path.join(tmp, "un_%s_%s" % (task, side))
            g(os.path.basename(root), task=task, n_calls=1)
            dj = glob.glob(os.path.join(root, "step0", "*", "dump.json"))[0]
            with open(dj) as f:
                doc = json.load(f)

            def leaf(mx, mn, crc):
                d = {"type": "torch.Tensor", "dtype": "torch.int64", "shape": [32], "Max": mx,
                     "Min": mn, "Mean": None, "Norm": None, "requires_grad": False}
                if task == "md5":
                    d["md5"] = "%08x" % crc
                return d
            doc["data"]["Torch.empty_like.0.forward"] = {
                "input_args": [leaf(31, 0, 1)], "input_kwargs": {},
                "output": [leaf(garbage, 0, garbage & 0xffffffff)]}
            doc["data"]["Tensor.__setitem__.0.forward"] = {
                "input_args": [leaf(garbage, 0, garbage & 0xffffffff), leaf(31, 0, 2),
                               leaf(value, 0, value)],
                "input_kwargs": {}, "output": [None]}
            with open(dj, "w") as f:
                json.dump(doc, f)
        ab = [os.path.join(tmp, "un_%s_%s" % (task, x)) for x in "abc"]
        rc, out = compare_text(nprobe, ab[0], ab[1], os.path.join(tmp, "o_un_" + task))
        reports = glob.glob(os.path.join(tmp, "o_un_" + task, "*.csv"))
        rows = {}
        for r in reports:
            with open(r, newline="") as f:
                rows.update({x["NPU Name"]: x for x in csv.DictReader(f)})
        for name in ("Torch.empty_like.0.forward.output.0", "Tensor.__setitem__.0.forward.input.0"):
            r = rows.get(name, {})
            if r.get("Verdict") != "pass" or "not judged" not in r.get("Reason", ""):
                fail("uninitialized memory, %s: %s is %s (%s)" % (task, name, r.get("Verdict"),
                                                                   r.get("Reason")))
            # not judged, still measured: the diffs as msprobe prints them
            if task == "statistics" and num(r.get("Max diff", "")) is None:
                fail("uninitialized memory: %s has no Max diff (%s)" % (name, r.get("Max diff")))
        if rc != 0:
            fail("uninitialized memory, %s: two identical runs exit %d\n%s" % (task, rc, out))
        rc, out = compare_text(nprobe, ab[0], ab[2], os.path.join(tmp, "o_un2_" + task))
        rows = {}
        for r in glob.glob(os.path.join(tmp, "o_un2_" + task, "*.csv")):
            with open(r, newline="") as f:
                rows.update({x["NPU Name"]: x["Verdict"] for x in csv.DictReader(f)})
        if rc != 1 or rows.get("Tensor.__setitem__.0.forward.input.2") != "error" or \
                rows.get("Tensor.__setitem__.0.forward.input.0") != "pass":
            fail("uninitialized memory, %s: a different __setitem__ value: exit %d, rows %s\n%s"
                 % (task, rc, {k: v for k, v in rows.items() if "setitem" in k}, out))


def check_replay(nprobe, tmp):
    """The isolated error (compare's float64 replay of the cmp side) on
    msprobe's dumps: the genuine bf16 run against fp32 names no culprit
    (checked with EXPECT above: exit 0), every recomputable forward call of
    it is within its budget, and a softmax whose output is 6% off (15 u of
    bfloat16: below compare's bf16 error level, so the accumulated
    comparison alone names nothing) is the first culprit."""
    import shutil
    import torch
    bf16 = os.path.join(FIX, "tensor_bf16")
    p = subprocess.run([nprobe, "replay", bf16], capture_output=True, text=True, timeout=300)
    if p.returncode != 0 or " 0 exceed" not in p.stdout or "15 pass" not in p.stdout:
        fail("replay of the genuine bf16 dump: exit %d, want 0 with 15 calls passing\n%s"
             % (p.returncode, p.stdout + p.stderr))
    bad = os.path.join(tmp, "softmax_off")
    shutil.copytree(bf16, bad)
    pt = glob.glob(os.path.join(bad, "step0", "*", "dump_tensor_data",
                                "Functional.softmax.0.forward.output.0.pt"))[0]
    t = torch.load(pt)
    torch.save((t.float() * 1.06).to(t.dtype), pt)
    fp32 = os.path.join(FIX, "tensor_fp32")
    rc, out = compare_text(nprobe, fp32, bad, os.path.join(tmp, "o_sm"))
    if rc != 1 or "first culprit: Functional.softmax.0.forward" not in out or \
            "isolated error" not in out:
        fail("a softmax 6%% off: exit %d, want 1 naming it by its isolated error\n%s" % (rc, out))
    p = subprocess.run([nprobe, "compare", "-b", fp32, "-c", bad, "-o", os.path.join(tmp, "o_sm2"),
                        "--format", "csv", "--no-replay"], capture_output=True, text=True, timeout=300)
    if "first culprit: Functional.softmax.0.forward" in p.stdout:
        fail("a softmax 6%% off without the replay: named anyway, the case does not test it\n%s"
             % p.stdout)


def check_ls_show(nprobe):
    """nprobe ls and show on the genuine dumps as they lie on disk."""
    run = lambda *a: subprocess.run([nprobe] + list(a), capture_output=True, text=True,  # noqa
                                    timeout=120)
    p = run("ls", os.path.join(FIX, "statistics_fp32"))
    if p.returncode != 0 or "Functional.embedding.0.forward.input.0" not in p.stdout \
            or "task statistics, level mix" not in p.stdout:
        fail("ls statistics_fp32: exit %d %s" % (p.returncode, p.stderr))
    p = run("ls", os.path.join(FIX, "tensor_bf16"), "--calls")
    if p.returncode != 0 or "make_real_dumps.py:77 in forward" not in p.stdout:
        fail("ls --calls: no callsite from stack.json: %s" % p.stderr)
    p = run("show", os.path.join(FIX, "tensor_bf16"), "Tensor.masked_fill.0.forward.output.0")
    if p.returncode != 0 or "bfloat16" not in p.stdout or "-inf" not in p.stdout:
        fail("show masked_fill output: exit %d %s" % (p.returncode, p.stderr))


def check_live_fixture(nprobe, tool, tmp):
    """The fresh msprobe 26.2 pair of an HF Llama (tests/fixtures/msprobe_live,
    level L0): its layers take tensors by keyword; compared as tensors, the
    pair has no error (exit 0; read as scalar arguments, the bf16 input of a
    layer was a culprit), every value equal to msprobe's own compare."""
    live = os.path.join(os.path.dirname(FIX), "msprobe_live")
    check_pair("llama L0 (msprobe 26.2)", "statistics", nprobe, tool,
               os.path.join(live, "llama_L0_fp32"), os.path.join(live, "llama_L0_bf16"),
               os.path.join(live, "statistics_L0_bf16_vs_fp32.csv"), os.path.join(tmp, "live"),
               {"rc": 0, "rows": 198})


def main():
    nprobe, tool = sys.argv[1], sys.argv[2]
    check_ls_show(nprobe)
    with tempfile.TemporaryDirectory(prefix="np_msp_cmp_") as tmp:
        for kind in ("statistics", "tensor"):
            check(kind, nprobe, tool, tmp)
        check_live_fixture(nprobe, tool, tmp)
        check_generated(nprobe, tmp)
        check_replay(nprobe, tmp)
    for f in failures[:40]:
        print("FAIL:", f, file=sys.stderr)
    if len(failures) > 40:
        print("FAIL: ... %d more" % (len(failures) - 40), file=sys.stderr)
    return 1 if failures else 0


if __name__ == "__main__":
    sys.exit(main())
