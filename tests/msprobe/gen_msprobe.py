#!/usr/bin/env python3
"""tests/msprobe/gen_msprobe.py - writes dumps in msprobe's on-disk format
(docs/FORMAT.md, "msprobe dumps") with real torch.save .pt files, for the
tests and benchmarks of nprobe's msprobe reader. It follows the format as
msprobe 26.x / 8.3 write it; it is not msprobe.

  gen_msprobe.py pt DIR            .pt cases (dtypes, strides, offsets, 0-d, empty)
  gen_msprobe.py hostile DIR       hostile .pt files and dump.json files
  gen_msprobe.py dump DIR [opts]   a dump: --task statistics|tensor|md5
                                   --layout 26|proc|8 --steps N --ranks N
                                   --calls N (linear calls) --seed S --fault SCALE
"""
import argparse
import json
import math
import os
import struct
import sys
import zipfile
import zlib

import torch


# ---- .pt cases -----------------------------------------------------------------

def pt_cases():
    """name -> tensor (views keep their storage, offset and strides)."""
    g = torch.Generator().manual_seed(7)
    base = torch.randn(6, 10, generator=g)
    big = torch.randn(3, 4, 5, generator=g)
    c = {
        "f32": torch.randn(3, 5, generator=g),
        "bf16": torch.randn(4, 7, generator=g).to(torch.bfloat16),
        "f16": torch.tensor([1.0, -2.5, 6.0e-8, 65504.0, float("inf"), float("nan"), 1e-5],
                            dtype=torch.float16),
        "f64": torch.randn(5, generator=g, dtype=torch.float64),
        "i64": torch.tensor([[3, -7], [2 ** 40, -(2 ** 35)]], dtype=torch.int64),
        "i32": torch.tensor([1, -2, 2 ** 30], dtype=torch.int32),
        "i8": torch.tensor([-128, 0, 127], dtype=torch.int8),
        "u8": torch.tensor([0, 200, 255], dtype=torch.uint8),
        "bool": torch.tensor([True, False, True, True]),
        "scalar": torch.tensor(3.25),
        "empty": torch.zeros(0, 4),
        "nan_inf": torch.tensor([float("nan"), float("inf"), -float("inf"), 0.0, -0.0]),
        "view_offset": base[2:4, 3:8],                  # offset 23, strides (10, 1)
        "view_transposed": base[1:5, 2:9:2].t(),        # strides (2, 10)
        "view_step": base.reshape(-1)[5:55:7],          # stride 7
        "view_3d": big.permute(2, 0, 1)[1:4],           # strides (1, 20, 5), offset 1
        "bf16_strided": base.to(torch.bfloat16)[::2, 1::3],
        "expanded": torch.randn(1, 3, generator=g).expand(4, 3),  # stride 0
    }
    return c


def write_pt_cases(out):
    os.makedirs(out, exist_ok=True)
    for name, t in pt_cases().items():
        torch.save(t, os.path.join(out, name + ".pt"))


# ---- hand-assembled pickles for hostile files ----------------------------------

def _x(s):
    b = s.encode()
    return b"X" + struct.pack("<I", len(b)) + b


def _j(v):
    return b"J" + struct.pack("<i", v)


def _tup(vals):
    return b"(" + b"".join(_j(v) for v in vals) + b"t"


def pickle_tensor(storage="FloatStorage", key="0", numel=4, offset=0, size=(4,), stride=(1,),
                  head=b"ctorch._utils\n_rebuild_tensor_v2\n"):
    return (b"\x80\x02" + head + b"((" + _x("storage") + b"ctorch\n" + storage.encode() + b"\n" +
            _x(key) + _x("cpu") + _j(numel) + b"tQ" + _j(offset) + _tup(size) + _tup(stride) +
            b"\x89ccollections\nOrderedDict\n)Rt" + b"R.")


def write_zip(path, members, method=zipfile.ZIP_STORED):
    with zipfile.ZipFile(path, "w", compression=method) as z:
        for name, data in members:
            z.writestr(name, data)


