"""scripts/bench/torch_profile_cost.py - where the package's profile task
(nprobe.torch ProfileDebugger) spends its time, measured in one process so
that the configurations share the machine's load: the HF Llama 4x256 of
torch_dump_overhead.py (sequence 128, batch 8, AdamW, one thread; or a
smaller one: --layers, --hidden, --seq, --batch), one training step at a
time under each configuration in turn, round after round:

  plain               no profiler
  torchprof           torch.profiler alone (CPU activity, nothing else)
  profile             the profile task's default: nprobe times every API
                      call, its backward, every module call and its
                      backward itself (the package's wrappers, no
                      torch.profiler), samples the resident memory at each
                      module boundary, and writes
                      each step's slices into the trace at step()
  profile_torch       the profile task with "torch_profiler": true:
                      torch.profiler + the module ranges
  torchprof_shapes    torch.profiler with record_shapes and with_flops
  profile_shapes      the default with "record_shapes": true (Input Dims, FLOPs)
  profile_torch_shapes  "torch_profiler" and "record_shapes"

Each configuration starts its profiler, runs one untimed step, then one
timed step (CPU time, time.process_time, and wall time, time.perf_counter)
with the profiler's own step() (the debugger's stop() and step(): the
default writes the step's slices there; torch.profiler's step()), and
stops it outside the timing (torch.profiler's trace is never exported
here: its export is not in any figure);
gc.collect() before each step, so that a step does not pay for the previous
configuration's garbage (a stopped profiler leaves thousands of events).
Also the step's user-space instructions retired, counted by the CPU
(perf_event_open of PERF_COUNT_HW_INSTRUCTIONS on the stepping thread,
the one thread torch computes on here; the kernel's part and the
profiler's other threads are not in it): unlike CPU time the count hardly
moves with the machine's load, so its ratio is the robust figure where
the machine is shared (printed "instr"; "not counted" where the kernel or
a virtual machine does not expose the counter).
Printed per configuration: the minimum and the median over the rounds of the
step's CPU and wall time and their ratios to plain, and the median of the
per-round ratios (each round's configurations run back to back, so they
share that round's load) with its 95 % interval (a bootstrap of the
rounds, 2000 resamples, seed 0: the figure's uncertainty on this
machine); on a loaded machine the minimum and the per-round ratios are the
steadier figures (a step can only be slowed by the load, and a round's
configurations share it). Also the
parts: the aten ops and module calls in a step (from a trace) and the cost
of one module range and of one recorded op (a tight loop, minimum of 7).

usage: PYTHONPATH=python NPROBE_LIB=build/release/lib/libnprobe.so \\
       python scripts/bench/torch_profile_cost.py [--rounds R] [--configs plain,profile]
              [--layers L --hidden H --seq S --batch B] [--no-parts]
(the cheap run of docs/PERFORMANCE.md: --layers 2 --hidden 64 --seq 32
--batch 2 --configs plain,profile --rounds 15 --no-parts, a few seconds)
"""
import argparse
import ctypes
import gc
import json
import os
import platform
import statistics
import struct
import sys
import tempfile
import time

import torch
from torch.profiler import ProfilerActivity, profile

CONFIGS = ("plain", "torchprof", "profile", "profile_torch", "torchprof_shapes", "profile_shapes",
           "profile_torch_shapes")


def llama(layers=4, hidden=256, seq=128):
    from transformers import LlamaConfig, LlamaForCausalLM
    cfg = LlamaConfig(hidden_size=hidden, intermediate_size=hidden * 688 // 256,
                      num_hidden_layers=layers, num_attention_heads=4, num_key_value_heads=4,
                      vocab_size=512, max_position_embeddings=max(seq, 128))
    torch.manual_seed(0)
    return LlamaForCausalLM(cfg)


def debugger(root, shapes, torch_profiler=False):
    from nprobe.torch import PrecisionDebugger
    cfg = os.path.join(root, "c.json")
    c = {"task": "profile", "dump_path": os.path.join(root, "prof"),
         "profile": {"record_shapes": shapes, "torch_profiler": torch_profiler}}
    with open(cfg, "w") as f:
        json.dump(c, f)
    return PrecisionDebugger(config_path=cfg)


