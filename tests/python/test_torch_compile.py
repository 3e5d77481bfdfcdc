"""test_torch_compile.py - a model under torch.compile (backend aot_eager:
inductor's C++ compile of even this model takes a minute on 2 cores) dumped
by nprobe.torch: the module rows, forward and backward, named as the eager
model's (start() given the compiled or the plain model) with the eager
run's values; the compiled regions' API calls are not rows; a compiled
model compared with its eager run passes, and with a wrong constant in one
module's compiled forward `nprobe compare` names that module;
PrecisionDebugger(torch_compile="eager") runs the compiled model
uncompiled (no graph compiled) with every row of the eager run. Run
through pyrun.sh; exits 1 on any failed check."""
import json
import os
import shutil
import sys
import tempfile

import h5py
import torch
import torch.nn as nn

sys.path.insert(0, os.path.join(os.path.dirname(os.path.abspath(__file__)), ".."))
from nptest import check, finish, run  # noqa: E402
from nprobe.torch import PrecisionDebugger  # noqa: E402


class Blk(nn.Module):
    def __init__(self):
        super().__init__()
        self.fc = nn.Linear(8, 8)
        self.k = 1.0          # the constant a bug changes

    def forward(self, x):
        return torch.tanh(self.fc(x)) * self.k + x


class Net(nn.Module):
    def __init__(self):
        super().__init__()
        self.a = Blk()
        self.b = Blk()
        self.head = nn.Linear(8, 2)

    def forward(self, x):
        return self.head(self.b(self.a(x)))


def net():
    torch.manual_seed(0)
    return Net()


X = torch.randn(4, 8, generator=torch.Generator().manual_seed(1))
COMPILES = []


def counting_aot_eager(gm, example_inputs):
    """aot_eager, counting the graphs dynamo hands over."""
    COMPILES.append(len(gm.graph.nodes))
    from torch._dynamo.backends.debugging import aot_eager
    return aot_eager(gm, example_inputs)


def dump(tmp, name, model, hooked, level, **kw):
    path = os.path.join(tmp, name + ".json")
    with open(path, "w") as f:
        json.dump({"task": "statistics", "dump_path": os.path.join(tmp, name), "level": level},
                  f)
    d = PrecisionDebugger(path, **kw)
    d.start(model if hooked is None else hooked)
    model(X).pow(2).sum().backward()
    d.stop()
    d.step()
    d.close()
    with h5py.File(os.path.join(tmp, name, "step0/rank0/dump.h5"), "r") as f:
        rows = {r["name"].decode(): r for r in f["entries"][:]}
        calls = [c["call"].decode() for c in f["calls"][:]]
    return rows, calls


def late_compile(tmp):
    """Step 0 eager, then the same model compiled and captured at step 1 by
    the same debugger (level L0), in late/: (step 0's rows, calls),
    (torch._dynamo imported after step 0, step 1's rows, calls); step 0 is
    also the root eager/, the eager run the rest compares with."""
    path = os.path.join(tmp, "late.json")
    with open(path, "w") as f:
        json.dump({"task": "statistics", "dump_path": os.path.join(tmp, "late"), "level": "L0"}, f)
    m = net()
    d = PrecisionDebugger(path)
    d.start(m)
    m(X).pow(2).sum().backward()
    d.stop()
    d.step()
    loaded = "torch._dynamo" in sys.modules
    cm = torch.compile(m, backend=counting_aot_eager)
    d.start(m)
    cm(X).pow(2).sum().backward()
    d.stop()
    d.step()
    d.close()
    shutil.copytree(os.path.join(tmp, "late", "step0"), os.path.join(tmp, "eager", "step0"))
    out = []
    for step in (0, 1):
        with h5py.File(os.path.join(tmp, "late", f"step{step}/rank0/dump.h5"), "r") as f:
            out += [{r["name"].decode(): r for r in f["entries"][:]}, [c["call"].decode() for c in f["calls"][:]]]
    return out[0], out[1], (loaded, out[2], out[3])


def same_values(a, b):
    return [n for n in a if n in b and not (
        abs(float(a[n]["max"]) - float(b[n]["max"])) <= 1e-6 * max(1, abs(float(b[n]["max"]))) and
        abs(float(a[n]["norm"]) - float(b[n]["norm"])) <= 1e-6 * max(1, abs(float(b[n]["norm"]))))]