def write_hostile(out):
    """name -> what the error must say; the files are in out/."""
    os.makedirs(out, exist_ok=True)
    four = struct.pack("<4f", 1, 2, 3, 4)
    cases = {}

    def pt(name, pkl, data=four, expect="", method=zipfile.ZIP_STORED, extra=()):
        write_zip(os.path.join(out, name + ".pt"),
                  [("a/data.pkl", pkl), ("a/data/0", data), ("a/version", b"3\n")] + list(extra),
                  method)
        cases[name + ".pt"] = expect

    pt("good", pickle_tensor(), expect="")
    marker = os.path.join(out, "PWNED")
    evil = (b"\x80\x02cposix\nsystem\n(" + _x("touch " + marker) + b"tR.")
    pt("evil_global", evil, expect="global not allowed: posix.system")
    pt("evil_builtins", b"\x80\x02c__builtin__\neval\n(" + _x("1") + b"tR.",
       expect="global not allowed")
    pt("evil_opcode", b"\x80\x02" + _x("torch") + _x("x") + b"\x93.", expect="opcode not allowed")
    pt("evil_inst", b"\x80\x02(iposix\nsystem\n.", expect="opcode not allowed")
    pt("not_tensor", b"\x80\x02" + _j(5) + b".", expect="does not end with one tensor")
    pt("short_storage", pickle_tensor(numel=4, size=(10,)), expect="shorter than")
    pt("short_member", pickle_tensor(numel=1000, size=(1000,)), expect="member holds")
    pt("stride_past", pickle_tensor(numel=4, size=(2, 2), stride=(3, 1)), expect="shorter than")
    pt("offset_past", pickle_tensor(numel=4, offset=4, size=(1,)), expect="shorter than")
    pt("missing_storage", pickle_tensor(key="9"), expect="storage member data/9 missing")
    pt("truncated_pkl", pickle_tensor()[:40], expect="data.pkl byte")
    pt("memo_bomb", b"\x80\x02" + _j(1) + b"r\xff\xff\xff\x00.", expect="memo index")
    pt("deep_stack", b"\x80\x02" + b"(" * 300 + b".", expect="too large")
    pt("complex", pickle_tensor(storage="ComplexFloatStorage"), expect="global not allowed")
    # a zip bomb: 256 MB of zeros deflated to a few hundred KB
    pt("zip_bomb", pickle_tensor(numel=64 << 20, size=(64 << 20,)), data=bytes(256 << 20),
       method=zipfile.ZIP_DEFLATED, expect="compressed")
    with open(os.path.join(out, "good.pt"), "rb") as f:
        whole = f.read()
    with open(os.path.join(out, "truncated.pt"), "wb") as f:
        f.write(whole[: len(whole) // 2])
    cases["truncated.pt"] = "zip"
    with open(os.path.join(out, "garbage.pt"), "wb") as f:
        f.write(bytes(range(256)) * 8)
    cases["garbage.pt"] = "not a zip file"
    with open(os.path.join(out, "empty.pt"), "wb"):
        pass
    cases["empty.pt"] = "non-empty"
    with open(os.path.join(out, "cases.json"), "w") as f:
        json.dump({"cases": cases, "marker": marker}, f)
    return cases


# ---- whole dumps -----------------------------------------------------------------

def stats(t):
    """msprobe's statistics: over all elements (inf and NaN included)."""
    if t.dtype == torch.bool:
        return {"Max": bool(t.any()) if t.numel() else None, "Min": bool(t.all()) if t.numel()
                else None, "Mean": None, "Norm": None}
    if not t.is_floating_point():
        return {"Max": int(t.max()), "Min": int(t.min()), "Mean": None, "Norm": None}
    f = t.double()
    return {"Max": float(f.max()), "Min": float(f.min()), "Mean": float(f.mean()),
            "Norm": float(f.norm())}


def item(t, name, task, data_dir):
    d = {"type": "torch.Tensor", "dtype": str(t.dtype), "shape": list(t.shape)}
    d.update(stats(t))
    d["requires_grad"] = bool(t.requires_grad)
    if task == "md5":
        d["md5"] = "%08x" % zlib.crc32(t.contiguous().view(torch.uint8).numpy().tobytes()
                                       if t.numel() else b"")
    if task == "tensor":
        d["data_name"] = name + ".pt"
        torch.save(t.detach().clone(), os.path.join(data_dir, name + ".pt"))
    return d


def model_calls(n_calls, seed, fault, dtype):
    """A chain of linear calls: (call name, {group: [tensor or {type, value}]})."""
    g = torch.Generator().manual_seed(seed)
    x = torch.randn(4, 16, generator=g)
    out = []
    for i in range(n_calls):
        w = torch.randn(16, 16, generator=g) / 4
        xi, wi = x.to(dtype), w.to(dtype)
        y = torch.nn.functional.linear(xi, wi)
        if fault and i == n_calls // 2:
            y = y * fault
        call = "Functional.linear.%d.forward" % i
        out.append((call, {"input_args": [xi, [wi, None]],
                           "input_kwargs": {"eps": {"type": "float", "value": 1e-5}},
                           "output": [y]}))
        m = torch.tensor([[float("-inf")] * 16] * 4).to(dtype)
        out.append(("Tensor.masked_fill.%d.forward" % i,
                    {"input_args": [y, torch.ones(4, 16, dtype=torch.bool),
                                    {"type": "float", "value": float("-inf")}],
                     "input_kwargs": {}, "output": [torch.where(y > 0, y, m)]}))
        x = torch.tanh(y.float())
    return out


def write_dump(root, task="statistics", layout="26", steps=1, ranks=1, n_calls=4, seed=0,
               fault=0.0, dtype="float32"):
    dt = getattr(torch, dtype)
    for s in range(steps):
        for r in range(ranks):
            sub = {"26": "rank%d" % r, "proc": "proc%d" % (4000 + r), "8": "rank"}[layout]
            d = os.path.join(root, "step%d" % s, sub)
            data_dir = os.path.join(d, "dump_tensor_data")
            os.makedirs(data_dir if task == "tensor" else d, exist_ok=True)
            data, construct, stack = {}, {}, {}
            for k, (call, groups) in enumerate(model_calls(n_calls, seed + s * 100 + r, fault, dt)):
                rec = {}
                for gname, vals in groups.items():
                    rec[gname] = conv(vals, call, gname, task, data_dir)
                data[call] = rec
                construct[call] = "Module.net.Net.forward.0"
                stack[str(k)] = [[call], ["File /x/torch/nn/f.py, line 1, in g, \n h()",
                                          "File /home/u/train.py, line %d, in step, \n y()" % (10 + k)]]
            construct["Module.net.Net.forward.0"] = None
            doc = {"task": task if task != "md5" else "statistics", "level": "mix",
                   "framework": "pytorch", "dump_data_dir": "/elsewhere/" + d if task == "tensor"
                   else None, "data": data}
            with open(os.path.join(d, "dump.json"), "w") as f:
                json.dump(doc, f, indent=1)  # Python writes NaN/Infinity as bare tokens
            with open(os.path.join(d, "construct.json"), "w") as f:
                json.dump(construct, f, indent=1)
            with open(os.path.join(d, "stack.json"), "w") as f:
                json.dump(stack, f, indent=1)


def conv(vals, call, gname, task, data_dir, prefix=None):
    role = "input" if gname.startswith("input") else gname
    prefix = prefix or "%s.%s" % (call, role)
    if isinstance(vals, dict) and "type" not in vals:
        return {k: conv(v, call, gname, task, data_dir, prefix + "." + k) for k, v in vals.items()}
    if isinstance(vals, list):
        return [conv(v, call, gname, task, data_dir, "%s.%d" % (prefix, i))
                for i, v in enumerate(vals)]
    if vals is None or isinstance(vals, dict):
        return vals
    return item(vals, prefix, task, data_dir)


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("what", choices=["pt", "hostile", "dump"])
    ap.add_argument("out")
    ap.add_argument("--task", default="statistics")
    ap.add_argument("--layout", default="26")
    ap.add_argument("--steps", type=int, default=1)
    ap.add_argument("--ranks", type=int, default=1)
    ap.add_argument("--calls", type=int, default=4)
    ap.add_argument("--seed", type=int, default=0)
    ap.add_argument("--fault", type=float, default=0.0)
    ap.add_argument("--dtype", default="float32")
    a = ap.parse_args()
    if a.what == "pt":
        write_pt_cases(a.out)
    elif a.what == "hostile":
        write_hostile(a.out)
    else:
        write_dump(a.out, a.task, a.layout, a.steps, a.ranks, a.calls, a.seed, a.fault, a.dtype)
    return 0


if __name__ == "__main__":
    sys.exit(main())