class Instructions:
    """User-space instructions retired by this thread: a perf_event_open
    counter (PERF_TYPE_HARDWARE, PERF_COUNT_HW_INSTRUCTIONS, kernel and
    hypervisor excluded, which perf_event_paranoid 2 allows). fd None and
    `error` set where it cannot be opened."""

    NR = {"x86_64": 298, "aarch64": 241}

    def __init__(self):
        self.fd, self.error = None, None
        nr = self.NR.get(platform.machine())
        if nr is None:
            self.error = "no perf_event_open number for " + platform.machine()
            return
        libc = ctypes.CDLL(None, use_errno=True)
        # struct perf_event_attr as of PERF_ATTR_SIZE_VER0 (64 bytes): type, size,
        # config, sample_period, sample_type, read_format, the flag bits (disabled 0,
        # exclude_kernel 5, exclude_hv 6), wakeup_events, bp_type, config1
        attr = ctypes.create_string_buffer(
            struct.pack("=IIQQQQQIIQ", 0, 64, 1, 0, 0, 0, 1 | 1 << 5 | 1 << 6, 0, 0, 0), 64)
        fd = libc.syscall(nr, attr, 0, -1, -1, 0)
        if fd < 0:
            self.error = "perf_event_open: " + os.strerror(ctypes.get_errno())
            return
        libc.ioctl(fd, 0x2400, 0)  # PERF_EVENT_IOC_ENABLE
        self.fd = fd

    def read(self):
        return struct.unpack("=Q", os.read(self.fd, 8))[0] if self.fd is not None else 0


COUNTER = None
LOAD0 = None


def median_ci(r, n=2000):
    """The 95 % bootstrap interval of the median of r (seed 0: the same every run)."""
    import random
    g = random.Random(0)
    m = sorted(statistics.median(g.choices(r, k=len(r))) for _ in range(n))
    return m[int(0.025 * n)], m[int(0.975 * n) - 1]


def one(conf, model, step, root):
    """(CPU ms, wall ms, instructions) of one timed step under conf (after an untimed one)."""
    d = p = None
    if conf.startswith("profile"):
        d = debugger(root, conf.endswith("_shapes"), conf.startswith("profile_torch"))
        if d._prof is not None:
            d._ready = lambda prof: None          # no trace exported: the steps' cost only
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
        i0, s0 = COUNTER.read(), os.times().system
        c0, w0 = time.process_time(), time.perf_counter()
        step()
        if d:
            d.stop()
            d.step()
        elif p:
            p.step()
        c1, w1 = time.process_time(), time.perf_counter()
        i1, s1 = COUNTER.read(), os.times().system
        t = ((c1 - c0) * 1e3, (w1 - w0) * 1e3, i1 - i0, (s1 - s0) * 1e3)
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
    add = getattr(torch.add, "_nprobe_orig", torch.add)
    out["torch.add, unwrapped (no nprobe)"] = loop(lambda: add(x, x))
    out["torch.add, plain (nprobe's wrapper idle)"] = loop(lambda: torch.add(x, x))
    d = debugger(root, False, True)
    d._prof.on_trace_ready = None
    d.start(lin)
    out["module call (Sequential of one), profile_torch"] = loop(lambda: lin(x))
    out["torch.add, profile_torch"] = loop(lambda: torch.add(x, x))
    d.close()
    d = debugger(root, False)
    d.start(lin)
    out["module call (Sequential of one), profile (nprobe)"] = loop(lambda: lin(x))
    out["torch.add, profile (nprobe)"] = loop(lambda: torch.add(x, x))
    d._ev.clear()
    d.close()
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


def timed_calls(model, step, root):
    """(API calls, their backwards, those over several autograd nodes, module
    calls, module backwards) the default profile times in a step."""
    from nprobe.torch import profile as pr
    d = debugger(root, False)
    d.start(model)
    step()
    d.stop()
    kinds = [e[0] for e in d._ev]
    multi = sum(1 for e in d._ev if e[0] == pr._BWD and isinstance(e, list))
    d.step()
    d.close()
    return (kinds.count(pr._API), kinds.count(pr._BWD), multi, kinds.count(pr._MOD),
            kinds.count(pr._MBWD))


