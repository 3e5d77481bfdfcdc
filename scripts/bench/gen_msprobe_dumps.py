"""gen_msprobe_dumps.py OUT_ROOT --tensors K --numel N [--task tensor|statistics]
[--seed S] [--noise X] - write one dump in msprobe's on-disk format
(docs/FORMAT.md, "msprobe dumps") for the benchmarks: OUT_ROOT/step0/rank0/
dump.json (+ construct.json, stack.json) with K float32 leaves of N elements
(three per Functional.linear call), and for the tensor task one torch.save
.pt per leaf in dump_tensor_data/. The tensors are the same, element for
element, as gen_compare_dumps.py writes into an nprobe dump with the same
arguments (same generators, same order), so the two formats are compared on
the same data. Statistics rows are written as text, msprobe's layout
(indent 1), without Python's json module, so 140k rows take seconds."""
import argparse
import os

import numpy as np

PER_CALL = (("input", "0"), ("input", "1"), ("output", "0"))


def item(name, shape, st, task):
    mx, mn, mean, norm = st
    s = ('    {\n     "type": "torch.Tensor",\n     "dtype": "torch.float32",\n'
         '     "shape": [\n      %d,\n      %d\n     ],\n     "Max": %r,\n     "Min": %r,\n'
         '     "Mean": %r,\n     "Norm": %r,\n     "requires_grad": false'
         % (shape[0], shape[1], mx, mn, mean, norm))
    if task == "tensor":
        s += ',\n     "data_name": "%s.pt"' % name
    return s + "\n    }"


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("out")
    ap.add_argument("--tensors", type=int, default=300)
    ap.add_argument("--numel", type=int, default=1 << 20)
    ap.add_argument("--task", default="tensor")
    ap.add_argument("--seed", type=int, default=1)
    ap.add_argument("--noise", type=float, default=0.0)
    a = ap.parse_args()
    d = os.path.join(a.out, "step0", "rank0")
    data_dir = os.path.join(d, "dump_tensor_data")
    os.makedirs(data_dir if a.task == "tensor" else d, exist_ok=True)
    if a.task == "tensor":
        import torch
    base = np.random.default_rng(12345)
    noise = np.random.default_rng(a.seed)
    rows = max(1, a.numel // 1024)
    shape = (rows, a.numel // rows)
    n_calls = (a.tensors + 2) // 3
    with open(os.path.join(d, "dump.json"), "w") as f:
        f.write('{\n "task": "%s",\n "level": "L1",\n "framework": "pytorch",\n'
                ' "dump_data_dir": "/elsewhere/dump_tensor_data",\n "data": {\n' % a.task)
        for c in range(n_calls):
            call = "Functional.linear.%d.forward" % c
            groups = {"input_args": [], "output": []}
            for k in range(3):
                i = 3 * c + k
                if i >= a.tensors:
                    break
                role, key = PER_CALL[k]
                name = "%s.%s.%s" % (call, role, key)
                if a.task == "tensor":
                    x = base.standard_normal(shape, dtype=np.float32)
                    if a.noise:
                        x = x * (1 + a.noise * noise.standard_normal(shape, dtype=np.float32))
                    x64 = x.astype(np.float64)
                    st = (float(x64.max()), float(x64.min()), float(x64.mean()),
                          float(np.sqrt(np.dot(x64.ravel(), x64.ravel()))))
                    torch.save(torch.from_numpy(x), os.path.join(data_dir, name + ".pt"))
                else:
                    m = float(base.standard_normal()) * (1 + a.noise * float(noise.standard_normal()))
                    st = (abs(m) + 3, -abs(m) - 3, m, abs(m) * 30)
                groups["input_args" if role == "input" else "output"].append(
                    item(name, shape, st, a.task))
            f.write('  "%s": {\n   "input_args": [\n%s\n   ],\n   "input_kwargs": {},\n'
                    '   "output": [\n%s\n   ]\n  }%s\n'
                    % (call, ",\n".join(groups["input_args"]), ",\n".join(groups["output"]),
                       "," if c + 1 < n_calls else ""))
        f.write(" }\n}\n")
    with open(os.path.join(d, "construct.json"), "w") as f:
        f.write("{\n" + ",\n".join(' "Functional.linear.%d.forward": null' % c
                                   for c in range(n_calls)) + "\n}\n")
    with open(os.path.join(d, "stack.json"), "w") as f:
        f.write("{}\n")


if __name__ == "__main__":
    main()