def main():
    with tempfile.TemporaryDirectory() as tmp:
        # the process's first capture: torch.compile is not in use, so its
        # hooks do not import torch._dynamo (~1.7 s); the same debugger on
        # the same model compiled after it (its next start() keeps the hooks
        # out of the graphs) gives the eager rows again at step 1
        e_rows, e_calls, late = late_compile(tmp)
        check(late[0] is False, "an eager capture does not import torch._dynamo")
        check(sorted(late[1]) == sorted(e_rows) and sorted(late[2]) == sorted(e_calls),
              f"compiled after start(): the eager rows: {sorted(set(e_calls) ^ set(late[2]))[:6]}")
        m = net()
        cm = torch.compile(m, backend=counting_aot_eager)
        c_rows, c_calls = dump(tmp, "compiled", cm, cm, "L0")      # start(the compiled model)
        check(len(COMPILES) > 0, "the model was compiled")
        check(not any("_orig_mod" in c for c in c_calls), "no torch.compile wrapper in the names")
        check(sorted(c_calls) == sorted(e_calls),
              f"compiled L0: the eager run's module calls: extra "
              f"{sorted(set(c_calls) - set(e_calls))}, missing {sorted(set(e_calls) - set(c_calls))}")
        for want in ("Module.a.Blk.forward.0", "Module.b.fc.Linear.forward.0",
                     "Module.b.Blk.backward.0"):
            check(want in c_calls, f"compiled: {want}")
        check("Module.a.fc.Linear.parameters_grad.weight" in c_rows, "compiled: parameter gradients")
        check(sorted(c_rows) == sorted(e_rows), "compiled L0: the eager run's rows")
        bad = same_values(c_rows, e_rows)
        check(not bad, f"compiled L0: the eager run's values: {bad[:4]}")

        # mix: the compiled regions' API calls are in their graphs, not rows
        n0 = len(COMPILES)
        mix_rows, mix_calls = dump(tmp, "compiled_mix", cm, m, "mix")   # start(the plain model)
        check(len(COMPILES) == n0, "the compiled graphs are reused")
        check(not any(c.startswith(("Functional.linear", "Torch.tanh")) for c in mix_calls),
              "compiled mix: no API row from inside a compiled region")
        check("Module.b.Blk.forward.0" in mix_calls, "compiled mix: module rows")

        # compare: compiled against eager passes; a wrong constant is named
        code, out, err = run(["compare", "-b", "eager", "-c", "compiled", "-o", "rep0"], tmp)
        check(code == 0 and "first culprit: none" in out,
              f"compiled vs eager: exit {code}, no culprit: {out[:300]} {err[:300]}")
        bug = net()
        bug.b.k = 1.5
        dump(tmp, "compiled_bug", torch.compile(bug, backend=counting_aot_eager), bug, "L0")
        code, out, err = run(["compare", "-b", "eager", "-c", "compiled_bug", "-o", "rep1"], tmp)
        line = [ln for ln in out.splitlines() if "first culprit" in ln]
        check(code != 0 and line and "Module.b.Blk.forward.0" in line[0],
              f"compiled with a wrong constant in b: compare names Module.b.Blk: exit {code}, "
              f"{line}")

        # torch_compile="eager": the compiled model runs uncompiled, every row
        full_rows, full_calls = dump(tmp, "eager_mix", net(), None, "mix")
        fresh = net()
        cf = torch.compile(fresh, backend=counting_aot_eager)
        n0 = len(COMPILES)
        o_rows, o_calls = dump(tmp, "forced", cf, cf, "mix", torch_compile="eager")
        check(len(COMPILES) == n0, "torch_compile=eager: nothing compiled")
        check("Functional.linear.0.forward" in o_calls, "torch_compile=eager: API rows")
        check(sorted(o_calls) == sorted(full_calls) and sorted(o_rows) == sorted(full_rows),
              "torch_compile=eager: the eager run's calls and rows")
        check(not same_values(o_rows, full_rows), "torch_compile=eager: the eager run's values")
        cf(X)
        check(len(COMPILES) > n0, "after stop() the model compiles again")
        try:
            PrecisionDebugger(os.path.join(tmp, "eager.json"), torch_compile="fast")
            check(False, "torch_compile='fast' refused")
        except ValueError as e:
            check("torch_compile" in str(e) and "eager" in str(e), f"the error names the key: {e}")
    return finish()


if __name__ == "__main__":
    sys.exit(main())
