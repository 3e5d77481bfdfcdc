#!/usr/bin/env python3
"""tests/msprobe/check_readers.py - np_msprobe's readers against Python's
own reading: .pt files against torch.load (every dtype, views with offsets
and strides, NaN/inf), dump.json against the json module and against the
row names of msprobe's own compare output (genuine fixtures), the layouts
(msprobe 26 rank/proc, 8.x rank/, many steps and ranks), md5 as CRC-32,
and hostile files (each refused with the file named, nothing executed, no
crash). Usage: check_readers.py MSP_INSPECT"""
import csv
import glob
import json
import math
import os
import shutil
import subprocess
import sys
import tempfile

HERE = os.path.dirname(os.path.abspath(__file__))
sys.path.insert(0, HERE)
import gen_msprobe  # noqa: E402
import torch  # noqa: E402

FIX = os.path.join(os.environ.get("NP_SOURCE_DIR", os.path.join(HERE, "..", "..")),
                   "tests", "fixtures", "msprobe")
failures = 0


def fail(msg):
    global failures
    failures += 1
    print("FAIL:", msg, file=sys.stderr)


def run(tool, *args):
    p = subprocess.run([tool] + list(args), capture_output=True, text=True, timeout=300)
    return p.returncode, p.stdout, p.stderr


def same(a, b):
    return (math.isnan(a) and math.isnan(b)) or a == b


def check_pt(tool, tmp):
    d = os.path.join(tmp, "pt")
    gen_msprobe.write_pt_cases(d)
    for name, t in gen_msprobe.pt_cases().items():
        path = os.path.join(d, name + ".pt")
        for f32 in (False, True):
            rc, out, err = run(tool, "pt", path, *(["f32"] if f32 else []))
            if rc != 0:
                fail("%s: exit %d: %s" % (name, rc, err))
                continue
            lines = out.splitlines()
            dtype, shape = lines[0].split("\t")[:2]
            want_dtype = str(t.dtype).replace("torch.", "")
            if dtype != want_dtype:
                fail("%s: dtype %s, want %s" % (name, dtype, want_dtype))
            if shape != ",".join(str(s) for s in t.shape):
                fail("%s: shape %s, want %s" % (name, shape, list(t.shape)))
            ref = t.contiguous().reshape(-1).double()
            if f32:
                ref = t.contiguous().reshape(-1).float().double()
            got = [float(x) for x in lines[1:]]
            want = ref.tolist()
            if len(got) != len(want) or not all(same(a, b) for a, b in zip(got, want)):
                fail("%s (f32=%d): values differ from torch.load: %s vs %s"
                     % (name, f32, got[:6], want[:6]))


def check_hostile(tool, tmp):
    d = os.path.join(tmp, "hostile")
    cases = gen_msprobe.write_hostile(d)
    marker = os.path.join(d, "PWNED")
    for name, expect in cases.items():
        path = os.path.join(d, name)
        rc, out, err = run(tool, "pt", path)
        if name == "good.pt":
            if rc != 0:
                fail("good.pt refused: " + err)
            continue
        if rc != 2:
            fail("%s: exit %d (want 2, a clear refusal): %s" % (name, rc, err))
        if path not in err or expect not in err:
            fail("%s: message %r does not name the file and say %r" % (name, err, expect))
    if os.path.exists(marker):
        fail("a hostile .pt ran code (%s exists)" % marker)


def py_items(data):
    """msprobe row name -> item, walking dump.json as msprobe names rows."""
    out = {}

    def walk(x, name):
        if x is None or (isinstance(x, dict) and "type" in x):
            out[name] = x
        elif isinstance(x, dict):
            for k, v in x.items():
                walk(v, name + "." + k)
        else:
            for i, v in enumerate(x):
                walk(v, "%s.%d" % (name, i))

    for call, rec in data.items():
        if ".parameters_grad" in call:
            for k, v in rec.items():
                out[call + "." + k] = v[0]
            continue
        for group, val in rec.items():
            role = "input" if group.startswith("input") else group
            walk(val, call + "." + role)
    return out


def stat(v):
    if v is None:
        return float("nan")
    return float(v)


def check_leaves(tool, dump_json, csv_path):
    rc, out, err = run(tool, "leaves", dump_json)
    if rc != 0:
        fail("%s: exit %d: %s" % (dump_json, rc, err))
        return
    with open(dump_json) as f:
        items = py_items(json.load(f)["data"])
    got = {}
    for line in out.splitlines():
        c = line.split("\t")
        got[c[1]] = c
    if set(got) != set(items):
        fail("%s: leaves differ from Python's walk: %s" % (dump_json,
                                                          sorted(set(got) ^ set(items))[:5]))
    for msp, c in got.items():
        it = items.get(msp)
        name, call, role = c[0], c[2], c[3]
        want_name = msp
        if role == "kwargs":
            want_name = msp.replace(call + ".input.", call + ".kwargs.", 1)
        if ".parameters_grad.0." in msp:
            want_name = msp.replace(".parameters_grad.0.", ".parameters_grad.", 1)
        if name != want_name:
            fail("%s: nprobe name %s, want %s" % (msp, name, want_name))
        if it is None or it.get("type") != "torch.Tensor":
            continue
        if c[5] != it["dtype"].replace("torch.", ""):
            fail("%s: dtype %s vs %s" % (msp, c[5], it["dtype"]))
        if c[6] != ",".join(str(s) for s in it["shape"]):
            fail("%s: shape %s vs %s" % (msp, c[6], it["shape"]))
        for k, col in (("Max", 8), ("Min", 9), ("Mean", 10), ("Norm", 11)):
            if not same(float(c[col]), stat(it[k])):
                fail("%s: %s %s vs %s" % (msp, k, c[col], it[k]))
        if c[12] != str(int(it["requires_grad"])):
            fail("%s: requires_grad" % msp)
        if "md5" in it and int(c[13], 16) != int(it["md5"], 16):
            fail("%s: crc32 %s vs md5 %s" % (msp, c[13], it["md5"]))
        if c[15] != it.get("data_name", ""):
            fail("%s: data_name %s" % (msp, c[15]))
    if csv_path:
        with open(csv_path, newline="") as f:
            rows = {r["NPU Name"] for r in csv.DictReader(f)}
        if rows != set(got):
            fail("%s: leaf names differ from msprobe's compare rows: %s"
                 % (dump_json, sorted(rows ^ set(got))[:5]))


