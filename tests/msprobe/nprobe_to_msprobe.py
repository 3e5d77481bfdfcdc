#!/usr/bin/env python3
"""tests/msprobe/nprobe_to_msprobe.py DUMP_H5 OUT_DIR [--task tensor|statistics]
- rewrite one nprobe dump (a PyTorch reference made by samples/torch) in
msprobe's on-disk format, as msprobe 26 would have dumped the same run
outside a distributed job: OUT_DIR/step{S}/proc4242/dump.json (msprobe's
statistics: torch's over all elements, +-inf and NaN included), construct.json,
stack.json and, for the tensor task, dump_tensor_data/*.pt written by
torch.save in the tensors' own dtype. Leaves are regrouped into msprobe's
records (input_args, input_kwargs, output, parameters; backward input/output;
Module.X.parameters_grad.0). The tests then compare a "msprobe" PyTorch
reference against nprobe's runtime."""
import argparse
import json
import os

import h5py
import numpy as np
import torch

TORCH = {"float32": torch.float32, "bfloat16": torch.bfloat16, "float16": torch.float16,
         "float64": torch.float64, "int64": torch.int64, "int32": torch.int32, "bool": torch.bool}


def s(b):
    return b.decode() if isinstance(b, bytes) else str(b)


def stats(t):
    if t.dtype == torch.bool:
        return {"Max": bool(t.any()), "Min": bool(t.all()), "Mean": None, "Norm": None}
    if not t.is_floating_point():
        return {"Max": int(t.max()), "Min": int(t.min()), "Mean": None, "Norm": None}
    f = t.double()
    return {"Max": float(f.max()), "Min": float(f.min()), "Mean": float(f.mean()),
            "Norm": float(f.norm())}


def tensor_item(e, f, msp_name, task, data_dir):
    dt = s(e["dtype"])
    shape = [int(x) for x in e["shape"][: int(e["ndim"])]]
    name = s(e["name"])
    if not e["has_data"]:
        raise SystemExit("%s has no payload: convert a tensor-task dump" % name)
    t = torch.from_numpy(np.array(f["data"][name])).reshape(shape).to(TORCH[dt])
    d = {"type": "torch.Tensor", "dtype": "torch." + dt, "shape": shape}
    d.update(stats(t))
    d["requires_grad"] = bool(e["requires_grad"])
    if task == "tensor":
        d["data_name"] = msp_name + ".pt"
        torch.save(t.clone(), os.path.join(data_dir, d["data_name"]))
    return d


def put(lst, path, val):
    """Place val at the nested list index path ("1.0" -> lst[1][0])."""
    for k, i in enumerate(path):
        while len(lst) <= i:
            lst.append(None)
        if k == len(path) - 1:
            lst[i] = val
        else:
            if not isinstance(lst[i], list):
                lst[i] = []
            lst = lst[i]


def convert(h5path, out, task):
    with h5py.File(h5path, "r") as f:
        step = int(f.attrs["step"])
        d = os.path.join(out, "step%d" % step, "proc4242")
        data_dir = os.path.join(d, "dump_tensor_data")
        os.makedirs(data_dir, exist_ok=True)
        entries = f["entries"][:]
        calls = f["calls"][:] if "calls" in f else []
        data, construct, stack = {}, {}, {}
        parents = {s(c["call"]): s(c["parent"]) for c in calls}
        sites = {s(c["call"]): s(c["callsite"]) for c in calls}
        for e in entries:
            name, call, role = s(e["name"]), s(e["call"]), s(e["role"])
            key = name[len(call) + len(role) + 2:] if name.startswith(call + "." + role + ".") else None
            if role == "parameters_grad":
                mcall = name[: name.rindex(".parameters_grad.")] + ".parameters_grad.0"
                pname = name[name.rindex(".parameters_grad.") + len(".parameters_grad."):]
                rec = data.setdefault(mcall, {})
                rec[pname] = [tensor_item(e, f, mcall + "." + pname, task, data_dir)]
                continue
            rec = data.setdefault(call, {} if ".backward" in call else
                                  {"input_args": [], "input_kwargs": {}, "output": []})
            if role == "kwargs":
                rec.setdefault("input_kwargs", {})[key] = {"type": "float", "value": float(e["max"])}
                continue
            group = {"input": "input" if ".backward" in call else "input_args",
                     "output": "output", "parameters": "parameters"}[role]
            msp_role = "input" if role == "input" else role
            item = tensor_item(e, f, "%s.%s.%s" % (call, msp_role, key), task, data_dir)
            if role == "parameters":
                rec.setdefault("parameters", {})[key] = item
            else:
                put(rec.setdefault(group, []), [int(x) for x in key.split(".")], item)
        for k, call in enumerate(data):
            c = call[: -len(".parameters_grad.0")] if call.endswith(".parameters_grad.0") else call
            construct[call] = parents.get(c) or None
            site = sites.get(c, "")
            stack[str(k)] = [[call], ["File /ref/%s, line 1, in forward, \n f()" % (site or "x.py")]]
        doc = {"task": task, "level": "mix", "framework": "pytorch",
               "dump_data_dir": "/elsewhere/dump_tensor_data" if task == "tensor" else None,
               "data": data}
        for fname, obj in (("dump.json", doc), ("construct.json", construct), ("stack.json", stack)):
            with open(os.path.join(d, fname), "w") as g:
                json.dump(obj, g, indent=1)


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("dump_h5")
    ap.add_argument("out")
    ap.add_argument("--task", default="tensor")
    a = ap.parse_args()
    convert(a.dump_h5, a.out, a.task)


if __name__ == "__main__":
    main()
