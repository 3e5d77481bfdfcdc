"""scripts/bench/torch_profile_cost.py - where the package's profile task
(nprobe.torch ProfileDebugger) spends its time, measured in one process so
that the configurations share the machine's load: the HF Llama 4x256 of
torch_dump_overhead.py (sequence 128, batch 8, AdamW, one thread), one
training step at a time under each configuration in turn, round after round:

  plain            no profiler
  torchprof        torch.profiler alone (CPU activity, nothing else)
  profile          the profile task: torch.profiler + the module ranges
  torchprof_shapes torch.profiler with record_shapes and with_flops
  profile_shapes   the profile task with "record_shapes": true

Each configuration starts its profiler, runs one untimed step, then one
timed step (CPU time, time.process_time), and stops it outside the timing;
gc.collect() before each step, so that a step does not pay for the previous
configuration's garbage (a stopped profiler leaves thousands of events).
Printed per configuration: the minimum and the median over the rounds of the
step's CPU time and their ratios to plain; on a loaded machine the minimum
is the steadier figure (a step can only be slowed by the load). Also the
parts: the aten ops and module calls in a step (from a trace) and the cost
of one module range and of one recorded op (a tight loop, minimum of 7).

usage: PYTHONPATH=python NPROBE_LIB=build/release/lib/libnprobe.so \\
       python scripts/bench/torch_profile_cost.py [--rounds R]
"""
import argparse
import gc
import json
import os
import statistics
import sys
import tempfile
import time

import torch
from torch.profiler import ProfilerActivity, profile

CONFIGS = ("plain", "torchprof", "profile", "torchprof_shapes", "profile_shapes")


def llama():
    from transformers import LlamaConfig, LlamaForCausalLM
    cfg = LlamaConfig(hidden_size=256, intermediate_size=688, num_hidden_layers=4,
                      num_attention_heads=4, num_key_value_heads=4, vocab_size=512,
                      max_position_embeddings=128)
    torch.manual_seed(0)
    return LlamaForCausalLM(cfg)


def debugger(root, shapes):
    from nprobe.torch import PrecisionDebugger
    cfg = os.path.join(root, "c.json")
    c = {"task": "profile", "dump_path": os.path.join(root, "prof")}
    if shapes:
        c["profile"] = {"record_shapes": True}
    with open(cfg, "w") as f:
        json.dump(c, f)
    return PrecisionDebugger(config_path=cfg)


def one(conf, model, step, root):
    """CPU ms of one timed step under conf (after an untimed one)."""
    d = p = None
    if conf.startswith("profile"):
        d = debugger(root, conf == "profile_shapes")
        d._ready = lambda prof: None          # no trace written: the steps' cost only
        d._prof.on_trace_ready = None
    elif conf.startswith("torchprof"):
        s = conf == "torchprof_shapes"
        p = profile(activities=[ProfilerActivity.CPU], record_shapes=s, with_flops=s)
        p.start()
    t = None
    for k in range(2):
        if d:
            d.start(model)
        gc.collect()          # the previous configuration's garbage (its profiler's events) not here
        c0 = time.process_time()
        step()
        c1 = time.process_time()
        if d:
            d.stop()
            d.step()
        elif p:
            p.step()
        t = (c1 - c0) * 1e3
    if d:
        d.close()
    elif p:
        p.stop()
    return t


def per_call(root):
    """us of one module range and of one aten op recorded (shapes off/on)."""
    lin = torch.nn.Sequential(torch.nn.Identity())   # the child gets the range (not the root)
    x = torch.ones(4)
    out = {}

    def loop(fn, n=20000):
        best = float("inf")
        for _ in range(7):
            c0 = time.process_time()
            for _ in range(n):
                fn()
            best = min(best, (time.process_time() - c0) / n * 1e6)
        return best
    out["module call (Sequential of one), plain"] = loop(lambda: lin(x))
    d = debugger(root, False)
    d._prof.on_trace_ready = None
    d.start(lin)
    out["module call (Sequential of one), profile task"] = loop(lambda: lin(x))
    out["aten::add, profile task"] = loop(lambda: torch.add(x, x))
    d.close()
    out["aten::add, plain"] = loop(lambda: torch.add(x, x))
    with profile(activities=[ProfilerActivity.CPU], record_shapes=True, with_flops=True):
        out["aten::add, torch.profiler record_shapes"] = loop(lambda: torch.add(x, x))
    w = torch.ones(16, 16)
    out["aten::linear, plain"] = loop(lambda: torch.nn.functional.linear(x.expand(16, 4)[:, :1].expand(16, 16), w))
    with profile(activities=[ProfilerActivity.CPU]):
        out["aten::linear, torch.profiler"] = loop(
            lambda: torch.nn.functional.linear(x.expand(16, 4)[:, :1].expand(16, 16), w))
    with profile(activities=[ProfilerActivity.CPU], record_shapes=True, with_flops=True):
        out["aten::linear, torch.profiler record_shapes"] = loop(
            lambda: torch.nn.functional.linear(x.expand(16, 4)[:, :1].expand(16, 16), w))
    return out


def counts(model, step):
    with profile(activities=[ProfilerActivity.CPU]) as p:
        step()
    ev = p.events()
    return sum(1 for e in ev if e.name.startswith("aten::")), len(list(model.modules())) - 1


def main():
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--rounds", type=int, default=9)
    a = ap.parse_args()
    torch.set_num_threads(1)
    model = llama()
    opt = torch.optim.AdamW(model.parameters(), lr=1e-3)
    idx = torch.randint(0, 512, (8, 128), generator=torch.Generator().manual_seed(1))

    def step():
        opt.zero_grad(set_to_none=True)
        model(input_ids=idx, labels=idx).loss.backward()
        opt.step()
    res = {c: [] for c in CONFIGS}
    with tempfile.TemporaryDirectory() as root:
        step()
        for r in range(a.rounds):
            for c in CONFIGS:
                res[c].append(one(c, model, step, root))
        parts = per_call(root)
    n_ops, n_mod = counts(model, step)
    base_min, base_med = min(res["plain"]), statistics.median(res["plain"])
    print(f"HF Llama 4x256, one thread, {a.rounds} rounds; {n_ops} aten ops and {n_mod} module "
          f"calls (forward) per step")
    for c in CONFIGS:
        v = res[c]
        print(f"  {c:<17} cpu min {min(v):8.2f} ms x{min(v) / base_min:.3f}   median "
              f"{statistics.median(v):8.2f} ms x{statistics.median(v) / base_med:.3f}")
    for ours, ref in (("profile", "torchprof"), ("profile_shapes", "torchprof_shapes")):
        print(f"  {ours} / {ref}: min x{min(res[ours]) / min(res[ref]):.3f}")
    for k, v in parts.items():
        print(f"  {k:<40} {v:7.2f} us")


if __name__ == "__main__":
    main()
