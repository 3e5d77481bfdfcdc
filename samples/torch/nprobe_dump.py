"""nprobe_dump.py - dump a PyTorch run in nprobe's HDF5 format (version 1).

Usage inside a training script (PyTorch and h5py from Debian's packages):

    from nprobe_dump import Dumper
    d = Dumper("dump_out", task="tensor", level="mix", device="cpu", precision="fp32")
    d.watch(model)                      # module forward/backward and parameter grads
    F = d.functional                    # use F.linear, F.gelu, ... instead of torch.nn.functional
    d.step_begin(0)
    loss = ...; loss.backward()
    d.step_end()                        # writes dump_out/step0/rank0/dump.h5
    d.close()

API calls made through `d.functional` are named like nprobe's runtime and
msprobe ("Functional.linear.3.forward" / ".backward"); modules are named
"Module.{path}.{Class}.forward.{N}"; parameter gradients
"Module.{path}.{Class}.parameters_grad.{name}" (call "Module.{path}.{Class}").
docs/FORMAT.md describes the
file. Only the outermost API call is recorded when one wraps another.
"""
import math
import os
import zlib

import h5py
import numpy as np
import torch
import torch.nn.functional as TF

NAME_LEN, SITE_LEN, ROLE_LEN, DTYPE_LEN, KIND_LEN, MAX_DIMS = 256, 128, 16, 16, 8, 8

ENTRY_DTYPE = np.dtype([
    ("seq", "<i8"), ("name", f"S{NAME_LEN}"), ("call", f"S{NAME_LEN}"),
    ("role", f"S{ROLE_LEN}"), ("dtype", f"S{DTYPE_LEN}"), ("ndim", "<i4"),
    ("shape", "<i8", (MAX_DIMS,)), ("numel", "<i8"),
    ("max", "<f8"), ("min", "<f8"), ("mean", "<f8"), ("norm", "<f8"),
    ("nan_count", "<i8"), ("posinf_count", "<i8"), ("neginf_count", "<i8"),
    ("crc32", "<u4"), ("has_data", "i1"), ("requires_grad", "i1"),
])
CALL_DTYPE = np.dtype([
    ("seq", "<i8"), ("call", f"S{NAME_LEN}"), ("kind", f"S{KIND_LEN}"),
    ("parent", f"S{NAME_LEN}"), ("callsite", f"S{SITE_LEN}"),
])

DTYPE_NAMES = {
    torch.float32: "float32", torch.bfloat16: "bfloat16", torch.float16: "float16",
    torch.float64: "float64", torch.int64: "int64", torch.int32: "int32", torch.bool: "bool",
}

API_NAMES = {
    "linear": "Functional.linear", "conv2d": "Functional.conv2d",
    "max_pool2d": "Functional.max_pool2d", "relu": "Functional.relu",
    "gelu": "Functional.gelu", "silu": "Functional.silu",
    "layer_norm": "Functional.layer_norm", "softmax": "Functional.softmax",
    "embedding": "Functional.embedding", "dropout": "Functional.dropout",
    "cross_entropy": "Functional.cross_entropy",
}


def _stored(t):
    """The bytes nprobe stores: float32 for bf16/fp16/fp32, else the own type."""
    t = t.detach().cpu().contiguous()
    if t.dtype in (torch.bfloat16, torch.float16, torch.float32):
        return t.float().numpy()
    if t.dtype == torch.bool:
        return t.numpy().astype(np.uint8)
    return t.numpy()


def _stats(a):
    flat = a.reshape(-1)
    if flat.dtype.kind == "f":
        nan = int(np.isnan(flat).sum())
        pinf = int(np.isposinf(flat).sum())
        ninf = int(np.isneginf(flat).sum())
        fin = flat[np.isfinite(flat)].astype(np.float64)
    else:
        nan = pinf = ninf = 0
        fin = flat.astype(np.float64)
    if fin.size == 0:
        return math.nan, math.nan, math.nan, math.nan, nan, pinf, ninf
    return (float(fin.max()), float(fin.min()), float(fin.mean()),
            float(np.sqrt(np.dot(fin, fin))), nan, pinf, ninf)


