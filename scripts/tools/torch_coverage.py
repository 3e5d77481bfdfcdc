#!/usr/bin/env python3
"""torch_coverage.py - the API coverage of nprobe.torch (python/nprobe/torch/ops.py)
against msprobe's list of wrapped APIs (support_wrap_ops.yaml of the installed
msprobe, mindstudio-probe) and torch's `torch.overrides.get_overridable_functions()`,
counted per namespace, for the installed torch.

    python3 scripts/tools/torch_coverage.py                # the table on stdout
    python3 scripts/tools/torch_coverage.py --write docs/TORCH.md
                                    # replaces the table between its markers there
    python3 scripts/tools/torch_coverage.py --missing      # the names behind the counts

Run it with the project's Python (.venv: torch 2.13, msprobe 26.2). It imports
ops.py by path (no libnprobe needed) and counts what the package would wrap in
this torch: a listed name that this torch lacks is not counted."""
import argparse
import importlib.util
import os
import re
import sys

import torch

HERE = os.path.dirname(os.path.abspath(__file__))
OPS = os.path.join(HERE, "..", "..", "python", "nprobe", "torch", "ops.py")
BEGIN, END = "<!-- torch_coverage.py: begin -->", "<!-- torch_coverage.py: end -->"


def load_ops():
    spec = importlib.util.spec_from_file_location("nprobe_ops", OPS)
    ops = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(ops)
    return ops


def msprobe_lists():
    """{section: [names]} of msprobe's PyTorch support_wrap_ops.yaml, and its
    version; ({}, None) without msprobe. A plain reader of its layout
    (`section:` then `  - name` lines), so no YAML module is needed."""
    spec = importlib.util.find_spec("msprobe")
    if spec is None or not spec.submodule_search_locations:
        return {}, None
    root = list(spec.submodule_search_locations)[0]
    path = os.path.join(root, "pytorch", "dump", "api_dump", "support_wrap_ops.yaml")
    if not os.path.exists(path):
        return {}, None
    out, sec = {}, None
    with open(path) as f:
        for line in f:
            m = re.match(r"^([A-Za-z_][\w]*):\s*$", line)
            if m:
                sec = out.setdefault(m.group(1), [])
                continue
            m = re.match(r"^\s+-\s+(\S+)\s*$", line)
            if m and sec is not None:
                sec.append(m.group(1))
    try:
        from importlib.metadata import version
        ver = version("mindstudio-probe")
    except Exception:
        ver = "?"
    return out, ver


def overridable():
    """{namespace: set of names} from torch.overrides, each function by the
    name it has in its namespace (F.logsigmoid's __name__ is log_sigmoid,
    torch.linalg.norm's linalg_norm)."""
    out = {}
    try:
        funcs = torch.overrides.get_overridable_functions()
    except Exception:
        return out
    for ns, fs in funcs.items():
        key = "Tensor" if ns is torch.Tensor else getattr(ns, "__name__", str(ns))
        target = torch if key == "torch.functional" else ns
        key = {"torch.functional": "torch"}.get(key, key)
        names = out.setdefault(key, set())
        by_id = {}
        for attr in dir(target):
            try:
                by_id.setdefault(id(getattr(target, attr)), attr)
            except Exception:
                continue
        if ns is torch.Tensor:
            by_id.update({id(v): k for k, v in vars(torch.Tensor).items()})
            for cls in torch.Tensor.__mro__[1:]:
                for k, v in vars(cls).items():
                    by_id.setdefault(id(v), k)
        for f in fs:
            n = by_id.get(id(f)) or getattr(f, "__name__", None)
            if n:
                names.add(n)
    return out


def wrapped(ops):
    """{namespace: set of names nprobe wraps in this torch}, as _install does."""
    F = torch.nn.functional

    def present(obj, names, skip=()):
        return {n for n in names if n not in skip and callable(getattr(obj, n, None))
                and not isinstance(getattr(obj, n), type)}
    return {
        "Functional": present(F, ops.FUNCTIONAL) | present(F, getattr(ops, "FUNCTIONAL_INPLACE", ())),
        "Tensor": present(torch.Tensor, ops.TENSOR, ops.TENSOR_SKIP) |
        present(torch.Tensor, ops.TENSOR_INPLACE),
        "Torch": present(torch, ops.TORCH) | present(torch, getattr(ops, "TORCH_INPLACE", ())),
    }


ROWS = [  # (row, nprobe's key, msprobe's section, torch.overrides key, the object)
    ("Functional (`torch.nn.functional`)", "Functional", "functional", "torch.nn.functional",
     lambda: torch.nn.functional),
    ("Tensor (`torch.Tensor` methods)", "Tensor", "tensor", "Tensor", lambda: torch.Tensor),
    ("Torch (`torch.*`)", "Torch", "torch", "torch", lambda: torch),
    ("Distributed (`torch.distributed`)", None, "distributed", None,
     lambda: getattr(torch, "distributed", None)),
    ("`torch.linalg`", None, None, "torch.linalg", lambda: torch.linalg),
    ("`torch.fft`", None, None, "torch.fft", lambda: torch.fft),
    ("`torch.special`", None, None, "torch.special", lambda: torch.special),
]


def table(ops):
    ms, ver = msprobe_lists()
    ov = overridable()
    mine = wrapped(ops)
    tv = torch.__version__.split("+")[0]
    lines = [
        f"| namespace | nprobe wraps | msprobe {ver} wraps (in torch {tv}) | both | "
        f"msprobe only | nprobe only | torch {tv} overridable | of those, nprobe wraps |",
        "|---|---:|---:|---:|---:|---:|---:|---:|",
    ]
    details = {}
    tot = [0] * 7
    for row, key, sec, ovk, obj in ROWS:
        o = obj()
        n = mine.get(key, set())
        m = {x for x in ms.get(sec, []) if o is not None and hasattr(o, x)} if sec else set()
        v = ov.get(ovk, set()) if ovk else set()
        vals = [len(n), len(m), len(n & m), len(m - n), len(n - m), len(v), len(v & n)]
        tot = [a + b for a, b in zip(tot, vals)]
        cells = [str(x) if (i not in (1, 2, 3, 4) or sec) and (i not in (5, 6) or ovk) else "—"
                 for i, x in enumerate(vals)]
        lines.append(f"| {row} | " + " | ".join(cells) + " |")
        details[row] = {"msprobe only": sorted(m - n), "nprobe only": sorted(n - m),
                        "overridable, not wrapped": sorted(v - n)}
    lines.append("| all | " + " | ".join(f"**{x}**" for x in tot) + " |")
    return "\n".join(lines), details


def main():
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--write", metavar="MD", help="replace the table between its markers in MD")
    ap.add_argument("--missing", action="store_true", help="print the names behind the counts")
    a = ap.parse_args()
    ops = load_ops()
    text, details = table(ops)
    if a.missing:
        for row, d in details.items():
            for k, names in d.items():
                if names:
                    print(f"{row}, {k} ({len(names)}): {' '.join(names)}\n")
    if a.write:
        with open(a.write) as f:
            doc = f.read()
        if BEGIN not in doc or END not in doc:
            sys.exit(f"torch_coverage.py: {a.write}: no markers {BEGIN} ... {END}")
        head, rest = doc.split(BEGIN, 1)
        _, tail = rest.split(END, 1)
        with open(a.write, "w") as f:
            f.write(f"{head}{BEGIN}\n{text}\n{END}{tail}")
    elif not a.missing:
        print(text)
    return 0


if __name__ == "__main__":
    sys.exit(main())