def check_genuine(tool):
    for kind in ("statistics", "tensor"):
        for prec in ("fp32", "bf16"):
            dj = glob.glob(os.path.join(FIX, "%s_%s" % (kind, prec), "step0", "*", "dump.json"))[0]
            oracle = os.path.join(FIX, "msprobe_compare", "%s_bf16_vs_fp32.csv" % kind)
            check_leaves(tool, dj, oracle)
            d = os.path.dirname(dj)
            rc, out, err = run(tool, "construct", os.path.join(d, "construct.json"))
            with open(os.path.join(d, "construct.json")) as f:
                cons = json.load(f)
            got = dict(line.split("\t") for line in out.splitlines())
            if rc or got.get("Functional.linear.0.forward") != cons["Functional.linear.0.forward"]:
                fail("construct.json: %d %s" % (rc, err))
            rc, out, err = run(tool, "stack", os.path.join(d, "stack.json"))
            sites = dict(line.split("\t") for line in out.splitlines())
            if rc or sites.get("Functional.embedding.0.forward") != "make_real_dumps.py:77 in forward":
                fail("stack.json: %d %s %s" % (rc, err, sites.get("Functional.embedding.0.forward")))
    # a truncated genuine dump.json: refused with file, line and column
    with tempfile.TemporaryDirectory() as t:
        src = glob.glob(os.path.join(FIX, "statistics_fp32", "step0", "*", "dump.json"))[0]
        cut = os.path.join(t, "dump.json")
        with open(src, "rb") as f, open(cut, "wb") as g:
            g.write(f.read()[:100000])
        rc, out, err = run(tool, "leaves", cut)
        if rc != 2 or cut + ":" not in err or "truncated" not in err:
            fail("truncated dump.json: exit %d, %r" % (rc, err))
        with open(cut, "wb") as g:
            g.write(b"\x00garbage{{{")
        rc, out, err = run(tool, "leaves", cut)
        if rc != 2 or cut not in err:
            fail("garbage dump.json: exit %d, %r" % (rc, err))


def check_layouts(tool, tmp):
    for layout, sub in (("26", "rank%d"), ("proc", "proc%d"), ("8", "rank")):
        root = os.path.join(tmp, "layout_" + layout)
        gen_msprobe.write_dump(root, task="md5", layout=layout, steps=3,
                               ranks=1 if layout == "8" else 2, n_calls=2)
        rc, out, err = run(tool, "find", root)
        rows = [line.split("\t") for line in out.splitlines()]
        ranks = 1 if layout == "8" else 2
        if rc or len(rows) != 3 * ranks:
            fail("layout %s: %d dumps found (%s)" % (layout, len(rows), err))
            continue
        for i, r in enumerate(rows):
            step, rank, pid = int(r[0]), int(r[1]), int(r[2])
            if step != i // ranks:
                fail("layout %s: row %d step %d" % (layout, i, step))
            if layout == "26" and rank != i % ranks:
                fail("layout 26: row %d rank %d" % (i, rank))
            if layout == "proc" and (rank != -1 or pid != 4000 + i % ranks):
                fail("layout proc: row %d rank %d pid %d" % (i, rank, pid))
            if layout == "8" and rank != -1:
                fail("layout 8: rank %d" % rank)
            check_leaves(tool, os.path.join(r[3], "dump.json"), None)
        # a step folder and a rank folder also work
        rc, out, err = run(tool, "find", os.path.join(root, "step1"))
        if rc or len(out.splitlines()) != ranks:
            fail("layout %s: step folder: %s" % (layout, err))


def check_tensor_dump(tool, tmp):
    root = os.path.join(tmp, "tensor_bf16")
    gen_msprobe.write_dump(root, task="tensor", steps=1, ranks=1, n_calls=3, dtype="bfloat16")
    d = os.path.join(root, "step0", "rank0")
    check_leaves(tool, os.path.join(d, "dump.json"), None)
    for pt in glob.glob(os.path.join(d, "dump_tensor_data", "*.pt")):
        rc, out, err = run(tool, "pt", pt)
        t = torch.load(pt)
        got = [float(x) for x in out.splitlines()[1:]]
        want = t.reshape(-1).double().tolist()
        if rc or not all(same(a, b) for a, b in zip(got, want)) or len(got) != len(want):
            fail("%s: %s" % (pt, err))


def main():
    tool = sys.argv[1]
    tmp = tempfile.mkdtemp(prefix="np_msp_")
    try:
        check_pt(tool, tmp)
        check_hostile(tool, tmp)
        check_genuine(tool)
        check_layouts(tool, tmp)
        check_tensor_dump(tool, tmp)
    finally:
        shutil.rmtree(tmp, ignore_errors=True)
    print("%s" % ("ok" if not failures else "%d failures" % failures))
    return 1 if failures else 0


if __name__ == "__main__":
    sys.exit(main())