class Dumper:
    def __init__(self, dump_path, task="tensor", level="mix", device="cpu",
                 precision="fp32", rank=0, world_size=1):
        if task not in ("statistics", "tensor", "md5"):
            raise ValueError(f"task: expected statistics, tensor or md5, got {task!r}")
        if level not in ("L0", "L1", "mix"):
            raise ValueError(f"level: expected L0, L1 or mix, got {level!r}")
        self.dump_path, self.task, self.level = dump_path, task, level
        self.device, self.precision = device, precision
        self.rank, self.world_size = rank, world_size
        self.functional = _Functional(self)
        self._modules = []
        self._file = None
        self._depth = 0

    # ---- steps -------------------------------------------------------------
    def step_begin(self, step):
        self.step = step
        d = os.path.join(self.dump_path, f"step{step}", f"rank{self.rank}")
        os.makedirs(d, exist_ok=True)
        self._path = os.path.join(d, "dump.h5")
        self._file = h5py.File(self._path + ".tmp", "w")
        a = self._file.attrs
        a["format"] = "nprobe-dump"
        a["format_version"] = np.int64(1)
        a["nprobe_version"] = "0.1.0"
        a["task"] = self.task
        a["level"] = self.level
        a["framework"] = "pytorch"
        a["device"] = self.device
        a["precision"] = self.precision
        a["step"] = np.int64(step)
        a["rank"] = np.int64(self.rank)
        a["world_size"] = np.int64(self.world_size)
        a["complete"] = np.int64(0)
        self._entries, self._calls = [], []
        self._api_count, self._mod_count = {}, {}
        self._module_stack = []
        self._data = self._file.create_group("data")

    def step_end(self):
        for path, mod in self._modules:
            if self.level == "L1":
                break
            params = [(n, p) for n, p in mod.named_parameters(recurse=False)]
            if not params:
                continue
            call = f"Module.{path}.{type(mod).__name__}"
            seq = self._add_call(call, "module", "")
            for n, p in params:
                if p.grad is not None:
                    self._add_tensor(seq, call, "parameters_grad", n, p.grad, False)
        self._file.create_dataset("entries", data=np.array(self._entries, dtype=ENTRY_DTYPE),
                                  maxshape=(None,), chunks=True)
        self._file.create_dataset("calls", data=np.array(self._calls, dtype=CALL_DTYPE),
                                  maxshape=(None,), chunks=True)
        self._file.attrs["complete"] = np.int64(1)
        self._file.close()
        os.replace(self._path + ".tmp", self._path)
        self._file = None

    def close(self):
        if self._file is not None:
            self._file.close()
            self._file = None

    # ---- records -----------------------------------------------------------
    def _add_call(self, call, kind, parent):
        seq = len(self._calls)
        self._calls.append((seq, call.encode(), kind.encode(), parent.encode(), b""))
        return seq

    def _add_tensor(self, seq, call, role, key, t, requires_grad):
        name = f"{call}.{role}.{key}"
        if t is None:
            return
        if not torch.is_tensor(t):
            v = float(t)
            shape = np.zeros(MAX_DIMS, dtype=np.int64)
            self._entries.append((seq, name.encode(), call.encode(), b"kwargs", b"float64", 0,
                                  shape, 1, v, v, v, abs(v), 0, 0, 0, 0, 0, 0))
            return
        a = _stored(t)
        mx, mn, mean, norm, nan, pinf, ninf = _stats(a)
        crc = 0
        has_data = 0
        if self.task in ("md5", "tensor"):
            crc = zlib.crc32(np.ascontiguousarray(a).tobytes()) & 0xFFFFFFFF
        if self.task == "tensor":
            ds = self._data.create_dataset(name, data=a, chunks=a.shape if a.ndim else None)
            ds.attrs["dtype"] = DTYPE_NAMES.get(t.dtype, str(t.dtype))
            has_data = 1
        shape = np.zeros(MAX_DIMS, dtype=np.int64)
        shape[:t.dim()] = list(t.shape)
        self._entries.append((seq, name.encode(), call.encode(), role.encode(),
                              DTYPE_NAMES.get(t.dtype, str(t.dtype)).encode(), t.dim(),
                              shape, t.numel(), mx, mn, mean, norm, nan, pinf, ninf,
                              crc, has_data, int(bool(requires_grad))))

    def _parent(self):
        return self._module_stack[-1] if self._module_stack else ""

    # ---- modules -----------------------------------------------------------
    def watch(self, model):
        """Name every submodule (not the root) and hook its forward/backward."""
        for path, mod in model.named_modules():
            if not path:
                continue
            self._modules.append((path, mod))
            mod.register_forward_pre_hook(self._make_pre(path))
            mod.register_forward_hook(self._make_post(path))

    def _make_pre(self, path):
        def pre(mod, inputs):
            key = (path, type(mod).__name__)
            n = self._mod_count.get(key, 0)
            self._mod_count[key] = n + 1
            call = f"Module.{path}.{type(mod).__name__}.forward.{n}"
            self._module_stack.append(call)
            mod._nprobe_call = (call, n)
        return pre

    def _make_post(self, path):
        def post(mod, inputs, output):
            call, n = mod._nprobe_call
            self._module_stack.pop()
            if self.level == "L1":
                return
            seq = self._add_call(call, "module", self._parent())
            for i, x in enumerate(inputs):
                if torch.is_tensor(x):
                    self._add_tensor(seq, call, "input", str(i), x, x.requires_grad)
            for pname, p in mod.named_parameters(recurse=False):
                self._add_tensor(seq, call, "parameters", pname, p, True)
            outs = output if isinstance(output, tuple) else (output,)
            for i, y in enumerate(outs):
                if torch.is_tensor(y):
                    self._add_tensor(seq, call, "output", str(i), y, y.requires_grad)
            tensors_in = [x for x in inputs if torch.is_tensor(x) and x.requires_grad]
            bcall = f"Module.{path}.{type(mod).__name__}.backward.{n}"
            parent = self._parent()
            self._hook_backward(bcall, "module", parent, outs, tensors_in)
        return post

    def _hook_backward(self, bcall, kind, parent, outs, ins):
        """Record the module's backward call with the gradients arriving at its
        outputs (role input). Gradients a module produces for its inputs are
        not recorded on the PyTorch side: a tensor hook on an input sums the
        gradients of all its uses, which is not this module's own gradient."""
        outs = [y for y in outs if torch.is_tensor(y) and y.requires_grad]
        if not outs:
            return
        got = {}

        def flush():
            seq = self._add_call(bcall, kind, parent)
            for i in sorted(got):
                self._add_tensor(seq, bcall, "input", str(i), got[i], False)

        for i, y in enumerate(outs):
            def on_out(g, i=i):
                got[i] = g.detach().clone()
                if len(got) == len(outs):
                    flush()
            y.register_hook(on_out)


