"""test_torch_fuzz.py - every tensor kind torch can make, through captured ops.

Kinds: the dtypes (floating incl. float16/bfloat16 and float8 where torch
has them, complex, integers incl. uint8/int8/int16, bool), layouts
(contiguous, transposed, an offset slice, an expanded stride-0 view,
sparse COO and CSR), lazy-view flags (a negative-bit view, a conjugate
view), modes (requires_grad, no_grad, inference_mode) and a Tensor
subclass. Each kind goes through the same captured ops (torch.clone first,
then view, reduction, arithmetic, in-place and functional ops) without and
then with the debugger:

- the program's results are identical (value, dtype, layout, lazy flags,
  subclass; or the same exception with the same message);
- the dumped statistics of each torch.clone call's input equal a float64
  computation on the tensor as the program sees it (max, min exactly; mean
  and norm to 1e-12 relative), and a kind the dump cannot hold (complex,
  sparse) has no leaf there, with a warning per kind and
  summary["skipped"] counting them.
"""
import json
import math
import os
import sys
import tempfile
import warnings

import h5py
import torch

sys.path.insert(0, os.path.join(os.path.dirname(os.path.abspath(__file__)), ".."))
from nptest import check, finish  # noqa: E402

from nprobe.torch import PrecisionDebugger  # noqa: E402


class Sub(torch.Tensor):
    """A plain Tensor subclass (torch's default __torch_function__)."""


def kinds():
    g = torch.Generator().manual_seed(11)

    def rnd(*shape, dtype=torch.float32):
        return torch.randn(*shape, generator=g).to(dtype)

    out = []
    floats = [torch.float32, torch.float64, torch.float16, torch.bfloat16]
    for name in ("float8_e4m3fn", "float8_e5m2", "float8_e4m3fnuz", "float8_e5m2fnuz"):
        if hasattr(torch, name):
            floats.append(getattr(torch, name))
    for dt in floats:
        out.append((str(dt), rnd(3, 4, dtype=dt), None))
    for dt in (torch.complex64, torch.complex128):
        out.append((str(dt), torch.randn(3, 4, dtype=dt, generator=g), None))
    for dt in (torch.int64, torch.int32, torch.int16, torch.int8, torch.uint8):
        out.append((str(dt), torch.randint(0, 100, (3, 4), generator=g).to(dt), None))
    out.append(("bool", torch.randint(0, 2, (3, 4), generator=g).bool(), None))
    base = rnd(4, 6)
    out.append(("transposed", base.t(), None))
    out.append(("offset slice", base[1:, 2:5], None))
    out.append(("expanded", rnd(1, 5).expand(3, 5), None))
    out.append(("0-d", torch.tensor(2.5), None))
    out.append(("empty", torch.empty(0, 3), None))
    out.append(("sparse_coo", rnd(3, 3).to_sparse(), None))
    out.append(("sparse_csr", rnd(3, 3).to_sparse_csr(), None))
    c = torch.randn(3, 4, dtype=torch.complex64, generator=g)
    out.append(("neg view (conj().imag)", c.conj().imag, None))
    out.append(("neg view (_neg_view)", torch._neg_view(rnd(3, 4)), None))
    out.append(("conj view", c.conj(), None))
    out.append(("requires_grad", rnd(3, 4).requires_grad_(), None))
    out.append(("no_grad", rnd(3, 4).requires_grad_(), torch.no_grad))
    with torch.inference_mode():
        inf = rnd(3, 4) * 1
    out.append(("inference_mode", inf, torch.inference_mode))
    out.append(("subclass", rnd(3, 4).as_subclass(Sub), None))
    return out


OPS = [
    ("clone", lambda t: torch.clone(t)),
    ("reshape", lambda t: t.reshape(-1)),
    ("sum", lambda t: t.sum()),
    ("mul", lambda t: torch.mul(t, t)),
    ("add scalar", lambda t: t + 1),
    ("abs", lambda t: torch.abs(t)),
    ("relu", lambda t: torch.nn.functional.relu(t)),
    ("add_ on a clone", lambda t: t.detach().clone().add_(2)),
    ("to float64", lambda t: t.to(torch.float64)),
]


