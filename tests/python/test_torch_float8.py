"""test_torch_float8.py - float8 tensors (torch.float8_e4m3fn, float8_e5m2)
through the package into the dump and back (docs/FORMAT.md): a captured
Tensor.to into each float8 dtype, dumped at statistics, md5 and tensor:
  - the rows say dtype float8_e4m3fn / float8_e5m2, their max/min/mean/norm
    equal torch's float64 statistics of the decoded values, the payload
    (tensor task) is exactly torch's decoded values, the crc32 (md5 task)
    that of those float32 bytes;
  - `nprobe ls` lists them with their dtype and `nprobe show` prints their
    statistics;
  - two identical runs compare clean in each mode (exit 0); a run whose
    float8 tensors differ (half the rows negated) is an error in md5 and tensor mode.
Run through pyrun.sh; exits 1 on any failed check."""
import json
import os
import sys
import tempfile
import zlib

import h5py
import numpy as np
import torch

HERE = os.path.dirname(os.path.abspath(__file__))
sys.path[:0] = [HERE, os.path.join(HERE, "..")]
from nprobe.torch import PrecisionDebugger  # noqa: E402
from nptest import check, finish, run  # noqa: E402

if not hasattr(torch, "float8_e4m3fn"):
    print("SKIP: this torch has no float8")
    sys.exit(77)

DT = {"float8_e4m3fn": torch.float8_e4m3fn, "float8_e5m2": torch.float8_e5m2}


def program(tmp, name, task, bump=False):
    path = os.path.join(tmp, name + ".json")
    with open(path, "w") as f:
        json.dump({"task": task, "dump_path": os.path.join(tmp, name), "level": "L1"}, f)
    g = torch.Generator().manual_seed(3)
    x = torch.randn(16, 40, generator=g) * 50
    if bump:  # half the rows change sign: far beyond float8's tolerance (docs/COMPARE.md)
        x[8:] = -x[8:]
    d = PrecisionDebugger(path)
    d.start()
    q = {k: x.to(v) for k, v in DT.items()}
    _ = q["float8_e4m3fn"].float() + q["float8_e5m2"].float()
    d.stop()
    d.step()
    return os.path.join(tmp, name, "step0", "rank0", "dump.h5"), {k: v.float().double() for k, v in q.items()}


with tempfile.TemporaryDirectory() as tmp:
    for task in ("statistics", "md5", "tensor"):
        h5, vals = program(tmp, "a_" + task, task)
        program(tmp, "b_" + task, task)
        program(tmp, "c_" + task, task, bump=True)
        with h5py.File(h5, "r") as f:
            rows = {r["name"].decode(): r for r in f["entries"][:]}
            for k, v in vals.items():
                leaf = [n for n, r in rows.items() if r["dtype"].decode() == k and ".output." in n]
                check(len(leaf) == 1, f"{task}: one {k} output row, got {leaf}")
                if not leaf:
                    continue
                r = rows[leaf[0]]
                for col, want in (("max", v.max()), ("min", v.min()), ("mean", v.mean()),
                                  ("norm", v.norm())):
                    check(abs(r[col] - want.item()) <= 1e-12 * abs(want.item()),
                          f"{task} {k} {col}: dump {r[col]}, torch {want.item()}")
                if task == "tensor":
                    p = f["data"][leaf[0]]
                    check(p.attrs["dtype"] in (k, k.encode()), f"payload dtype attribute {p.attrs['dtype']}")
                    check(np.array_equal(p[...].astype(np.float64), v.numpy()), f"{k}: payload differs from torch")
                if task == "md5":
                    crc = zlib.crc32(v.float().numpy().astype("<f4").tobytes())
                    check(int(r["crc32"]) == crc, f"{k}: crc32 {r['crc32']}, want {crc}")
        rc, out, err = run(["ls", h5], tmp)
        check(rc == 0 and "float8_e4m3fn" in out and "float8_e5m2" in out, f"ls: {rc} {err}")
        leaf = [n for n in out.split() if n.startswith("Tensor.to.") and n.endswith(".output.0")]
        if leaf:
            rc, out, err = run(["show", h5, leaf[0]], tmp)
            check(rc == 0 and "float8" in out, f"show {leaf[0]}: {rc} {out[:200]} {err}")
        a, b, c = (os.path.join(tmp, s + "_" + task) for s in "abc")
        rc, out, err = run(["compare", "-b", a, "-c", b, "-o", os.path.join(tmp, "o" + task)], tmp)
        check(rc == 0, f"{task}: identical runs compare with exit {rc}: {out} {err}")
        rc, out, err = run(["compare", "-b", a, "-c", c, "-o", os.path.join(tmp, "p" + task)], tmp)
        if task != "statistics":
            check(rc == 1, f"{task}: a changed float8 element compares with exit {rc}: {out} {err}")
        print(f"{task}: float8 rows checked, compare clean {0}, changed {rc}")
sys.exit(finish())
