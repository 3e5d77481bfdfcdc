"""tests/python/test_torch_profile.py - the profile task through the PyTorch
package: PrecisionDebugger with "task": "profile" (python/nprobe/torch/profile.py)
on a tiny MLP trained with AdamW, checked against answers computed here:
- the schedule (skip_first 1, wait 1, warmup 1, active 2, repeat 1 over 7
  steps) writes one trace holding ProfilerStep#3 and #4 only, the steps
  torch.profiler.schedule's definition records (computed here);
- each recorded step has one slice per module call named as the dump names
  it (Module.fc1.Linear.forward.0, ...), and the aten::linear calls lie
  inside their module's slice;
- aten::addmm's Input Dims are the layers' shapes (record_shapes on; torch
  2.13 writes no args.flops for CPU ops, so nprobe has none to read);
- without record_shapes (the default) no op has Input Dims, and a module
  called 6 times in a step has 6 slices numbered 0..5 in call order;
- `nprobe profile` reads the trace (exit 0) and its aten::linear count and
  total equal the events' float64 sum here;
- the msprobe-style calls on the class (PrecisionDebugger.step()) reach it;
- a bad schedule key raises ValueError naming it;
- the default (nprobe's own timing, no torch.profiler): the MLP's calls
  worked by hand with their nesting, module backwards included, the same
  calls as the dump task sees, nprobe profile's op table counts
  (nprobe_mode); a model two modules deep, its forward and backward
  nesting worked by hand and equal to the dump's (nested); a composite
  op's backward (F.cross_entropy: two autograd nodes) holding both nodes,
  by the test's own node hooks and by torch.profiler (composite); the
  Memory counter over a module keeping 64 MiB, and torch's allocator
  event with profile_memory (memory); a collective's slice with its bytes
  (collective)."""
import csv
import glob
import json
import os
import subprocess
import sys
import tempfile
import time

import torch

sys.path.insert(0, os.path.join(os.path.dirname(os.path.abspath(__file__)), ".."))
from nptest import check, finish, run  # noqa: E402
from nprobe.torch import PrecisionDebugger  # noqa: E402

B, IN, HID, OUT = 16, 32, 64, 8


class MLP(torch.nn.Module):
    def __init__(self):
        super().__init__()
        self.fc1 = torch.nn.Linear(IN, HID)
        self.act = torch.nn.GELU()
        self.fc2 = torch.nn.Linear(HID, OUT)

    def forward(self, x):
        return self.fc2(self.act(self.fc1(x)))


def train_steps(d, model, opt, steps):
    """steps training steps of model on random batches, each between d's
    start() and stop(), then d.step() (d: a debugger, or the class: msprobe's
    class-level calls)"""
    for _ in range(steps):
        d.start(model)
        loss = model(torch.randn(B, IN)).square().mean()
        loss.backward()
        opt.step()
        opt.zero_grad()
        d.stop()
        d.step()


