"""gen_msprobe_dumps.py OUT_ROOT --tensors K --numel N [--task tensor|statistics]
[--seed S] [--noise X] - write one dump in msprobe's on-disk format
(docs/FORMAT.md, "msprobe dumps") for the benchmarks: OUT_ROOT/step0/rank0/
dump.json (+ construct.json, stack.json) with K float32 leaves of N elements
(three per Functional.linear call), and for the tensor task one torch.save
.pt per leaf in dump_tensor_data/. The leaves are gen_compare_dumps.py's
(imported: same generators, same order), so the two formats are compared
on the same data. Statistics rows are written as text, msprobe's layout
(indent 1), without Python's json module, so 140k rows take seconds."""
import os
import sys

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
import gen_compare_dumps as gcd  # noqa: E402  (the leaves, shared)


def item(name, shape, st, task):
    mx, mn, mean, norm = st
    s = ('    {\n     "type": "torch.Tensor",\n     "dtype": "torch.float32",\n'
         '     "shape": [\n      %d,\n      %d\n     ],\n     "Max": %r,\n     "Min": %r,\n'
         '     "Mean": %r,\n     "Norm": %r,\n     "requires_grad": false'
         % (shape[0], shape[1], mx, mn, mean, norm))
    if task == "tensor":
        s += ',\n     "data_name": "%s.pt"' % name
    return s + "\n    }"


def write_call(f, call, groups, last):
    f.write('  "%s": {\n   "input_args": [\n%s\n   ],\n   "input_kwargs": {},\n'
            '   "output": [\n%s\n   ]\n  }%s\n'
            % (call, ",\n".join(groups["input_args"]), ",\n".join(groups["output"]),
               "" if last else ","))


def main():
    a = gcd.parse_args(__doc__)
    d = os.path.join(a.out, "step0", "rank0")
    data_dir = os.path.join(d, "dump_tensor_data")
    os.makedirs(data_dir if a.task == "tensor" else d, exist_ok=True)
    if a.task == "tensor":
        import torch
    shape = gcd.leaf_shape(a.numel)
    n_calls = (a.tensors + len(gcd.PER_CALL) - 1) // len(gcd.PER_CALL)
    with open(os.path.join(d, "dump.json"), "w") as f:
        f.write('{\n "task": "%s",\n "level": "L1",\n "framework": "pytorch",\n'
                ' "dump_data_dir": "/elsewhere/dump_tensor_data",\n "data": {\n' % a.task)
        cur, groups = None, None
        for c, call, role, key, name, x, st in gcd.leaves(a):
            if c != cur:
                if groups is not None:
                    write_call(f, cur_call, groups, False)
                cur, cur_call, groups = c, call, {"input_args": [], "output": []}
            if x is not None:
                torch.save(torch.from_numpy(x), os.path.join(data_dir, name + ".pt"))
            groups["input_args" if role == "input" else "output"].append(
                item(name, shape, st, a.task))
        if groups is not None:
            write_call(f, cur_call, groups, True)
        f.write(" }\n}\n")
    with open(os.path.join(d, "construct.json"), "w") as f:
        f.write("{\n" + ",\n".join(' "Functional.linear.%d.forward": null' % c
                                   for c in range(n_calls)) + "\n}\n")
    with open(os.path.join(d, "stack.json"), "w") as f:
        f.write("{}\n")


if __name__ == "__main__":
    main()
