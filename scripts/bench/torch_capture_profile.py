#!/usr/bin/env python3
"""Where a dumped step's CPU time goes: the capture in Python against the C probe.

Runs torch_dump_overhead.py's model (HF Llama by default) in one process with
nprobe.torch.PrecisionDebugger, one warm-up step, then `--steps` measured
steps, and prints per step the thread CPU time (time.thread_time_ns, so the
figures hold on a loaded machine better than wall time) spent inside the C
probe's entry points and inside the capture's main functions (inclusive:
_emit contains _emit_packed, which contains _pack_tensors and the C call).
Each timed function pays about 1 us of timing per call. --cprofile prints
cProfile's table instead (its own overhead inflates the Python side ~2x).

    PYTHONPATH=python NPROBE_LIB=build/release/lib/libnprobe.so \\
      scripts/bench/torch_capture_profile.py --model llama --task statistics --steps 3
"""
import argparse
import cProfile
import json
import os
import pstats
import shutil
import sys
import tempfile
import time

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
from torch_dump_overhead import SIZES, build_model  # noqa: E402

C_ENTRIES = ("probe_dump_call", "probe_dump_view", "probe_call_begin", "probe_dump_scalar")
METHODS = ("_emit", "_emit_packed", "_open_call", "_safe_leaf", "_api_call", "_alias_call",
           "_inplace_call", "_bw_emit")
FUNCTIONS = ("_pack_tensors", "_hook_outputs", "_flat_tensors", "_replace")


def timed(acc, obj, name, key):
    f = getattr(obj, name)

    def w(*a, **k):
        t0 = time.thread_time_ns()
        try:
            return f(*a, **k)
        finally:
            acc[key] = acc.get(key, 0) + time.thread_time_ns() - t0
    setattr(obj, name, w)


def main():
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--model", choices=sorted(SIZES), default="llama")
    ap.add_argument("--task", choices=("plain", "statistics", "md5"), default="statistics")
    ap.add_argument("--steps", type=int, default=3)
    ap.add_argument("--cprofile", action="store_true")
    a = ap.parse_args()
    import torch
    s = SIZES[a.model]
    torch.set_num_threads(1)
    torch.manual_seed(0)
    model, loss_of = build_model(a.model, s)
    opt = torch.optim.AdamW(model.parameters(), lr=3e-3, betas=(0.9, 0.95), weight_decay=0.01)
    out = tempfile.mkdtemp(prefix="nprobe_capture_profile_")
    d = None
    if a.task != "plain":
        from nprobe.torch import PrecisionDebugger
        cfg = os.path.join(out, "config.json")
        with open(cfg, "w") as f:
            json.dump({"task": a.task, "dump_path": os.path.join(out, "dump"), "level": "L1"}, f)
        d = PrecisionDebugger(config_path=cfg)

    def step():
        idx = torch.randint(0, s["vocab"], (s["batch"], s["context"]))
        tgt = torch.randint(0, s["vocab"], (s["batch"], s["context"]))
        if d:
            d.start(model)
        opt.zero_grad(set_to_none=True)
        loss_of(model, idx, tgt).backward()
        torch.nn.utils.clip_grad_norm_(model.parameters(), 1.0)
        opt.step()
        if d:
            d.stop()
            d.step()

    step()
    acc = {}
    if d and not a.cprofile:
        from nprobe import _lib
        import nprobe.torch.debugger as dbg
        for n in C_ENTRIES:
            timed(acc, _lib, n, "C " + n)
        for n in METHODS:
            timed(acc, dbg.PrecisionDebugger, n, n)
        for n in FUNCTIONS:
            timed(acc, dbg, n, n)
        timed(acc, dbg._BwIn, "apply", "_BwIn.apply")
    pr = cProfile.Profile() if a.cprofile else None
    cpu = []
    for _ in range(a.steps):
        if pr:
            pr.enable()
        c0 = time.process_time()
        step()
        cpu.append((time.process_time() - c0) * 1000.0)
        if pr:
            pr.disable()
    if d:
        d.close()
    shutil.rmtree(out, ignore_errors=True)
    print(f"{a.task}: process cpu ms per step {', '.join(f'{c:.1f}' for c in cpu)}")
    for k, v in sorted(acc.items(), key=lambda kv: -kv[1]):
        print(f"  {k:24s} {v / 1e6 / a.steps:8.1f} ms/step (thread cpu, inclusive)")
    if pr:
        pstats.Stats(pr).sort_stats("tottime").print_stats(35)


if __name__ == "__main__":
    main()