def torch_schedule_steps(skip_first, wait, warmup, active, repeat, steps):
    out = []
    for s in range(skip_first, steps):
        k = s - skip_first
        cycle = wait + warmup + active
        if (repeat == 0 or k // cycle < repeat) and k % cycle >= wait + warmup:
            out.append(s)
    return out


def slices(trace):
    """The trace's complete events, each with its start and end in whole
    nanoseconds (t0, t1: ts and dur are microseconds with three decimals)."""
    with open(trace) as f:
        xs = [e for e in json.load(f)["traceEvents"] if e.get("ph") == "X"]
    for e in xs:
        e["t0"] = round(float(e["ts"]) * 1000)
        e["t1"] = e["t0"] + round(float(e["dur"]) * 1000)
    return xs


def parents(xs):
    """id(slice) -> the name of its innermost enclosing slice on its thread
    (None at the top), by the times alone; a slice that overlaps another
    without nesting in it is a failure (checked here)."""
    out = {}
    for tid in {e["tid"] for e in xs}:
        stack = []
        for e in sorted((e for e in xs if e["tid"] == tid), key=lambda e: (e["t0"], e["t0"] - e["t1"])):
            while stack and stack[-1]["t1"] <= e["t0"]:
                stack.pop()
            if stack:
                check(stack[-1]["t0"] <= e["t0"] and e["t1"] <= stack[-1]["t1"],
                      "%s [%d, %d] overlaps %s [%d, %d] without nesting in it" % (
                          e["name"], e["t0"], e["t1"], stack[-1]["name"], stack[-1]["t0"],
                          stack[-1]["t1"]))
            out[id(e)] = stack[-1]["name"] if stack else None
            stack.append(e)
    return out


def dump_calls(root, model_state, steps, record, make=None, loop=None, sub="dump"):
    """The calls the dump task (statistics, level mix) sees for the same
    model and loop, per recorded step: {step: {call: parent module}} from
    `nprobe ls --calls` (seq, kind, call, parent, callsite), parameter
    gradients left out (the profile does not time them)."""
    model = (make or MLP)()
    model.load_state_dict(model_state)
    opt = torch.optim.AdamW(model.parameters(), lr=1e-3)
    cfg = os.path.join(root, "d.json")
    with open(cfg, "w") as f:
        json.dump({"task": "statistics", "level": "mix", "step": record,
                   "dump_path": os.path.join(root, sub)}, f)
    dbg = PrecisionDebugger(config_path=cfg)
    torch.manual_seed(1)
    (loop or train_steps)(dbg, model, opt, steps)
    dbg.close()
    out = {}
    for s in record:
        rc, so, se = run(["ls", "--calls", os.path.join(root, sub, "step%d" % s)], root)
        check(rc == 0, "nprobe ls --calls step %d: exit %d %s" % (s, rc, se))
        calls = {}
        for line in so.splitlines():
            f = line.split()
            if len(f) < 3 or not f[0].isdigit():
                continue
            name = f[2]
            if f[1] == "module" and ".forward." not in name and ".backward." not in name:
                continue      # its parameters' gradients (Module.fc1.Linear)
            calls[name] = f[3] if len(f) > 3 and f[3].startswith("Module.") else None
        out[s] = calls
    return out


# the tiny MLP's step, worked by hand: each call and the call enclosing it
# (None: none, the ProfilerStep); the optimizer's calls come on top. Each
# module's backward encloses its call's backward: fc2's from the gradient
# reaching its output (after square's backward) to its input's gradient
# done (its _ModIn), then act's, then fc1's (its input x needs no
# gradient: it ends with its linear's backward)
MLP_CALLS = {
    "Module.fc1.Linear.forward.0": None, "Functional.linear.0.forward": "Module.fc1.Linear.forward.0",
    "Module.act.GELU.forward.0": None, "Functional.gelu.0.forward": "Module.act.GELU.forward.0",
    "Module.fc2.Linear.forward.0": None, "Functional.linear.1.forward": "Module.fc2.Linear.forward.0",
    "Tensor.square.0.forward": None, "Tensor.mean.0.forward": None,
    "Tensor.mean.0.backward": None, "Tensor.square.0.backward": None,
    "Module.fc2.Linear.backward.0": None,
    "Functional.linear.1.backward": "Module.fc2.Linear.backward.0",
    "Module.act.GELU.backward.0": None,
    "Functional.gelu.0.backward": "Module.act.GELU.backward.0",
    "Module.fc1.Linear.backward.0": None,
    "Functional.linear.0.backward": "Module.fc1.Linear.backward.0"}
MLP_ORDER = ["Module.fc1.Linear.forward.0", "Functional.linear.0.forward", "Module.act.GELU.forward.0",
             "Functional.gelu.0.forward", "Module.fc2.Linear.forward.0", "Functional.linear.1.forward",
             "Tensor.square.0.forward", "Tensor.mean.0.forward", "Tensor.mean.0.backward",
             "Tensor.square.0.backward", "Module.fc2.Linear.backward.0",
             "Functional.linear.1.backward", "Module.act.GELU.backward.0",
             "Functional.gelu.0.backward", "Module.fc1.Linear.backward.0",
             "Functional.linear.0.backward"]


def nprobe_mode(root, cfg):
    """The default profile (nprobe's own timing, no torch.profiler) against
    the hand-worked MLP step and against the dump task's calls."""
    sched = dict(skip_first=1, wait=1, warmup=1, active=2, repeat=1)
    steps = 7
    want = torch_schedule_steps(steps=steps, **sched)
    with open(cfg, "w") as f:
        json.dump({"task": "profile", "dump_path": os.path.join(root, "p3"),
                   "profile": dict(sched, record_shapes=True)}, f)
    torch.manual_seed(2)
    model = MLP()
    state = {k: v.clone() for k, v in model.state_dict().items()}
    opt = torch.optim.AdamW(model.parameters(), lr=1e-3)
    dbg = PrecisionDebugger(config_path=cfg)
    torch.manual_seed(1)
    train_steps(PrecisionDebugger, model, opt, steps)
    dbg.close()
    traces = sorted(glob.glob(os.path.join(root, "p3", "*")))
    check([os.path.basename(t) for t in traces] == ["rank0.step%d.trace.json" % want[-1]],
          "nprobe mode: traces %s, torch's schedule records %s" % (traces, want))
    if not traces:
        return
    xs = slices(traces[0])
    par = parents(xs)
    got = sorted(int(e["name"].split("#")[1]) for e in xs if e["name"].startswith("ProfilerStep#"))
    check(got == want, "nprobe mode: recorded steps %s, torch's schedule %s" % (got, want))
    check(all(e["t1"] >= e["t0"] for e in xs), "a slice of negative duration")
    dumped = dump_calls(root, state, steps, want)
    for s in want:
        mine = [e for e in xs if e["args"]["step"] == s and not e["name"].startswith("ProfilerStep#")]
        names = [e["name"] for e in sorted(mine, key=lambda e: e["t0"])]
        check(len(names) == len(set(names)), "step %d: a call with two slices: %s" % (
            s, sorted(n for n in names if names.count(n) > 1)))
        top = "ProfilerStep#%d" % s
        pm = {e["name"]: par[id(e)] for e in mine}
        hand = {n: pm.get(n, "missing") for n in MLP_CALLS}
        check(hand == {n: p or top for n, p in MLP_CALLS.items()},
              "step %d: the MLP's calls and their enclosing calls %s" % (s, hand))
        check([n for n in names if n in MLP_CALLS] == MLP_ORDER,
              "step %d: the MLP's calls in start order %s" % (s, [n for n in names if n in MLP_CALLS]))
        rest = {n: p for n, p in pm.items() if n not in MLP_CALLS}
        check(rest and all(p == top for p in rest.values()),
              "step %d: the optimizer's calls at the top of the step: %s" % (s, rest))
        # the same calls as the dump task sees (module backwards among them),
        # each enclosed by the module (forward or backward) the dump names its parent
        same_as_dump(s, pm, dumped.get(s, {}), top)
    lin = [e for e in xs if e["name"] == "Functional.linear.0.forward"]
    check(len(lin) == len(want) and all(
        e["args"].get("Input Dims") == [[B, IN], [HID, IN], [HID]] and
        e["args"].get("flops") == 2 * B * IN * HID for e in lin),
        "record_shapes: Functional.linear.0.forward's args %s" % [e["args"] for e in lin])
    # the op table (nprobe profile's profile_ops.csv): each call once a recorded step
    rc, so, se = run(["profile", traces[0], "-o", os.path.join(root, "rep3")], root)
    check(rc == 0, "nprobe profile (nprobe mode): exit %d %s" % (rc, se))
    with open(os.path.join(root, "rep3", "profile_ops.csv")) as f:
        rows = {r["name"]: r for r in csv.DictReader(f)}
    calls = {e["name"] for e in xs if not e["name"].startswith("ProfilerStep#")}
    bad = [(n, rows[n]["count"] if n in rows else None) for n in sorted(calls)
           if n not in rows or int(rows[n]["count"]) != len(want) or abs(
               float(rows[n]["total_us"]) - sum(float(e["dur"]) for e in xs if e["name"] == n)) > 1e-6]
    check(not bad and len(calls) == len(set(dumped.get(want[0], {}))),
          "op table: %d calls, %d in the dump's step; count or total wrong for %s" % (
              len(calls), len(dumped.get(want[0], {})), bad[:8]))
    print("nprobe mode: %d calls a step, nested as the dump's parents, op table counts %d each"
          % (len(calls), len(want)))


def same_as_dump(s, pm, d, top):
    """The trace's slices of step s ({name: enclosing slice}) are the dump's
    calls, module backwards included, each enclosed by the dump's parent."""
    check(set(pm) == set(d), "step %d: slices not in the dump %s, dump calls not timed %s" % (
        s, sorted(set(pm) - set(d))[:8], sorted(set(d) - set(pm))[:8]))
    check(any(".backward." in n and n.startswith("Module.") for n in d),
          "step %d: no module backward in the dump" % s)
    bad = {n: (pm.get(n), p or top) for n, p in d.items() if pm.get(n) != (p or top)}
    check(not bad, "step %d: enclosing call in the trace vs the dump's parent: %s" % (s, bad))


class Block(torch.nn.Module):
    def __init__(self):
        super().__init__()
        self.lin = torch.nn.Linear(IN, IN)
        self.act = torch.nn.GELU()

    def forward(self, x):
        return self.act(self.lin(x))


class Net(torch.nn.Module):
    def __init__(self):
        super().__init__()
        self.blk1 = Block()
        self.blk2 = Block()

    def forward(self, x):
        return self.blk2(self.blk1(x))


def net_steps(d, model, opt, steps):
    """train_steps for Net, with F.cross_entropy (a composite: log_softmax
    and nll_loss, two autograd nodes) as the loss"""
    for _ in range(steps):
        d.start(model)
        x, tgt = torch.randn(B, IN), torch.randint(0, IN, (B,))
        torch.nn.functional.cross_entropy(model(x), tgt).backward()
        opt.step()
        opt.zero_grad()
        d.stop()
        d.step()


# Net's step worked by hand (the optimizer's calls left out): two levels of
# modules, forward and backward. Each block's backward begins with its
# act's (the two share their output tensor) and encloses its lin's; blk1's
# input x needs no gradient: blk1 and blk1.lin end with linear.0's backward
NET_CALLS = {
    "Module.blk1.Block.forward.0": None,
    "Module.blk1.lin.Linear.forward.0": "Module.blk1.Block.forward.0",
    "Functional.linear.0.forward": "Module.blk1.lin.Linear.forward.0",
    "Module.blk1.act.GELU.forward.0": "Module.blk1.Block.forward.0",
    "Functional.gelu.0.forward": "Module.blk1.act.GELU.forward.0",
    "Module.blk2.Block.forward.0": None,
    "Module.blk2.lin.Linear.forward.0": "Module.blk2.Block.forward.0",
    "Functional.linear.1.forward": "Module.blk2.lin.Linear.forward.0",
    "Module.blk2.act.GELU.forward.0": "Module.blk2.Block.forward.0",
    "Functional.gelu.1.forward": "Module.blk2.act.GELU.forward.0",
    "Functional.cross_entropy.0.forward": None,
    "Functional.cross_entropy.0.backward": None,
    "Module.blk2.Block.backward.0": None,
    "Module.blk2.act.GELU.backward.0": "Module.blk2.Block.backward.0",
    "Functional.gelu.1.backward": "Module.blk2.act.GELU.backward.0",
    "Module.blk2.lin.Linear.backward.0": "Module.blk2.Block.backward.0",
    "Functional.linear.1.backward": "Module.blk2.lin.Linear.backward.0",
    "Module.blk1.Block.backward.0": None,
    "Module.blk1.act.GELU.backward.0": "Module.blk1.Block.backward.0",
    "Functional.gelu.0.backward": "Module.blk1.act.GELU.backward.0",
    "Module.blk1.lin.Linear.backward.0": "Module.blk1.Block.backward.0",
    "Functional.linear.0.backward": "Module.blk1.lin.Linear.backward.0"}


def nested(root, cfg):
    """Module backwards two levels deep: Net's calls and their enclosing
    calls worked by hand (NET_CALLS), in that start order, and the slices
    equal to the dump task's calls, Module.*.backward.* rows included, each
    enclosed by the dump's parent."""
    with open(cfg, "w") as f:
        json.dump({"task": "profile", "dump_path": os.path.join(root, "p5"),
                   "profile": {"wait": 1, "active": 1, "repeat": 1}}, f)
    torch.manual_seed(3)
    model = Net()
    state = {k: v.clone() for k, v in model.state_dict().items()}
    opt = torch.optim.AdamW(model.parameters(), lr=1e-3)
    dbg = PrecisionDebugger(config_path=cfg)
    torch.manual_seed(1)
    net_steps(dbg, model, opt, 2)
    dbg.close()
    check(len(dbg.traces) == 1, "nested: traces %s" % dbg.traces)
    if not dbg.traces:
        return
    alls = slices(dbg.traces[0])
    par = parents(alls)
    xs = [e for e in alls if not e["name"].startswith("ProfilerStep#")]
    pm = {e["name"]: par[id(e)] for e in xs}
    top = "ProfilerStep#1"
    hand = {n: pm.get(n, "missing") for n in NET_CALLS}
    check(hand == {n: p or top for n, p in NET_CALLS.items()},
          "nested: Net's calls and their enclosing calls %s" % hand)
    order = [e["name"] for e in sorted(xs, key=lambda e: (e["t0"], e["t0"] - e["t1"]))
             if e["name"] in NET_CALLS]
    check(order == list(NET_CALLS), "nested: start order %s" % order)
    same_as_dump(1, pm, dump_calls(root, state, 2, [1], Net, net_steps, "dump5").get(1, {}), top)
    print("nested: %d slices, module backwards nested as the dump's" % len(pm))


def composite_step(root, cfg, k):
    """One step of F.cross_entropy on 256 x 20000 logits under the default
    profile with torch.profiler around it: the test's own hook times
    (perf_counter_ns), the trace's cross_entropy backward slices, and
    torch.profiler's intervals of the two nodes' evaluate_function."""
    from torch.profiler import ProfilerActivity, profile
    with open(cfg, "w") as f:
        json.dump({"task": "profile", "dump_path": os.path.join(root, "p6.%d" % k)}, f)
    logits = torch.randn(256, 20000, requires_grad=True)
    tgt = torch.randint(0, 20000, (256,))
    seen = {}

    def at(key):
        def hook(*_):
            seen.setdefault(key, time.perf_counter_ns())
        return hook
    dbg = PrecisionDebugger(config_path=cfg)
    with profile(activities=[ProfilerActivity.CPU]) as prof:
        dbg.start()
        loss = torch.nn.functional.cross_entropy(logits, tgt)
        nll = loss.grad_fn
        lsm = nll.next_functions[0][0]
        nll.register_prehook(at("nll"))
        lsm.register_prehook(at("lsm"))
        logits.register_hook(at("grad"))
        loss.backward()
        dbg.stop()
        dbg.step()
    dbg.close()
    check((type(nll).__name__, type(lsm).__name__) == ("NllLossBackward0", "LogSoftmaxBackward0"),
          "cross_entropy's nodes: %s %s" % (type(nll).__name__, type(lsm).__name__))
    ce = [e for e in slices(dbg.traces[0]) if e["name"] == "Functional.cross_entropy.0.backward"]
    nodes = {}
    for ev in prof.events():
        for name in ("NllLossBackward0", "LogSoftmaxBackward0"):
            if ev.name == "autograd::engine::evaluate_function: " + name:
                nodes.setdefault(name, []).append(ev.time_range)
    return seen, ce, nodes


def composite(root, cfg):
    """F.cross_entropy makes two autograd nodes (NllLossBackward0 first in
    backward, LogSoftmaxBackward0 last): its backward slice starts at or
    before the first node's pre-hook and ends after the last node's
    pre-hook, before the logits' gradient arrives (hooks of this test on
    the same clock: every try); and it lasts at least 0.8 of the two nodes'
    time as torch.profiler, running around the same step, measures them
    (wall times on a shared machine, where a preemption outside the slice
    but inside torch's event, e.g. the saved output's release after the
    last node's hook, counts in one only: up to 3 tries, one suffices; the
    last-node timing gave 0.25-0.5)."""
    got = []
    for k in range(3):
        seen, ce, nodes = composite_step(root, cfg, k)
        check(len(ce) == 1 and len(seen) == 3, "composite: %d cross_entropy backward slices, "
              "hooks seen %s" % (len(ce), seen))
        check(sorted(nodes) == ["LogSoftmaxBackward0", "NllLossBackward0"] and
              all(len(v) == 1 for v in nodes.values()), "torch.profiler's nodes: %s" % nodes)
        if len(ce) != 1 or len(seen) != 3 or len(nodes) != 2:
            return
        e = ce[0]
        check(e["t0"] <= seen["nll"] < seen["lsm"] <= e["t1"] <= seen["grad"],
              "composite: slice [%d, %d], NllLoss pre %d, LogSoftmax pre %d, logits' gradient %d"
              % (e["t0"], e["t1"], seen["nll"], seen["lsm"], seen["grad"]))
        a, b = nodes["NllLossBackward0"][0], nodes["LogSoftmaxBackward0"][0]
        both = a.elapsed_us() + b.elapsed_us()
        dur = (e["t1"] - e["t0"]) / 1e3
        got.append("%.1f us against %.1f + %.1f (%.2f)" % (dur, a.elapsed_us(), b.elapsed_us(),
                                                           dur / both))
        if 0.8 * both <= dur <= (b.end - a.start) * 1.1 + 50:
            break
    else:
        check(False, "composite: cross_entropy's backward against torch.profiler's two nodes "
              "(at least 0.8 of their sum, at most their span): %s" % "; ".join(got))
    print("composite: cross_entropy backward %s" % "; ".join(got))


class Keep(torch.nn.Module):
    """Allocates a 64 MiB tensor (written: its pages resident) and keeps it."""
    def __init__(self):
        super().__init__()
        self.kept = []

    def forward(self, x):
        self.kept.append(torch.ones(16 << 20))
        return x * 2


def memory(root, cfg):
    """The Memory counter: Keep's forward raises the resident bytes from the
    last sample before it (the first Linear's end) to the first after it by
    64 MiB +- 2 MiB, each recorded step; with torch_profiler and
    profile_memory, torch's own allocator event of 64 MiB lies inside
    Keep's range."""
    model = torch.nn.Sequential(torch.nn.Linear(IN, IN), Keep(), torch.nn.Linear(IN, IN))
    for tp in (False, True):
        with open(cfg, "w") as f:
            json.dump({"task": "profile", "dump_path": os.path.join(root, "p7%d" % tp),
                       "profile": {"torch_profiler": tp, "profile_memory": True}}, f)
        dbg = PrecisionDebugger(config_path=cfg)
        for _ in range(2):
            dbg.start(model)
            model(torch.randn(B, IN)).sum().backward()
            dbg.stop()
            dbg.step()
        dbg.close()
        model[1].kept.clear()
        with open(dbg.traces[-1]) as f:
            ev = json.load(f)["traceEvents"]
        keep = [e for e in ev if e.get("ph") == "X" and e["name"].startswith("Module.1.Keep.forward")]
        check(len(keep) == 2, "memory (torch_profiler %s): Keep's slices %d" % (tp, len(keep)))
        if not tp:
            mem = sorted((float(e["ts"]), e["args"]["resident_bytes"]) for e in ev
                         if e.get("ph") == "C" and e["name"] == "Memory")
            for k in keep:
                t0, t1 = float(k["ts"]), float(k["ts"]) + float(k["dur"])
                before = [v for t, v in mem if t <= t0]
                after = [v for t, v in mem if t >= t1]
                grew = (after[0] - before[-1]) / 2**20 if before and after else None
                check(grew is not None and abs(grew - 64) <= 2,
                      "memory: the resident bytes over Keep's forward grew %s MiB, want 64 +- 2" % grew)
                print("memory: Keep's forward: resident +%.3f MiB" % grew)
        else:
            big = [e for e in ev if e.get("name") == "[memory]" and
                   e["args"].get("Bytes") == 64 << 20]
            inside = [e for e in big if any(float(k["ts"]) <= float(e["ts"]) <=
                                            float(k["ts"]) + float(k["dur"]) for k in keep)]
            check(len(big) == 2 and len(inside) == 2,
                  "memory (torch_profiler): %d allocations of 64 MiB, %d in Keep" % (len(big), len(inside)))


def main():
    torch.manual_seed(0)
    with tempfile.TemporaryDirectory() as root:
        sched = dict(skip_first=1, wait=1, warmup=1, active=2, repeat=1)
        cfg = os.path.join(root, "p.json")
        with open(cfg, "w") as f:
            json.dump({"task": "profile", "dump_path": os.path.join(root, "prof"),
                       "profile": dict(sched, record_shapes=True, torch_profiler=True)}, f)
        model, steps = MLP(), 7
        opt = torch.optim.AdamW(model.parameters(), lr=1e-3)
        dbg = PrecisionDebugger(config_path=cfg)
        check(type(dbg).__name__ == "ProfileDebugger", "task profile made a %s" % type(dbg).__name__)
        train_steps(PrecisionDebugger, model, opt, steps)
        dbg.close()
        traces = sorted(glob.glob(os.path.join(root, "prof", "*.json")))
        want = torch_schedule_steps(steps=steps, **sched)
        check(len(traces) == 1, "traces: %s" % traces)
        if not traces:
            sys.exit(finish())
        with open(traces[0]) as f:
            ev = json.load(f)["traceEvents"]
        xs = [e for e in ev if e.get("ph") == "X"]
        got = sorted(int(e["name"].split("#")[1]) for e in xs if e["name"].startswith("ProfilerStep#"))
        check(got == want, "recorded steps %s, torch's schedule %s" % (got, want))
        mods = [e for e in xs if e["name"].startswith("Module.")]
        names = sorted(e["name"] for e in mods)
        check(names == sorted(["Module.fc1.Linear.forward.0", "Module.act.GELU.forward.0",
                               "Module.fc2.Linear.forward.0"] * len(want)), "module slices: %s" % names)
        lin = [e for e in xs if e["name"] == "aten::linear"]
        inside = sum(any(m["name"].endswith("Linear.forward.0") and m["ts"] <= e["ts"] and
                         e["ts"] + e["dur"] <= m["ts"] + m["dur"] + 1e-3 for m in mods) for e in lin)
        check(len(lin) == 2 * len(want) and inside == len(lin),
              "aten::linear: %d calls, %d inside a Linear module's slice" % (len(lin), inside))
        dims = sorted(json.dumps(e["args"].get("Input Dims")) for e in xs if e["name"] == "aten::addmm")
        check(set(dims) == {json.dumps([[HID], [B, IN], [IN, HID], [], []]),
                            json.dumps([[OUT], [B, HID], [HID, OUT], [], []])},
              "aten::addmm's shapes (record_shapes): %s" % sorted(set(dims)))
        rc, so, se = run(["profile", traces[0], "-o", os.path.join(root, "rep")], root)
        check(rc == 0, "nprobe profile: exit %d %s" % (rc, se))
        with open(os.path.join(root, "rep", "profile_ops.csv")) as f:
            rows = [r for r in csv.DictReader(f) if r["name"] == "aten::linear"]
        tot = sum(float(e["dur"]) for e in lin)
        check(len(rows) == 1 and int(rows[0]["count"]) == len(lin) and
              abs(float(rows[0]["total_us"]) - tot) < 1e-6,
              "nprobe profile's aten::linear %s, the events: %d calls %.3f us" % (rows, len(lin), tot))
        # the default: no shapes; a module's calls numbered in call order
        with open(cfg, "w") as f:
            json.dump({"task": "profile", "dump_path": os.path.join(root, "p2")}, f)
        dbg = PrecisionDebugger(config_path=cfg)
        dbg.start(model)
        for _ in range(6):
            model.fc1(torch.randn(B, IN))
        dbg.stop()
        dbg.step()
        dbg.close()
        tr = glob.glob(os.path.join(root, "p2", "*.json"))
        xs = slices(tr[0])
        fc1 = sorted((e["ts"], e["name"]) for e in xs if e["name"].startswith("Module.fc1."))
        check([n for _, n in fc1] == ["Module.fc1.Linear.forward.%d" % i for i in range(6)],
              "6 calls of fc1 in one step: %s" % [n for _, n in fc1])
        dims = [e["name"] for e in xs if "Input Dims" in e.get("args", {})]
        check(len(xs) > 6 and not dims, "record_shapes off by default, yet Input Dims on %s" % dims[:5])
        par = parents(xs)
        lin = {e["name"]: par[id(e)] for e in xs if e["name"].startswith("Functional.linear.")}
        check(lin == {"Functional.linear.%d.forward" % i: "Module.fc1.Linear.forward.%d" % i
                      for i in range(6)}, "each fc1 call encloses its linear: %s" % lin)
        nprobe_mode(root, cfg)
        nested(root, cfg)
        composite(root, cfg)
        memory(root, cfg)
        for sec, key in (({"activ": 2}, "activ"), ({"record_shapes": 1}, "record_shapes"),
                         ({"torch_profiler": "yes"}, "torch_profiler"),
                         ({"profile_memory": 0}, "profile_memory")):
            with open(cfg, "w") as f:
                json.dump({"task": "profile", "dump_path": "x", "profile": sec}, f)
            try:
                PrecisionDebugger(config_path=cfg)
                check(False, "a bad profile key %s raised nothing" % key)
            except ValueError as e:
                check(key in str(e) and cfg in str(e), "bad key: %s" % e)
        collective(root, cfg)       # last: it initialises torch.distributed
    sys.exit(finish())


def collective(root, cfg):
    """A torch.distributed collective under the default profile (a gloo
    world of one process): one slice Distributed.all_reduce.0.forward, its
    input bytes 6 x 4 in args, inside the module call that makes it; a
    TrainerMon with cc_distribution beside it records the collective's
    comm_in and comm_out (its observer outside the timed slice)."""
    import torch.distributed as dist
    dist.init_process_group("gloo", init_method="file://" + os.path.join(root, "store"),
                            rank=0, world_size=1)

    class Reduce(torch.nn.Module):
        def forward(self, x):
            dist.all_reduce(x)
            return x
    model = torch.nn.Sequential(Reduce())
    with open(cfg, "w") as f:
        json.dump({"task": "profile", "dump_path": os.path.join(root, "p4")}, f)
    # beside it TrainerMon with cc_distribution: the collective's records
    # taken outside its timed slice (the profile's slices unchanged)
    from nprobe.torch import TrainerMon
    mcfg = os.path.join(root, "mon_cc.json")
    with open(mcfg, "w") as f:
        json.dump({"task": "monitor", "dump_path": os.path.join(root, "mon_cc"),
                   "monitor": {"cc_distribution": {"enable": True}}}, f)
    opt = torch.optim.SGD([torch.nn.Parameter(torch.zeros(1))], lr=0.1)
    mon = TrainerMon(mcfg)
    mon.set_monitor(model, opt)
    dbg = PrecisionDebugger(config_path=cfg)
    dbg.start(model)
    model(torch.full((2, 3), -2.0))
    dbg.stop()
    opt.step()
    dbg.step()
    dbg.close()
    mon.stop()
    dist.destroy_process_group()
    xs = slices(dbg.traces[0])
    par = parents(xs)
    ar = [(e["name"], e["args"].get("bytes"), par[id(e)]) for e in xs if e["name"].startswith("Distributed.")]
    check(ar == [("Distributed.all_reduce.0.forward", 24, "Module.0.Reduce.forward.0")],
          "the collective's slice: %s" % ar)
    import h5py
    with h5py.File(os.path.join(root, "mon_cc", "monitor_rank0.h5"), "r") as f:
        keys = [(a.decode(), b.decode()) for a, b in f["keys"][:]]
        rec = {keys[x["key"]]: (int(x["numel"]), float(x["norm"]), float(x["mean"]))
               for x in f["records"][:]}
    got = [rec.get(("Distributed.all_reduce.0.forward", m)) for m in ("comm_in", "comm_out")]
    check(all(g is not None and g[0] == 6 and abs(g[1] - 2.0 * 6 ** 0.5) <= 1e-12 and
              g[2] == -2.0 for g in got),
          "the monitor's comm records beside the profile: %s" % rec)


if __name__ == "__main__":
    main()
