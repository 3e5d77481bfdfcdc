"""test_torch_device_stats.py - the path a CUDA/NPU tensor takes through
nprobe.torch at task "statistics": the statistics reduced by torch ops where
the tensor lives and only the scalars handed to the C probe
(np_probe_dump_stats). This machine has no accelerator, so the test routes
CPU tensors through that same path and checks it against the in-place path
(the C probe reading the tensor's memory) on the same run of the same model:
the same rows, the same shapes, dtypes and counts of NaN/+Inf/-Inf exactly,
max/min exactly, mean and norm to float64 rounding. Only the copy of the
scalars off a real device is left untested. Run through pyrun.sh; exits 1 on
any failed check."""
import json
import os
import sys
import tempfile

import h5py
import numpy as np
import torch
import torch.nn.functional as F

HERE = os.path.dirname(os.path.abspath(__file__))
sys.path[:0] = [HERE, os.path.join(HERE, "..")]
import torch_models  # noqa: E402
from nprobe import _lib  # noqa: E402
from nprobe.torch import PrecisionDebugger  # noqa: E402
from nprobe.torch import debugger as dbgmod  # noqa: E402
from nptest import check, finish  # noqa: E402


def rows_of(path):
    with h5py.File(path, "r") as f:
        e = f["entries"][:]
    return {r["name"].decode(): r for r in e}


def run(tmp, name, device_path):
    """One training step of the test GPT plus a call whose output holds
    NaN, +Inf and -Inf, dumped at statistics L1; with device_path every
    tensor takes the device tensors' path. Returns the rows and how many
    leaves took that path."""
    cfg = f"{tmp}/{name}.json"
    with open(cfg, "w") as f:
        json.dump({"task": "statistics", "dump_path": f"{tmp}/{name}", "level": "L1",
                   "step": [0]}, f)
    torch.manual_seed(0)
    m = torch_models.GPT()
    opt = torch.optim.AdamW(m.parameters(), lr=1e-3)
    d = PrecisionDebugger(cfg)
    taken = [0]
    if device_path:
        plain = d._leaf

        def leaf(cb, role, key, t):
            dt = dbgmod._DT.get(t.dtype)
            if dt is None or t.dim() > _lib.MAX_DIMS:
                return plain(cb, role, key, t)
            taken[0] += 1
            return d._leaf_device_stats(cb, role, key, t.detach(), dt, int(t.requires_grad))
        d._leaf = leaf
        # a device tensor never takes the packed path (np_probe_dump_call
        # reads CPU memory), so neither do these
        d._emit_packed = lambda *args: None
    g = torch.Generator().manual_seed(3)
    idx = torch.randint(0, 32, (2, 8), generator=g)
    special = torch.tensor([[0.0, -1.0, 2.0], [float("inf"), 4.0, float("-inf")]])
    d.start(m)
    loss = F.cross_entropy(m(idx).reshape(-1, 32), torch.roll(idx, -1, 1).reshape(-1))
    torch.log(special)  # log(0) = -inf, log(-1) = log(-inf) = nan, log(inf) = inf
    loss.backward()
    opt.step()
    opt.zero_grad()
    d.stop()
    d.step()
    d.close()
    return rows_of(f"{tmp}/{name}/step0/rank0/dump.h5"), taken[0]


def same(a, b, rel):
    if np.isnan(a) or np.isnan(b):
        return np.isnan(a) and np.isnan(b)
    return abs(a - b) <= rel * max(1.0, abs(a))


def main():
    with tempfile.TemporaryDirectory() as tmp:
        host, _ = run(tmp, "host", False)
        dev, taken = run(tmp, "dev", True)
    check(taken > len(dev) // 2, f"the device path was taken ({taken} leaves, {len(dev)} rows)")
    check(set(host) == set(dev), "the same rows either way: "
          f"{sorted(set(host) ^ set(dev))[:5]}")
    log = "Torch.log.0.forward.output.0"
    r = dev.get(log)
    check(r is not None and (r["nan_count"], r["posinf_count"], r["neginf_count"]) == (2, 1, 1),
          "log of [0, -1, 2, inf, 4, -inf]: two NaN, one +Inf, one -Inf")
    if r is not None:
        fin = np.log(np.array([2.0, 4.0], dtype=np.float32)).astype(np.float64)
        check(r["max"] == fin.max() and r["min"] == fin.min(), "max/min over the finite values")
    exact = ("dtype", "ndim", "numel", "nan_count", "posinf_count", "neginf_count")
    bad = 0
    for k in sorted(set(host) & set(dev)):
        h, v = host[k], dev[k]
        for f in exact:
            if f in h.dtype.names and h[f] != v[f]:
                bad += 1
                check(False, f"{k}: {f} {h[f]} vs {v[f]}")
        if "shape" in h.dtype.names and not np.array_equal(h["shape"], v["shape"]):
            bad += 1
            check(False, f"{k}: shape")
        for f, rel in (("max", 0.0), ("min", 0.0), ("mean", 1e-12), ("norm", 1e-12)):
            if not same(float(h[f]), float(v[f]), rel):
                bad += 1
                if bad < 10:
                    check(False, f"{k}: {f} {h[f]!r} vs {v[f]!r}")
    check(bad == 0, f"{bad} differing fields")
    print(f"{len(dev)} rows, {taken} leaves through the device path")
    return finish()


if __name__ == "__main__":
    sys.exit(main())