def main():
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--rounds", type=int, default=9)
    ap.add_argument("--configs", default=",".join(CONFIGS))
    ap.add_argument("--layers", type=int, default=4)
    ap.add_argument("--hidden", type=int, default=256)
    ap.add_argument("--seq", type=int, default=128)
    ap.add_argument("--batch", type=int, default=8)
    ap.add_argument("--no-parts", action="store_true", help="skip the per-call loops")
    a = ap.parse_args()
    configs = a.configs.split(",")
    if "plain" not in configs or any(c not in CONFIGS for c in configs):
        ap.error(f"--configs: plain and some of {','.join(CONFIGS)}")
    global LOAD0
    LOAD0 = " ".join("%.2f" % x for x in os.getloadavg())
    torch.set_num_threads(1)
    global COUNTER
    COUNTER = Instructions()
    model = llama(a.layers, a.hidden, a.seq)
    opt = torch.optim.AdamW(model.parameters(), lr=1e-3)
    idx = torch.randint(0, 512, (a.batch, a.seq), generator=torch.Generator().manual_seed(1))

    def step():
        opt.zero_grad(set_to_none=True)
        model(input_ids=idx, labels=idx).loss.backward()
        opt.step()
    res = {c: [] for c in configs}
    if any(c.startswith("profile") for c in configs):
        # the package's API wrappers in place from the first round on, idle
        # outside a profiled step (as in a program that profiles some
        # steps): every configuration's step goes through them alike; their
        # idle cost per call is among the parts
        from nprobe.torch import debugger as _dbg
        _dbg._install()
    with tempfile.TemporaryDirectory() as root:
        step()
        for r in range(a.rounds):
            for c in configs:
                res[c].append(one(c, model, step, root))
        parts = {} if a.no_parts else per_call(root)
        calls = timed_calls(model, step, root) if "profile" in configs else None
    n_ops, n_mod = counts(model, step)
    print(f"HF Llama {a.layers}x{a.hidden}, sequence {a.seq}, batch {a.batch}, one thread, "
          f"{a.rounds} rounds; {n_ops} aten ops and {n_mod} module calls (forward) per step")
    if calls:
        print("  the default profile times per step %d API calls, %d of their backwards (%d "
              "over several autograd nodes), %d module calls, %d module backwards" % calls)
    print("  load average before / after: %s / %s" % (LOAD0, " ".join(
        "%.2f" % x for x in os.getloadavg())))
    for what, w in (("cpu", 0), ("wall", 1), ("instr", 2)):
        if w == 2 and COUNTER.fd is None:
            print(f"  instr not counted ({COUNTER.error})")
            continue
        base = [t[w] for t in res["plain"]]
        unit, scale = ("G", 1e-9) if w == 2 else ("ms", 1)
        for c in configs:
            v = [t[w] for t in res[c]]
            rr = [x / y for x, y in zip(v, base)]
            lo, hi = median_ci(rr)
            print(f"  {what:<5} {c:<17} min {min(v) * scale:8.3f} {unit} x{min(v) / min(base):.4f}   median "
                  f"{statistics.median(v) * scale:8.3f} {unit} "
                  f"x{statistics.median(v) / statistics.median(base):.4f}"
                  f"   median of the rounds' ratios x{statistics.median(rr):.4f} (95 % x{lo:.4f}-x{hi:.4f})")
    print("  cpu time in the kernel (system; page faults of fresh memory among it), median: " +
          ", ".join(f"{c} {statistics.median(t[3] for t in res[c]):.1f} ms" for c in configs))
    for ours, ref in (("profile_torch", "torchprof"), ("profile_torch_shapes", "torchprof_shapes"),
                      ("profile", "torchprof")):
        if ours in res and ref in res:
            print(f"  {ours} / {ref}: cpu min x{min(t[0] for t in res[ours]) / min(t[0] for t in res[ref]):.3f}")
    for k, v in parts.items():
        print(f"  {k:<40} {v:7.2f} us")


if __name__ == "__main__":
    main()
