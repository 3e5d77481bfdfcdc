#!/usr/bin/env python3
"""tests/msprobe/check_mixed_stats.py - statistics mode, msprobe against
nprobe on the same tensors, which hold -inf and +inf (masked attention
scores): msprobe's statistics keep the infinities (min -inf, mean -inf, norm
inf), nprobe's are over the finite elements with counts. Compared naively,
"min differs by inf" would name a false culprit; nprobe puts its side into
msprobe's form first, so every row passes, in both directions, and a real
difference (a scaled tensor) is still an error and names its call.
Usage: check_mixed_stats.py NPROBE"""
import glob
import json
import os
import subprocess
import sys
import tempfile

import numpy as np

HERE = os.path.dirname(os.path.abspath(__file__))
sys.path.insert(0, os.path.join(HERE, "..", "..", "scripts", "bench"))
import gen_compare_dumps as gcd  # noqa: E402  (nprobe's record layout)
import h5py  # noqa: E402

failures = []


def tensors(scale):
    """call -> [(role, key, array)]: a masked_fill whose output has -inf,
    a clamp whose output has +inf, then a linear (scaled by `scale`)."""
    rng = np.random.default_rng(3)
    x = rng.standard_normal((2, 8, 8)).astype(np.float32)
    mask = np.triu(np.ones((8, 8), bool), 1)
    y = np.where(mask, -np.inf, x).astype(np.float32)
    z = np.where(mask.T, np.inf, x).astype(np.float32)
    w = rng.standard_normal((8, 8)).astype(np.float32)
    out = (x @ w * scale).astype(np.float32)
    return [("Tensor.masked_fill.0.forward", [("input", "0", x), ("output", "0", y)]),
            ("Tensor.clamp.0.forward", [("input", "0", x), ("output", "0", z)]),
            ("Functional.linear.0.forward", [("input", "0", x), ("input", "1", w),
                                             ("output", "0", out)])]


def write_nprobe(root, scale):
    d = os.path.join(root, "step0", "rank0")
    os.makedirs(d, exist_ok=True)
    calls = tensors(scale)
    rows = [(c, r, k, a) for c, leaves in calls for r, k, a in leaves]
    e = np.zeros(len(rows), dtype=gcd.ENTRY)
    cl = np.zeros(len(calls), dtype=gcd.CALL)
    seq = {c: i for i, (c, _) in enumerate(calls)}
    for i, (c, _) in enumerate(calls):
        cl[i] = (i, c.encode(), b"api", b"", b"")
    for i, (c, r, k, a) in enumerate(rows):
        f = a[np.isfinite(a)].astype(np.float64)
        e[i]["seq"], e[i]["name"], e[i]["call"] = seq[c], ("%s.%s.%s" % (c, r, k)).encode(), c.encode()
        e[i]["role"], e[i]["dtype"], e[i]["ndim"] = r.encode(), b"float32", a.ndim
        e[i]["shape"][: a.ndim] = a.shape
        e[i]["numel"] = a.size
        e[i]["max"], e[i]["min"], e[i]["mean"] = f.max(), f.min(), f.mean()
        e[i]["norm"] = np.sqrt((f * f).sum())
        e[i]["posinf_count"] = int(np.isposinf(a).sum())
        e[i]["neginf_count"] = int(np.isneginf(a).sum())
    with h5py.File(os.path.join(d, "dump.h5"), "w") as h:
        for k, v in dict(format="nprobe-dump", nprobe_version="0.1.0", task="statistics",
                         level="L1", framework="test", device="cpu", precision="fp32").items():
            h.attrs[k] = v
        for k, v in dict(format_version=1, step=0, rank=0, world_size=1, complete=1).items():
            h.attrs[k] = np.int64(v)
        gcd.write_table(h, "entries", e)
        gcd.write_table(h, "calls", cl)


