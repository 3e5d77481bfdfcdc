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
- a bad schedule key raises ValueError naming it."""
import csv
import glob
import json
import os
import subprocess
import sys
import tempfile

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


def torch_schedule_steps(skip_first, wait, warmup, active, repeat, steps):
    out = []
    for s in range(skip_first, steps):
        k = s - skip_first
        cycle = wait + warmup + active
        if (repeat == 0 or k // cycle < repeat) and k % cycle >= wait + warmup:
            out.append(s)
    return out


def main():
    torch.manual_seed(0)
    with tempfile.TemporaryDirectory() as root:
        sched = dict(skip_first=1, wait=1, warmup=1, active=2, repeat=1)
        cfg = os.path.join(root, "p.json")
        with open(cfg, "w") as f:
            json.dump({"task": "profile", "dump_path": os.path.join(root, "prof"),
                       "profile": dict(sched, record_shapes=True)}, f)
        model, steps = MLP(), 7
        opt = torch.optim.AdamW(model.parameters(), lr=1e-3)
        dbg = PrecisionDebugger(config_path=cfg)
        check(type(dbg).__name__ == "ProfileDebugger", "task profile made a %s" % type(dbg).__name__)
        for _ in range(steps):
            PrecisionDebugger.start(model)
            loss = model(torch.randn(B, IN)).square().mean()
            loss.backward()
            opt.step()
            opt.zero_grad()
            PrecisionDebugger.stop()
            PrecisionDebugger.step()
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
        with open(tr[0]) as f:
            xs = [e for e in json.load(f)["traceEvents"] if e.get("ph") == "X"]
        fc1 = sorted((e["ts"], e["name"]) for e in xs if e["name"].startswith("Module.fc1."))
        check([n for _, n in fc1] == ["Module.fc1.Linear.forward.%d" % i for i in range(6)],
              "6 calls of fc1 in one step: %s" % [n for _, n in fc1])
        dims = [e["name"] for e in xs if "Input Dims" in e.get("args", {})]
        check(len(xs) > 6 and not dims, "record_shapes off by default, yet Input Dims on %s" % dims[:5])
        for sec, key in (({"activ": 2}, "activ"), ({"record_shapes": 1}, "record_shapes")):
            with open(cfg, "w") as f:
                json.dump({"task": "profile", "dump_path": "x", "profile": sec}, f)
            try:
                PrecisionDebugger(config_path=cfg)
                check(False, "a bad profile key %s raised nothing" % key)
            except ValueError as e:
                check(key in str(e) and cfg in str(e), "bad key: %s" % e)
    sys.exit(finish())


if __name__ == "__main__":
    main()