def outcome(fn, t, ctx):
    try:
        if ctx is None:
            return fn(t), None
        with ctx():
            return fn(t), None
    except Exception as e:  # noqa: BLE001 - compared with the other run
        return None, f"{type(e).__name__}: {e}"


def dense(x):
    if x.is_quantized:
        x = x.dequantize()
    if x.layout != torch.strided:
        x = x.to_dense()
    return x.resolve_conj().resolve_neg()


def same(a, b):
    if type(a) is not type(b):
        return False
    if not isinstance(a, torch.Tensor):
        return a == b
    if (a.dtype, a.layout, a.shape, a.is_neg(), a.is_conj(), a.requires_grad,
            a.is_inference()) != (b.dtype, b.layout, b.shape, b.is_neg(), b.is_conj(),
                                  b.requires_grad, b.is_inference()):
        return False
    a, b = dense(a.detach()), dense(b.detach())
    if a.dtype.is_floating_point and a.element_size() == 1:       # float8: compare bits
        a, b = a.view(torch.uint8), b.view(torch.uint8)
    return torch.equal(a, b)


def run_all(ks):
    return [[outcome(fn, t, ctx) for _, fn in OPS] for _, t, ctx in ks]


def expected_stats(t):
    x = dense(t.detach()).as_subclass(torch.Tensor)
    x = x.to(torch.float64).reshape(-1)
    if x.numel() == 0:
        return None
    return float(x.max()), float(x.min()), float(x.mean()), float(x.norm())


def main():
    ks = kinds()
    ref = run_all(ks)
    with tempfile.TemporaryDirectory() as root:
        cfg = os.path.join(root, "c.json")
        with open(cfg, "w") as f:
            json.dump({"task": "statistics", "dump_path": os.path.join(root, "d"),
                       "level": "L1", "step": [0]}, f)
        dbg = PrecisionDebugger(config_path=cfg)
        with warnings.catch_warnings(record=True) as w:
            warnings.simplefilter("always")
            dbg.start()
            got = run_all(ks)
            dbg.stop()
            dbg.step()
            dbg.close()
        msgs = [str(m.message) for m in w if str(m.message).startswith("nprobe")]
        check(len(msgs) == len(set(msgs)), "repeated warnings: %s" % msgs)
        with h5py.File(os.path.join(root, "d", "step0", "rank0", "dump.h5"), "r") as f:
            ents = {r["name"].decode(): r for r in f["entries"][...]}
    for (kname, t, _), r_row, g_row in zip(ks, ref, got):
        for (oname, _), (r, re_), (gv, ge) in zip(OPS, r_row, g_row):
            check(re_ == ge, f"{kname} {oname}: raised {ge} (without the debugger: {re_})")
            if re_ is None and ge is None:
                check(same(r, gv), f"{kname} {oname}: another result with the debugger")
    # torch.clone is each kind's first call: Torch.clone.{i}
    skipped = 0
    for i, (kname, t, _) in enumerate(ks):
        leaf = ents.get(f"Torch.clone.{i}.forward.input.0")
        holdable = not (t.is_complex() or t.layout != torch.strided)
        if not holdable:
            skipped += 1
            check(leaf is None, f"{kname}: a leaf of a kind the dump cannot hold")
            continue
        if ref[i][0][1] is not None:
            continue
        check(leaf is not None, f"{kname}: no input leaf of Torch.clone.{i}")
        exp = expected_stats(t)
        if leaf is None or exp is None:
            continue
        got_s = (float(leaf["max"]), float(leaf["min"]), float(leaf["mean"]),
                 float(leaf["norm"]))
        ok = got_s[0] == exp[0] and got_s[1] == exp[1] and all(
            math.isclose(a, b, rel_tol=1e-12, abs_tol=1e-300) for a, b in zip(got_s[2:],
                                                                              exp[2:]))
        check(ok, f"{kname}: dumped (max, min, mean, norm) {got_s}, the program saw {exp}")
    check(dbg.summary["skipped"] >= skipped,
          "summary['skipped'] %s, at least %d expected" % (dbg.summary, skipped))
    check(any("complex" in m for m in msgs) and any("sparse" in m for m in msgs),
          "no warning for complex or sparse: %s" % msgs)
    return finish()


if __name__ == "__main__":
    sys.exit(main())
