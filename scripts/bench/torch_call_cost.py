#!/usr/bin/env python3
"""What one captured API call costs nprobe.torch's PrecisionDebugger, piece by piece.

Issue 23 names two suspects for the package's statistics overhead: the C
call made per hooked call (one ctypes crossing per call: np_probe_dump_call)
and the backward hooks put on each call (an identity autograd Function on
its inputs, a tensor hook per output). This times, on 4x4 float32 tensors
(so the statistics themselves cost nothing), in thread CPU time, best of
--repeats rounds of --calls calls, all variants interleaved in one process:

  crossing     np_probe_dump_call with no leaves (the call's row only)
  ctypes       a two-argument ctypes call (np_probe_selects): the crossing alone
  bwin         _BwIn.apply on one tensor (the identity Function of a call's inputs)
  out_hook     Tensor.register_hook on a fresh output (net of making the output)
  nograd       a dumped torch.mul under no_grad, net of the undumped call
  grad         a dumped torch.add on a grad-requiring chain, forward, net
  grad_bw      the same chain's backward, per call, net (the backward rows)
  inplace      a dumped Tensor.mul_ under no_grad, net

    PYTHONPATH=python NPROBE_LIB=build/release/lib/libnprobe.so \\
      scripts/bench/torch_call_cost.py --calls 500 --repeats 7

Multiply by a model's calls per step (HF Llama 4x256: ~860 dumped calls,
~460 with gradients, ~270 in-place) to weigh each piece against a step.
"""
import argparse
import json
import os
import shutil
import tempfile
import time


def main():
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--calls", type=int, default=500)
    ap.add_argument("--repeats", type=int, default=7)
    a = ap.parse_args()
    import torch
    from nprobe import _lib
    from nprobe.torch import PrecisionDebugger
    import nprobe.torch.debugger as D
    torch.set_num_threads(1)
    out = tempfile.mkdtemp(prefix="nprobe_call_cost_")
    try:
        cfg = os.path.join(out, "c.json")
        with open(cfg, "w") as f:
            json.dump({"task": "statistics", "dump_path": os.path.join(out, "d"), "level": "L1"}, f)
        d = PrecisionDebugger(config_path=cfg)
        n = a.calls
        x0 = torch.randn(4, 4, requires_grad=True)
        b, p, m = torch.randn(4, 4), torch.randn(4, 4), torch.randn(4, 4)
        y = x0 * 2
        rec = D._Rec(d, "Functional.add.0.backward", None, None)
        names = [f"Functional.add.{i}.forward".encode() for i in range(n)]

        def crossing(r):
            pp, ad, rr, e = d._p, d._addr, d._refref, d._eref
            suffix = b".r%d" % r
            for i in range(n):
                _lib.probe_dump_call(pp, names[i] + suffix, b"Module.x.X.forward.0", None, ad, 0,
                                     b"", rr, e)

        def ctypes_only(r):
            pp = d._p
            for _ in range(n):
                _lib.probe_selects(pp, 0)

        def bwin(r):
            for _ in range(n):
                D._BwIn.apply(rec, y)

        def fresh(r):
            for _ in range(n):
                y * 1

        def out_hook(r):
            for _ in range(n):
                (y * 1).register_hook(_noop)

        def nograd(r):
            with torch.no_grad():
                for _ in range(n):
                    torch.mul(p, m)

        def grad(r):
            x = x0
            for _ in range(n):
                x = torch.add(x, b)
            return x

        def inplace(r):
            with torch.no_grad():
                for _ in range(n):
                    p.mul_(1.0)

        def timed(fn, r, on):
            if on:
                d.start()
                d._begin() if not d._begun else None
            t0 = time.thread_time_ns()
            res = fn(r)
            t1 = time.thread_time_ns()
            bw = 0
            if res is not None:
                res.sum().backward()
                bw = time.thread_time_ns() - t1
            if on:
                d.stop()
                d.step()
            return (t1 - t0) / n / 1e3, bw / n / 1e3

        best = {}

        def keep(k, v):
            best[k] = min(best.get(k, float("inf")), v)
        for r in range(a.repeats):
            keep("crossing", timed(crossing, r, True)[0])
            keep("ctypes", timed(ctypes_only, r, False)[0])
            keep("bwin", timed(bwin, r, False)[0])
            keep("fresh", timed(fresh, r, False)[0])
            keep("out_hook_raw", timed(out_hook, r, False)[0])
            for name, fn in (("nograd", nograd), ("inplace", inplace), ("grad", grad)):
                fw0, bw0 = timed(fn, r, False)
                fw1, bw1 = timed(fn, r, True)
                keep(name + "_plain", fw0)
                keep(name + "_dumped", fw1)
                if name == "grad":
                    keep("grad_bw_plain", bw0)
                    keep("grad_bw_dumped", bw1)
        d.close()
    finally:
        shutil.rmtree(out, ignore_errors=True)
    print(f"us per call, thread CPU, best of {a.repeats} rounds of {n} calls (4x4 float32)")
    print(f"  crossing   {best['crossing']:7.2f}  np_probe_dump_call, no leaves (the call row)")
    print(f"  ctypes     {best['ctypes']:7.2f}  a bare two-argument ctypes call")
    print(f"  bwin       {best['bwin']:7.2f}  _BwIn.apply, one input")
    print(f"  out_hook   {best['out_hook_raw'] - best['fresh']:7.2f}  Tensor.register_hook on an output")
    for k in ("nograd", "grad", "grad_bw", "inplace"):
        print(f"  {k:<10} {best[k + '_dumped'] - best[k + '_plain']:7.2f}  dumped minus plain "
              f"({best[k + '_plain']:.2f} plain)")


def _noop(g):
    return None


if __name__ == "__main__":
    main()