def write_msprobe(root, scale, step=0):
    d = os.path.join(root, "step%d" % step, "rank0")
    os.makedirs(d, exist_ok=True)
    data = {}
    for c, leaves in tensors(scale):
        rec = {"input_args": [], "input_kwargs": {}, "output": []}
        for r, k, a in leaves:
            f = a.astype(np.float64)
            with np.errstate(invalid="ignore"):
                item = {"type": "torch.Tensor", "dtype": "torch.float32", "shape": list(a.shape),
                        "Max": float(f.max()), "Min": float(f.min()), "Mean": float(f.mean()),
                        "Norm": float(np.sqrt((f * f).sum())), "requires_grad": False}
            rec["input_args" if r == "input" else "output"].append(item)
        if c.startswith("Functional.linear"):
            # msprobe writes an argument left at None as null (bias=None, out=None);
            # nprobe's dump records no leaf for it: the same absent value
            rec["input_args"].append(None)
            rec["input_kwargs"]["out"] = None
        data[c] = rec
    with open(os.path.join(d, "dump.json"), "w") as f:
        json.dump({"task": "statistics", "level": "L1", "framework": "pytorch",
                   "dump_data_dir": None, "data": data}, f, indent=1)


def run(nprobe, b, c, out):
    p = subprocess.run([nprobe, "compare", "-b", b, "-c", c, "-o", out, "--format", "json"],
                       capture_output=True, text=True, timeout=120)
    return p.returncode, p.stdout + p.stderr


def main():
    nprobe = sys.argv[1]
    with tempfile.TemporaryDirectory(prefix="np_msp_mixed_") as t:
        write_nprobe(os.path.join(t, "np"), 1.0)
        write_msprobe(os.path.join(t, "ms"), 1.0)
        write_msprobe(os.path.join(t, "ms_bad"), 1.5)
        for b, c in (("np", "ms"), ("ms", "np")):
            rc, out = run(nprobe, os.path.join(t, b), os.path.join(t, c), os.path.join(t, "o" + b))
            # 7 rows on both sides and msprobe's 2 null items, which pass
            if rc != 0 or "first culprit: none" not in out or "9 pass" not in out:
                failures.append("%s vs %s: exit %d (want 0, all 9 rows pass):\n%s" % (b, c, rc, out))
        for rep in glob.glob(os.path.join(t, "onp", "*.json")):
            rows = json.load(open(rep))["rows"]
            nulls = [r for r in rows if any(isinstance(v, str) and "the same absent argument" in v
                                            for v in r)]
            if len(nulls) != 2:
                failures.append("null items: %d rows say 'the same absent argument' (want 2)"
                                % len(nulls))
        # a step on one side only: the message names every format's layout
        write_msprobe(os.path.join(t, "ms"), 1.0, step=1)
        rc, out = run(nprobe, os.path.join(t, "ms"), os.path.join(t, "np"), os.path.join(t, "os"))
        want = ("step 1 rank 0: present on the bench side only", "step*/rank*/dump.h5 (nprobe)",
                "step*/{rank*,proc*,rank}/dump.json (msprobe)")
        if rc != 1 or not all(w in out for w in want) or "expected step*/rank*/dump.h5)" in out:
            failures.append("a step on one side only: exit %d (want 1), message %r" % (rc, out))
        rc, out = run(nprobe, os.path.join(t, "np"), os.path.join(t, "ms_bad"), os.path.join(t, "ob"))
        if rc != 1 or "first culprit: Functional.linear.0.forward" not in out:
            failures.append("a scaled linear: exit %d (want 1, culprit the linear):\n%s" % (rc, out))
        reports = glob.glob(os.path.join(t, "onp", "*.json"))
        if len(reports) != 1 or "Tensor.masked_fill.0.forward.output.0" not in open(reports[0]).read():
            failures.append("no masked_fill output row in the json report")
    for f in failures:
        print("FAIL:", f, file=sys.stderr)
    print("ok" if not failures else "%d failures" % len(failures))
    return 1 if failures else 0


if __name__ == "__main__":
    sys.exit(main())