class _ApiFn(torch.autograd.Function):
    """Runs one functional API as a single autograd node so its backward can be
    recorded with exactly this op's input and output gradients."""

    @staticmethod
    def forward(ctx, dumper, fn, bcall, parent, kwargs, *inputs):
        ctx.dumper, ctx.bcall, ctx.parent = dumper, bcall, parent
        with torch.enable_grad():
            xs = [x.detach().requires_grad_(x.requires_grad) if torch.is_tensor(x) and x.is_floating_point() else x
                  for x in inputs]
            y = fn(*xs, **kwargs)
        ctx.xs, ctx.y = xs, y
        return y.detach()

    @staticmethod
    def backward(ctx, gy):
        xs = ctx.xs
        diff = [x for x in xs if torch.is_tensor(x) and x.requires_grad]
        grads = torch.autograd.grad(ctx.y, diff, gy, allow_unused=True) if diff else []
        d = ctx.dumper
        if d.level != "L0" and d._file is not None:
            seq = d._add_call(ctx.bcall, "api", ctx.parent)
            d._add_tensor(seq, ctx.bcall, "input", "0", gy, False)
            gi = iter(grads)
            for i, x in enumerate([x for x in xs if torch.is_tensor(x)]):
                if x.requires_grad:
                    g = next(gi)
                    if g is not None:
                        d._add_tensor(seq, ctx.bcall, "output", str(i), g, False)
        out = [None, None, None, None, None]
        gi = iter(grads)
        for x in xs:
            out.append(next(gi) if torch.is_tensor(x) and x.requires_grad else None)
        return tuple(out)


class _Functional:
    """torch.nn.functional look-alike whose calls are nprobe hook points.
    `d.functional.linear(...)` etc. are named like nprobe's runtime;
    `d.api(name, fn)` wraps any other function under an msprobe-style name
    ("Tensor.add", a custom "Functional.cross_entropy", ...)."""

    def __init__(self, dumper):
        self._d = dumper

    def __getattr__(self, api):
        if api == "scaled_dot_product_attention":
            return self._d.api("Functional.scaled_dot_product_attention", _sdpa)
        if api == "matmul":
            return self._d.api("Torch.matmul", torch.matmul)
        if api == "add":
            return self._d.api("Tensor.add", torch.add)
        if api in API_NAMES:
            return self._d.api(API_NAMES[api], getattr(TF, api))
        return getattr(TF, api)


def _api(self, prefix, fn):
    """Wrap `fn` as the API `prefix`: calls are numbered per step; tensor
    arguments are the inputs (numbered among tensors only, as the runtime
    does), numeric keyword arguments are kwargs rows."""
    d = self

    def call(*args, **kwargs):
        if d._file is None or d._depth > 0:
            return fn(*args, **kwargs)
        n = d._api_count.get(prefix, 0)
        d._api_count[prefix] = n + 1
        fcall, bcall = f"{prefix}.{n}.forward", f"{prefix}.{n}.backward"
        parent = d._parent()
        d._depth += 1
        try:
            if torch.is_grad_enabled() and any(torch.is_tensor(a) and a.requires_grad for a in args):
                y = _ApiFn.apply(d, fn, bcall, parent, kwargs, *args)
            else:
                y = fn(*args, **kwargs)
        finally:
            d._depth -= 1
        if d.level != "L0":
            seq = d._add_call(fcall, "api", parent)
            tensors = [a for a in args if torch.is_tensor(a)]
            for i, a in enumerate(tensors):
                d._add_tensor(seq, fcall, "input", str(i), a, a.requires_grad)
            for k, v in kwargs.items():
                if isinstance(v, (int, float)):
                    d._add_tensor(seq, fcall, "kwargs", k, float(v), False)
            d._add_tensor(seq, fcall, "output", "0", y, y.requires_grad)
        return y
    return call


Dumper.api = _api


def _sdpa(q, k, v, is_causal=True, scale=None):
    """Causal scaled dot-product attention (torch 1.13 has no fused one)."""
    T = q.shape[-2]
    if scale is None or scale <= 0:
        scale = 1.0 / math.sqrt(q.shape[-1])
    att = (q @ k.transpose(-2, -1)) * scale
    if is_causal:
        mask = torch.ones(T, T, dtype=torch.bool, device=q.device).tril()
        att = att.masked_fill(~mask, float("-inf"))
    return TF.softmax(att, dim=-1) @ v
