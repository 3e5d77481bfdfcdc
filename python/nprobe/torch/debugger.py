"""PrecisionDebugger: msprobe's interface, nprobe's C probe underneath.

Capture happens in Python (API wrappers, module hooks, identity autograd
functions for the backward); every row, statistic, checksum and file is the
C probe's (libnprobe through ctypes): a CPU tensor crosses as a view (data
pointer, dtype, shape, strides), a device tensor as statistics reduced on
its device (statistics task) or as a host copy (payload tasks).
"""
import atexit
import collections
import ctypes
import functools
import os
import sys
import threading
import warnings
import weakref

import torch

from .. import _lib
from . import ops
from . import dtensor as _dtensor
from . import ep_optim as _ep_optim
from . import distributed as _distributed
from . import pipeline as _pipeline

_DT = {torch.float32: _lib.FLOAT32, torch.bfloat16: _lib.BFLOAT16, torch.float16: _lib.FLOAT16,
       torch.float64: _lib.FLOAT64, torch.int64: _lib.INT64, torch.int32: _lib.INT32,
       torch.bool: _lib.BOOL}
for _n, _c in (("float8_e4m3fn", _lib.FLOAT8_E4M3FN), ("float8_e5m2", _lib.FLOAT8_E5M2)):
    if hasattr(torch, _n):  # float8: the codes cross as one byte an element (docs/FORMAT.md)
        _DT[getattr(torch, _n)] = _c
_PREC = {torch.float32: "fp32", torch.bfloat16: "bf16", torch.float16: "fp16",
         torch.float64: "fp64"}
# torch's and nprobe's own folders, each with its separator: ".../torch" must
# not take ".../torchvision" (a model's own code) with it (issue 31)
_SKIP_DIRS = (os.path.join(os.path.dirname(torch.__file__), ""), os.path.join(
    os.path.dirname(os.path.dirname(os.path.abspath(__file__))), ""))
_ROLE_IN, _ROLE_OUT, _ROLE_PAR, _ROLE_PG = (_lib.ROLE_INPUT, _lib.ROLE_OUTPUT,
                                            _lib.ROLE_PARAMETERS, _lib.ROLE_PARAMETERS_GRAD)
_ROLE_KW = _lib.ROLE_KWARGS
_SEL_API, _SEL_CALLSITE = _lib.SELECT_API, _lib.SELECT_CALLSITE
_LEAF_PACK, _LEAF_SIZE, _MAX_DIMS = _lib.LEAF_PACK, _lib.LEAF_SIZE, _lib.MAX_DIMS
_KEYS = [str(i).encode() for i in range(64)]   # leaf keys b"0", b"1", ...


def _key(k):
    return _KEYS[k] if type(k) is int and 0 <= k < 64 else str(k).encode()


def _safe_name(s):
    """A module or parameter name as the probe can hold it: a NUL (torch's
    add_module accepts one) as U+FFFD, as nprobe reads msprobe's \\u0000.
    C strings end at a NUL: modules 'a\\0b' and 'a\\0c' both became
    'Module.a' (their leaves refused as duplicates), and the packed,
    NUL-separated leaf names of a call shifted. A lone surrogate (os.fsdecode
    of a name that is not UTF-8) as U+FFFD too: it cannot be encoded, and
    raised UnicodeEncodeError inside the user's forward."""
    s = s.replace("\0", "\ufffd") if "\0" in s else s
    try:
        s.encode()
    except UnicodeEncodeError:
        s = s.encode("utf-16", "surrogatepass").decode("utf-16", "replace")
    return s


def _safe_params(mod):
    return [(_safe_name(n), p) for n, p in mod.named_parameters(recurse=False)]


class _Tls(threading.local):
    depth = 0
    count = None     # {API: calls}: count-only (dtensor.hook_expert's run of an expert on 0 rows)
    ckpt = None      # the calls of a reentrant checkpoint's forward, as they open
    replay = None    # a reentrant checkpoint's recompute: _Replay


_tls = _Tls()
_current = None          # the debugger capturing now (between start and stop)
_scalers = weakref.WeakSet()
_debuggers = weakref.WeakSet()
_STRIDED = torch.strided


def _after_fork_in_child():
    """A forked child (a DataLoader worker forked after start(), ...)
    inherits the capturing state, not the probe's writer thread: it must
    never write into its parent's step (it took the step's lock, and the
    parent then dumped nothing). In the child every debugger of the parent
    is inert (start, step, close do nothing) and nothing is captured."""
    global _current
    _current = None
    for d in list(_debuggers):
        d._foreign = True


if hasattr(os, "register_at_fork"):
    os.register_at_fork(after_in_child=_after_fork_in_child)


def _version(t):
    """t._version, or -1 (the probe then never reuses its statistics) for an
    inference tensor, which has no version counter (reading it raised)."""
    try:
        return t._version
    except RuntimeError:
        return -1


# ---- names of positional arguments (for scalar rows) ------------------------

_argnames_cache = {}


def _argnames(fn, is_method):
    """Parameter names of `fn` from its signature or its docstring's first
    line ("add(input, other, *, alpha=1) -> Tensor"); [] when unknown."""
    r = _argnames_cache.get(fn)
    if r is not None:
        return r
    names = []
    try:
        import inspect
        names = [p.name for p in inspect.signature(fn).parameters.values()
                 if p.kind in (p.POSITIONAL_ONLY, p.POSITIONAL_OR_KEYWORD)]
    except (TypeError, ValueError):
        doc = _doc_signature(fn)
        if "(" in doc and ")" in doc:
            inner = doc[doc.index("(") + 1:doc.index(")")]
            for part in inner.split(","):
                part = part.strip().split("=")[0].strip()
                if part in ("*", "") or part.startswith("*"):
                    break
                names.append(part.split(":")[0].strip())
            if is_method:
                names = ["self"] + names
    if is_method and names and names[0] != "self":
        names = ["self"] + names
    _argnames_cache[fn] = names
    return names


def _doc_signature(fn):
    """The signature line at the head of a builtin's docstring, joined when
    it runs over several lines (torch 2.x's `scaled_dot_product_attention(
    query, key, value, attn_mask=None, dropout_p=0.0,\n is_causal=False,
    ...)`): the text up to its closing parenthesis; else the first line."""
    doc = (getattr(fn, "__doc__", None) or "").strip()
    first = doc.split("\n", 1)[0]
    if "(" in first and ")" not in first and ")" in doc:
        return " ".join(doc[:doc.index(")") + 1].split())
    return first


_NUM = (int, float)     # scalar arguments (bool is an int)
# String arguments dumped as numbers (docs/FORMAT.md, "Arguments"): the code
# of a string an op takes; any other string or object (torch.float32, a
# device) is dumped as NaN, so that a reader knows the argument was given.
_STR_CODES = {
    "approximate": {"none": 0.0, "tanh": 1.0},
    "reduction": {"none": 0.0, "mean": 1.0, "sum": 2.0},
    "padding": {"valid": 0.0},
}


# arguments that say where or in what type a result is stored, not its
# values (the dump records every tensor's dtype): not dumped
_DESCRIPTIVE = (torch.dtype, torch.device, torch.layout, torch.memory_format)


def _code(name, a):
    """The number a non-numeric argument is dumped as (None: not dumped)."""
    if a is None or isinstance(a, torch.Tensor) or isinstance(a, _DESCRIPTIVE):
        return None
    if isinstance(a, str):
        return _STR_CODES.get(name, {}).get(a, float("nan"))
    if isinstance(a, (list, tuple)) and any(isinstance(b, torch.Tensor) for b in a):
        return None       # tensors in a list: leaves of their own
    return float("nan")


# ---- backward through autograd ---------------------------------------------

class _Rec:
    """One call's backward: its name, the positions of the inputs whose
    gradients it produces, the gradients arriving at its outputs."""
    __slots__ = ("d", "name", "parent", "site", "idx", "out_idx", "gin", "has_in", "step",
                 "scalars", "module", "seen", "wait", "passes")

    def __init__(self, d, name, parent, site):
        self.d, self.name, self.parent, self.site = d, name, parent, site
        self.idx, self.out_idx, self.gin, self.has_in = [], [], None, False
        self.scalars, self.module = (), False
        self.seen = self.wait = self.passes = 0
        self.step = d._step


class _BwIn(torch.autograd.Function):
    """Identity on a call's inputs: its backward sees exactly the gradients
    this call produced for them (msprobe and torch's BackwardHook do the same).
    The outputs are aliases (`detach()`: same memory, same version counter),
    not views: a view made inside a custom Function may not be written in
    place (torch refuses, as it does for register_full_backward_hook), an
    alias may, and a saved tensor written later is still detected."""

    @staticmethod
    def forward(ctx, rec, *xs):
        ctx.rec = rec
        return tuple(x.detach() for x in xs)

    @staticmethod
    def backward(ctx, *gs):
        rec = ctx.rec
        rec.d._bw_emit(rec, gs)
        return (None,) + gs


def _out_hook(rec, k):
    """A tensor hook on a call's output k: the gradient arriving there (all
    its consumers' summed, as an identity function would see it). The call's
    backward row is written by its _BwIn, or, when none of its inputs needs
    a gradient, once every hooked output has its gradient."""
    def hook(g):
        rec.gin[k] = g
        rec.seen += 1
        if not rec.has_in and rec.seen % rec.wait == 0:     # every backward pass
            rec.d._bw_emit(rec, ())
    return hook


def _grad_tensor(x):
    return isinstance(x, torch.Tensor) and x.requires_grad and (
        x.is_floating_point() or x.is_complex())


# exact types that are never tensors nor hold any: isinstance(a, torch.Tensor)
# on them goes through the tensor metaclass's __instancecheck__ (a lookup and
# a call), which a set of types answers first
_NOT_TENSOR = frozenset((int, float, bool, str, type(None)))
_Tensor = torch.Tensor


def _flat_tensors(args, kwargs):
    """(path, tensor) for the tensors among args (one level of lists/tuples)
    and keyword arguments, in order; path = (pos,) / (pos, j) / (key,)."""
    out = []
    for i, a in enumerate(args):
        tp = type(a)
        if tp in _NOT_TENSOR:       # an int, float, bool, str or None: no tensor
            continue
        if tp is _Tensor or isinstance(a, _Tensor):
            out.append(((i,), a))
        elif isinstance(a, (list, tuple)):
            for j, b in enumerate(a):
                if isinstance(b, torch.Tensor):
                    out.append(((i, j), b))
    for k, a in kwargs.items():
        if isinstance(a, torch.Tensor):
            out.append(((k,), a))
    return out


def _replace(args, kwargs, paths, new):
    args = list(args)
    kwargs = dict(kwargs)
    for p, t in zip(paths, new):
        if isinstance(p[0], str):
            kwargs[p[0]] = t
        elif len(p) == 1:
            args[p[0]] = t
        else:
            seq = list(args[p[0]])
            seq[p[1]] = t
            args[p[0]] = type(args[p[0]])(seq) if isinstance(args[p[0]], tuple) else seq
    return tuple(args), kwargs


def _out_tensors(y):
    if isinstance(y, torch.Tensor):
        return [y]
    if isinstance(y, (list, tuple)):
        return [t for t in y if isinstance(t, torch.Tensor)]
    return []


def _wrap_outputs(y, rec):
    """Hook y's grad-requiring tensors (tensor hooks: y itself is returned,
    no autograd node is added in forward)."""
    _hook_outputs(_out_tensors(y), rec)
    return y


def _hook_outputs(outs, rec):
    """Hook the grad-requiring tensors among a call's outputs `outs`."""
    pos = [k for k, t in enumerate(outs) if _grad_tensor(t)]
    if pos:
        rec.gin = [None] * len(outs)
        rec.wait = len(pos)
        for k in pos:
            outs[k].register_hook(_out_hook(rec, k))


# ---- API wrappers -----------------------------------------------------------

def _pack_tensors(buf, off, role, ts, keys, keep):
    """The tensors `ts` (None skipped) packed into `buf` from `off` as
    np_probe_leaf rows of `role`, keyed keys[i] (or i), each kept in `keep`;
    the next offset, or -1 where a tensor needs _leaf's conversions."""
    try:
        for i, t in enumerate(ts):
            if t is None:
                continue
            shape = t.shape
            nd = len(shape)
            dt = _DT.get(t.dtype)
            if dt is None or nd > _MAX_DIMS or not t.is_cpu or t.is_neg():
                return -1
            _LEAF_PACK[nd].pack_into(buf, off, role, keys[i] if keys else i, -1, dt, nd,
                                     t.requires_grad, t.data_ptr(), t._version, 0.0, *shape,
                                     *t.stride())
            keep.append(t)
            off += _LEAF_SIZE
    except RuntimeError:
        # no sizes (nested), no storage (sparse), no version (inference mode)
        return -1
    return off


def _count_call(api, orig, args, kwargs):
    """Count-only mode: the call counted under its API, run uncaptured."""
    _tls.count[api] = _tls.count.get(api, 0) + 1
    _tls.depth += 1
    try:
        return orig(*args, **kwargs)
    finally:
        _tls.depth -= 1


def _make_wrapper(api, orig, is_method, inplace=False):
    op = api.rsplit(".", 1)[-1]      # the name ops.ALIAS knows it by

    @functools.wraps(orig)
    def wrapper(*args, **kwargs):
        d = _current
        # _compiling() first: while Dynamo traces the wrapper it must not
        # read the package's state (a guard on _tls.depth or _sel: a
        # recompile each time they change)
        if d is None or _compiling() or _tls.depth or not (d._sel & _SEL_API):
            if _tls.count is not None and _tls.depth == 1 and not _compiling():
                return _count_call(api, orig, args, kwargs)
            return orig(*args, **kwargs)
        if _distributed.on and _distributed.internal(sys._getframe(1)):
            return _distributed.run_internal(orig, args, kwargs)
        ip = inplace or ((kwargs or len(args) > 1) and
                         _inplace_flag(orig, is_method, args, kwargs))
        if d._timed is not None:      # the profile task (profile.py): the call timed
            return d._timed(api, orig, args, kwargs, ip)
        if ip:
            return d._inplace_call(api, orig, is_method, args, kwargs)
        if op in ops.ALIAS:
            return d._alias_call(api, orig, is_method, args, kwargs)
        return d._api_call(api, op, orig, is_method, args, kwargs)
    wrapper._nprobe_orig = orig
    return wrapper


def _inplace_flag(fn, is_method, args, kwargs):
    """An `inplace=True` argument (F.relu, F.dropout, ...): the call writes
    into its first argument."""
    if kwargs.get("inplace") is True:
        return True
    for a in args[1:]:
        if a is True:
            break
    else:
        return False
    names = _argnames(fn, is_method)
    return "inplace" in names and names.index("inplace") < len(args) and \
        args[names.index("inplace")] is True


_installed = False


_opt_d = None           # the debugger whose optimizer step is being renumbered (ep_optim)


def _opt_pre(opt, args, kwargs):
    """Every optimizer's step, before: under expert parallel the step's API
    calls are numbered as one process numbers them (ep_optim)."""
    global _opt_d
    d = _current
    # a dump task's debugger with experts (the profile task's has none)
    if d is None or not getattr(d, "_experts", None) or d._foreign or not d._in_step or \
            not d._sel or _tls.depth:
        return
    try:
        d._opt = _ep_optim.begin(d, opt)
        _opt_d = d if d._opt is not None else None
    except Exception as e:  # noqa: BLE001 - the user's step must not fail for the dump
        d._opt = None
        d._skip("optimizer " + type(e).__name__, "the optimizer's calls are numbered per "
                f"rank ({type(e).__name__}: {e})")


def _opt_post(opt, args, kwargs):
    global _opt_d
    d, _opt_d = _opt_d, None
    if d is not None and getattr(d, "_opt", None) is not None:
        with d._lock:
            d._opt.finish()
        d._opt = None


def _patch_optimizer_steps():
    """The global step hooks of torch.optim (torch >= 2.0) for ep_optim."""
    try:
        from torch.optim.optimizer import (register_optimizer_step_post_hook,
                                           register_optimizer_step_pre_hook)
    except ImportError:     # an older torch: the optimizer's calls numbered per rank
        return
    register_optimizer_step_pre_hook(_opt_pre)
    register_optimizer_step_post_hook(_opt_post)


def _install():
    global _installed
    if _installed:
        return
    _installed = True
    F = torch.nn.functional
    for name in ops.FUNCTIONAL:
        f = getattr(F, name, None)
        if callable(f) and not hasattr(f, "_nprobe_orig"):
            setattr(F, name, _make_wrapper("Functional." + name, f, False))
    for name in ops.TORCH:
        f = getattr(torch, name, None)
        if callable(f) and not isinstance(f, type) and not hasattr(f, "_nprobe_orig"):
            setattr(torch, name, _make_wrapper("Torch." + name, f, False))
    _install_inplace_functions(F, torch)
    for name in ops.TENSOR:
        if name in ops.TENSOR_SKIP or name in ops.TENSOR_INPLACE:
            continue
        f = getattr(torch.Tensor, name, None)
        if callable(f) and not hasattr(f, "_nprobe_orig"):
            setattr(torch.Tensor, name, _make_wrapper("Tensor." + name, f, True))
    for name in ops.TENSOR_INPLACE:
        f = getattr(torch.Tensor, name, None)
        if callable(f) and not hasattr(f, "_nprobe_orig"):
            setattr(torch.Tensor, name, _make_wrapper("Tensor." + name, f, True, inplace=True))
    if not hasattr(F, "scaled_dot_product_attention"):
        F.scaled_dot_product_attention = _make_wrapper(
            "Functional.scaled_dot_product_attention", _sdpa, False)
    _patch_scaler()
    _patch_checkpoint()
    _patch_optimizer_steps()
    # autograd's own entry points run torch code (ones_like for the seed
    # gradient, ...) that is not the model's
    torch.autograd.backward = _paused(torch.autograd.backward)
    torch.Tensor.backward = _paused(torch.Tensor.backward)


def _install_inplace_functions(F, torch_mod):
    """The functions that write into their first argument (`F.relu_`,
    `torch.sigmoid_`, ...: ops.FUNCTIONAL_INPLACE, ops.TORCH_INPLACE),
    recorded as the in-place Tensor methods are."""
    for mod, prefix, names in ((F, "Functional.", ops.FUNCTIONAL_INPLACE),
                               (torch_mod, "Torch.", ops.TORCH_INPLACE)):
        for name in names:
            f = getattr(mod, name, None)
            if callable(f) and not isinstance(f, type) and not hasattr(f, "_nprobe_orig"):
                setattr(mod, name, _make_wrapper(prefix + name, f, False, inplace=True))


def _sdpa(query, key, value, attn_mask=None, dropout_p=0.0, is_causal=False, scale=None):
    """torch.nn.functional.scaled_dot_product_attention for a torch that has
    none (1.13): the math of torch 2.x's reference, one API call in the dump."""
    L, S = query.shape[-2], key.shape[-2]
    s = scale if scale is not None else 1.0 / (query.shape[-1] ** 0.5)
    att = torch.matmul(query, key.transpose(-2, -1)) * s
    if is_causal:
        keep = torch.ones(L, S, dtype=torch.bool, device=query.device).tril()
        att = att.masked_fill(~keep, float("-inf"))
    if attn_mask is not None:
        if attn_mask.dtype == torch.bool:
            att = att.masked_fill(~attn_mask, float("-inf"))
        else:
            att = att + attn_mask
    att = torch.softmax(att, dim=-1)
    if dropout_p > 0.0:
        att = torch.dropout(att, dropout_p, True)
    return torch.matmul(att, value)


def wrap_api(name, fn):
    """Make `fn` (a custom or fused op of one's own) a captured API named
    `name` ("Functional.cross_entropy", "Npu.fused_rms_norm", ...): calls are
    numbered per step like msprobe's, with forward and backward rows. A
    name with a NUL is refused (C would cut it there)."""
    if not isinstance(name, str):
        raise TypeError(f"wrap_api: the name must be a str, not {type(name).__name__}")
    if "\0" in name:
        raise ValueError(f"wrap_api: the name {name!r} holds a NUL character")
    return _make_wrapper(_safe_name(name), fn, False)


def _paused(fn):
    @functools.wraps(fn)
    def run(*a, **k):
        _tls.depth += 1
        try:
            return fn(*a, **k)
        finally:
            _tls.depth -= 1
    run._nprobe_paused = True
    return run


def _patch_scaler():
    """Know the loss scalers: torch.amp.GradScaler (torch 2.x, any device:
    GradScaler("cpu") with fp16 autocast on CPU) and torch.cuda.amp's (its
    subclass in 2.x), from their creation (patched when the package is
    imported) or, for one made before that, from its first scale()."""
    for mod in (getattr(torch.cuda, "amp", None), getattr(torch, "amp", None)):
        cls = getattr(mod, "GradScaler", None) if mod else None
        if cls is None or getattr(cls.__init__, "_nprobe_seen", False):
            continue
        init = cls.__init__

        def seen(self, *a, _init=init, **k):
            _init(self, *a, **k)
            _scalers.add(self)
        seen._nprobe_seen = True
        cls.__init__ = seen
        scale = cls.__dict__.get("scale")
        if scale is not None:
            def scaled(self, outputs, _scale=scale):
                _scalers.add(self)
                _scaler_used[0] = weakref.ref(self)
                return _scale(self, outputs)
            functools.update_wrapper(scaled, scale)
            cls.scale = scaled


_scaler_used = [None]     # a weak reference to the scaler that scaled a loss last


def _dp_reduce_arg(v):
    """PrecisionDebugger(data_parallel_reduce=...): None, "avg", "sum" or a
    positive number (the divisor of the summed gradients)."""
    if v is None or v in ("avg", "sum"):
        return v
    if isinstance(v, (int, float)) and not isinstance(v, bool) and v > 0:
        return float(v)
    raise ValueError(f"PrecisionDebugger: data_parallel_reduce={v!r}: not 'avg', 'sum' or a "
                     "positive number")


def _loss_scale():
    """The scale the step's gradients will carry: that of the scaler that
    scaled a loss last, else of any enabled scaler, else 1."""
    ref = _scaler_used[0]
    sc = ref() if ref is not None else None
    for s in ([sc] if sc is not None else []) + list(_scalers):
        if s.is_enabled():
            return float(s.get_scale())
    return 1.0


def _autocast_dtype():
    """The dtype of the autocast region in force (a GPU/NPU one first, then
    CPU), None outside one. torch 2.x asks by device type
    (`is_autocast_enabled("cpu")`, `get_autocast_dtype`); its
    `is_autocast_cpu_enabled` / `get_autocast_gpu_dtype` are deprecated
    (a warning per call), so they serve only a torch without the former."""
    if hasattr(torch, "get_autocast_dtype"):
        for dev in ("cuda", "npu", "xpu", "cpu"):
            try:
                if torch.is_autocast_enabled(dev):
                    return torch.get_autocast_dtype(dev)
            except (RuntimeError, TypeError, ValueError):
                continue      # a device type this torch does not know
        return None
    if torch.is_autocast_enabled():
        return torch.get_autocast_gpu_dtype()
    if hasattr(torch, "is_autocast_cpu_enabled") and torch.is_autocast_cpu_enabled():
        return torch.get_autocast_cpu_dtype()
    return None


# ---- activation checkpointing (torch.utils.checkpoint) ----------------------
#
# A checkpointed region's forward runs again in backward. Its recomputed
# calls take no new numbers and write no forward rows:
# - use_reentrant=False: the backward runs through the original forward's
#   graph (the recompute only refills saved tensors), so the recompute is
#   run untouched (the package's depth count, as for autograd's own code);
# - use_reentrant=True: the original forward runs without grad (no
#   backward hooks), the backward runs through the recomputed graph; the
#   recomputed calls take the names (numbers) of the original forward's
#   calls, in order, get their backward hooks, and their backward rows'
#   callsite starts with RECOMPUTED.

RECOMPUTED = b"(recomputed)"


class _Replay:
    """A reentrant checkpoint's recompute: the original forward's calls
    [[key, n, callsite]] in order (key: the API name or ("module", path)),
    and the enclosing module call of the region."""
    __slots__ = ("calls", "pos", "parent", "site")

    def __init__(self, calls, parent):
        self.calls, self.pos, self.parent, self.site = calls, 0, parent, None

    def number(self, key):
        """The original number of the next recomputed call `key` (its
        callsite in .site), None when the recompute parts from the
        original's order."""
        self.site = None
        if self.pos < len(self.calls) and self.calls[self.pos][0] == key:
            self.pos += 1
            _, n, self.site = self.calls[self.pos - 1]
            return n
        return None


def _patch_checkpoint():
    try:
        import torch.utils.checkpoint as ck
    except ImportError:
        return
    hook = getattr(ck, "_recomputation_hook", None)
    if isinstance(hook, type) and not getattr(hook, "_nprobe", False):
        class _Recomputation(hook):
            """The non-reentrant recompute, run untouched."""
            _nprobe = True

            def __enter__(self):
                _tls.depth += 1
                try:
                    return super().__enter__()
                except BaseException:
                    _tls.depth -= 1
                    raise

            def __exit__(self, *exc):
                try:
                    return super().__exit__(*exc)
                finally:
                    _tls.depth -= 1
        ck._recomputation_hook = _Recomputation
    fn = getattr(ck, "CheckpointFunction", None)
    if fn is None or getattr(fn.forward, "_nprobe", False):
        return
    fwd, bwd = fn.forward, fn.backward

    def forward(ctx, *args):
        d = _current
        if d is None or _tls.depth:
            return fwd(ctx, *args)
        saved, _tls.ckpt = _tls.ckpt, []
        parent = d._mstack[-1] if d._mstack else None
        try:
            return fwd(ctx, *args)
        finally:
            d._ckpt_calls[id(ctx)] = (_tls.ckpt, parent, d._step)
            _tls.ckpt = saved if saved is None else saved + _tls.ckpt

    def backward(ctx, *grads):
        d = _current
        rec = d._ckpt_calls.pop(id(ctx), None) if d is not None else None
        if rec is None or rec[2] != d._step:
            return bwd(ctx, *grads)
        saved = _tls.depth, _tls.replay
        _tls.depth, _tls.replay = 0, _Replay(rec[0], rec[1])
        if rec[1]:
            d._mstack.append(rec[1])
        try:
            return bwd(ctx, *grads)
        finally:
            if rec[1] and d._mstack and d._mstack[-1] == rec[1]:
                d._mstack.pop()
            _tls.depth, _tls.replay = saved
    forward._nprobe = True
    fn.forward, fn.backward = staticmethod(forward), staticmethod(backward)


def _ckpt_site(site):
    """A call's callsite as its rows carry it: in a reentrant checkpoint's
    recompute the original call's, marked RECOMPUTED; in its forward, kept
    for the recompute."""
    rp = _tls.replay
    if rp is not None:
        site = rp.site or site
        return RECOMPUTED + b" " + site if site else RECOMPUTED
    if _tls.ckpt:
        _tls.ckpt[-1][2] = site
    return site


# ---- torch.compile --------------------------------------------------------
#
# Dynamo traces the Python a compiled region runs, the package's hooks and
# wrappers included. The API wrappers step aside while it traces (the op
# goes into the graph as the original; the compiled code makes no API
# rows); the module hooks are kept out of its graphs (torch.compiler.disable:
# a graph break at each, run eagerly), so a compiled model still has its
# module rows, forward and backward, on its compiled regions' boundaries.
# PrecisionDebugger(torch_compile="eager") runs compiled code uncompiled
# while capturing (torch.compiler.set_stance("force_eager")): every row,
# as in eager mode.

_compiling = getattr(getattr(torch, "compiler", None), "is_compiling", None) or \
    getattr(getattr(torch, "_dynamo", None), "is_compiling", None) or (lambda: False)


def _dynamo_loaded():
    """torch.compile is in use in this process: torch._dynamo is imported
    (torch.compile imports it at its first call)."""
    return "torch._dynamo" in sys.modules


def _eager_hook(fn):
    """fn kept out of torch.compile's graphs (a torch without it: fn).
    torch.compiler.disable imports torch._dynamo (~1.7 s of every process),
    so only once torch.compile is in use; hooks registered before are
    disabled when a later start() finds it in use (_Debugger._eager_hooks)."""
    if not _dynamo_loaded():
        return fn
    disable = getattr(getattr(torch, "compiler", None), "disable", None)
    return disable(fn) if disable is not None else fn


def _compiled_path(path):
    """A module path with torch.compile's wrapper level (`_orig_mod`, the
    OptimizedModule's model) left out, so that a compiled model's modules
    are named as the eager model's; "" for the wrapped model itself."""
    if "_orig_mod" not in path:
        return path
    return ".".join(p for p in path.split(".") if p != "_orig_mod")


def _is_compile_wrapper(mod):
    return type(mod).__name__ == "OptimizedModule" and hasattr(mod, "_orig_mod")


_COMPILE_MODES = ("capture", "eager")


def _set_eager(on, saved=None):
    """torch.compile's stance: force_eager (on), else back to `saved`; the
    stance in force before, None where this torch has no stances."""
    set_stance = getattr(getattr(torch, "compiler", None), "set_stance", None)
    if set_stance is None:
        return None
    ef = getattr(getattr(torch, "_dynamo", None), "eval_frame", None)
    prior = getattr(ef, "_stance", None)
    prior = getattr(prior, "stance", None) or "default"
    set_stance("force_eager" if on else (saved or "default"))
    return prior


# Keyed by id(code object), not by the code object: hashing a code object
# hashes its name, bytecode, constants and names each time (Python 3.11
# does not cache it), which was ~4 % of a dumped call's instructions. Each
# entry keeps its code object alive, so no other code object can take its
# id while the entry exists.
_skip_code = {}     # id(code object) -> (code object, True when it is torch's or nprobe's own)
_sites = {}         # (id(code object), f_lasti) -> b"file.py:42 function"


def _callsite(depth=2):
    """The first frame outside torch and nprobe, from `depth` frames up, as
    b"file:line function"; what a code object is and the text of a call
    instruction (code, f_lasti: one line, read from the code's line table
    only the first time) are looked up once."""
    f = sys._getframe(depth)
    while f is not None:
        c = f.f_code
        k = id(c)
        e = _skip_code.get(k)
        if e is None or e[0] is not c:
            e = _skip_code[k] = (c, c.co_filename.startswith(_SKIP_DIRS))
        if not e[1]:
            key = (k, f.f_lasti)
            site = _sites.get(key)
            if site is None:
                site = _sites[key] = (f"{os.path.basename(c.co_filename)}:{f.f_lineno} "
                                      f"{c.co_name}").encode("utf-8", "replace")
            return site
        f = f.f_back
    return None


def _bw_name(fwd):
    return fwd.replace(".forward.", ".backward.") if fwd else None


def _compile_mode(arg):
    """PrecisionDebugger's torch_compile, else $NPROBE_TORCH_COMPILE:
    "capture" (the default) or "eager"."""
    mode = arg if arg is not None else os.environ.get("NPROBE_TORCH_COMPILE") or "capture"
    if mode not in _COMPILE_MODES:
        src = "torch_compile" if arg is not None else "$NPROBE_TORCH_COMPILE"
        raise ValueError(f"PrecisionDebugger: {src} {mode!r}: one of "
                         f"{', '.join(_COMPILE_MODES)}")
    return mode


def _rank():
    dist = getattr(torch, "distributed", None)
    if dist is not None and dist.is_available() and dist.is_initialized():
        return dist.get_rank(), dist.get_world_size()
    r = os.environ.get("RANK", os.environ.get("LOCAL_RANK", "0"))
    w = os.environ.get("WORLD_SIZE", "1")
    try:
        return int(r), int(w)
    except ValueError:
        return 0, 1


# ---- the debugger -----------------------------------------------------------

class _on_latest:
    """A method that msprobe's scripts also call on the class
    (PrecisionDebugger.start()): there it acts on the latest instance."""

    def __init__(self, fn):
        self.fn = fn
        functools.update_wrapper(self, fn)

    def __get__(self, obj, cls):
        if obj is None:
            obj = cls._latest
            if obj is None:
                raise RuntimeError(f"PrecisionDebugger.{self.fn.__name__}: no PrecisionDebugger "
                                   "made yet (PrecisionDebugger(config_path=...) first)")
            if type(obj) is not cls:      # a ProfileDebugger (the profile task): its own method
                return getattr(obj, self.fn.__name__)
        return functools.partial(self.fn, obj)


def _override_config(path, over):
    """The config text of `path` with msprobe's constructor overrides (task,
    dump_path, level, step) applied."""
    import json
    try:
        with open(path, encoding="utf-8") as f:
            cfg = json.load(f)
    except (OSError, ValueError) as e:
        raise ValueError(f"PrecisionDebugger: config_path {path}: {e}") from None
    if not isinstance(cfg, dict):
        raise ValueError(f"PrecisionDebugger: config_path {path}: not a JSON object")
    cfg.update(over)
    return json.dumps(cfg)


# ---- per-op precision overrides (docs/CONFIG.md "fp32_ops", docs/TORCH.md) ----
# ops autocast runs in its low dtype: a promoted call's output is cast back
# to the autocast dtype, as the code after it expects
_AUTOCAST_LOWER = {"linear", "matmul", "mm", "bmm", "addmm", "addbmm", "baddbmm", "conv1d", "conv2d",
                   "conv3d", "conv_transpose1d", "conv_transpose2d", "conv_transpose3d",
                   "scaled_dot_product_attention", "einsum", "prelu", "chain_matmul", "addmv",
                   "addr", "matrix_power", "mv", "dot", "vdot"}


def _fp32_ops(path):
    """The overrides: $NPROBE_FP32_OPS (comma-separated) and the config's
    fp32_ops list (the C probe has checked its type)."""
    import json
    out = [e for e in os.environ.get("NPROBE_FP32_OPS", "").replace(" ", ",").split(",") if e]
    try:
        with open(path, encoding="utf-8") as f:
            cfg = json.load(f)
        lst = cfg.get("fp32_ops", []) if isinstance(cfg, dict) else []
        out += [e for e in lst if isinstance(e, str) and e]
    except (OSError, ValueError):
        pass
    return tuple(out)


def _fp32_module(e):
    """The module path of an entry ("Module.h.0.ln_1.LayerNorm.forward.0" or
    "h.0.ln_1": "h.0.ln_1")."""
    return e[7:].rsplit(".", 3)[0] if e.startswith("Module.") and e.count(".") >= 4 else e


def _fp32_match(entries, api, n, parent):
    """A call `api` numbered n inside module call `parent` ("Module.h.0.ln_1.
    LayerNorm.forward.0") is listed: by the path of a module around it (the
    path or a prefix of it): "module"; by API name or API call ("api.n"):
    "call"; else None."""
    path = None
    if parent and parent.startswith("Module."):
        body = parent[7:].rsplit(".", 3)[0]       # drop ".Class.forward.N"
        path = body
    call = f"{api}.{n}"
    how = None
    for e in entries:
        if e == api or e == call or e == call + ".forward":
            how = "call"
        if path is not None:
            m = _fp32_module(e)
            if path == m or path.startswith(m + "."):
                return "module"
    return how


def _low_dtype(xs):
    """The one bf16/fp16 dtype among the tensors xs (nested lists too), or None."""
    seen = set()

    def visit(x):
        if isinstance(x, torch.Tensor) and x.dtype in (torch.float16, torch.bfloat16):
            seen.add(x.dtype)
        elif isinstance(x, (list, tuple)):
            for v in x:
                visit(v)
    visit(xs)
    return seen.pop() if len(seen) == 1 else None


def _cast_floats(x, dt):
    if isinstance(x, torch.Tensor) and x.is_floating_point() and x.dtype != dt:
        return x.to(dt)
    if isinstance(x, (list, tuple)) and not hasattr(x, "_fields"):
        return type(x)(_cast_floats(v, dt) for v in x)
    return x


def _promote_module(mod):
    """A module listed in fp32_ops runs in float32 as a whole: the calls
    inside keep their float32 outputs (_run_fp32 with keep=True), and the
    module's floating outputs are cast back, at its boundary, to the one
    low dtype its inputs came in (none: left float32; the caller's autocast
    ops lower them again). Hooks put first, so the dump records what the
    caller gets."""
    stack = []

    def pre(m, args):
        stack.append(_low_dtype(args))

    def post(m, args, out):
        dt = stack.pop() if stack else None
        return _cast_floats(out, dt) if dt is not None else None
    try:
        mod.register_forward_pre_hook(pre, prepend=True)
        mod.register_forward_hook(post, prepend=True)
    except TypeError:       # torch < 2.0: no prepend
        mod.register_forward_pre_hook(pre)
        mod.register_forward_hook(post)


def _run_fp32(op, fn, args, kwargs, keep=False):
    """fn in float32 with autocast off: bf16/fp16 tensor arguments cast up,
    the outputs cast back to what the surrounding code expects (the
    autocast dtype for an op autocast lowers, else the common low dtype of
    the inputs); keep: left float32 (a call inside a promoted module)."""
    ac = _autocast_dtype()
    low = (torch.float16, torch.bfloat16)
    seen = set()

    def up(x):
        if isinstance(x, torch.Tensor) and x.dtype in low:
            seen.add(x.dtype)
            return x.float()
        if isinstance(x, (list, tuple)):
            return type(x)(up(v) for v in x)
        return x
    a2 = [up(a) for a in args]
    k2 = {k: up(v) for k, v in kwargs.items()}
    dev = next((t.device.type for t in _flat_iter(args, kwargs)), "cpu")
    with torch.autocast(device_type=dev, enabled=False):
        y = fn(*a2, **k2)
    back = ac if (ac is not None and op in _AUTOCAST_LOWER) else (seen.pop() if len(seen) == 1 else None)
    if back is None or keep:
        return y

    def down(x):
        if isinstance(x, torch.Tensor) and x.is_floating_point() and x.dtype != back:
            return x.to(back)
        if isinstance(x, (list, tuple)):
            return type(x)(down(v) for v in x)
        return x
    return down(y)


def _flat_iter(args, kwargs):
    for x in list(args) + list(kwargs.values()):
        if isinstance(x, torch.Tensor):
            yield x
        elif isinstance(x, (list, tuple)):
            for v in x:
                if isinstance(v, torch.Tensor):
                    yield v


class PrecisionDebugger:
    """msprobe's PrecisionDebugger over nprobe's probe.

    config_path: the config.json of `nprobe dump` (docs/CONFIG.md).
    $NPROBE_DUMP_CONFIG, which `nprobe dump -c CFG -- python3 train.py`
    sets, takes precedence, so the wrapped run dumps where nprobe dump looks.
    precision: "fp32", "bf16", "fp16" for the dump's root attribute; None
    detects it per step (an autocast region, else the parameters' dtype).
    data_parallel: the name of the device-mesh dimension whose ranks each
    train on their own part of the batch (FSDP2's "dp"): activations are
    written as Shard(0) of the batch along it, so that compare against one
    process on the whole batch assembles it (docs/TORCH.md "Data parallel").
    A model under DistributedDataParallel (no device mesh) gets a 1-D mesh
    of that name over the world (none, with a warning, when DDP's process
    group is not the world). Several names (a tuple: ("dp", "ep")): each
    rank of their grid its own part, the earlier dimension outer.
    data_parallel_reduce: how the data-parallel reduction combines the
    ranks' gradients: "avg" (FSDP2's and DDP's default), "sum", or the
    number they are divided by; None reads it from the model (FSDP2's
    gradient divide factor, DDP's average), else "sum".
    device_mesh: for a model without DTensors, the torch DeviceMesh that
    says where the ranks lie (DDP on a subgroup: the dp line of it, the
    other dimensions replicas); the model's DTensors' mesh takes precedence.
    experts: expert parallel (docs/TORCH.md "Expert parallel"): the module
    path of the experts' container, or {path: the global index of this
    rank's first expert}, or {path: (that index, the experts of all
    ranks)} where the ranks hold unequal numbers.
    expert_parallel: the mesh dimension along which the ranks hold
    different experts (default: the last of data_parallel's); the other
    data_parallel dimensions hold replicas of them, each on its own tokens.
    A bad config raises NprobeError before anything is written.
    """

    _use_env = True     # $NPROBE_DUMP_CONFIG first (not the monitor's ring: ring.py)

    def __new__(cls, config_path=None, task=None, *args, **kwargs):
        # "task": "profile": torch.profiler instead of the probe (profile.py)
        if cls is PrecisionDebugger:
            from . import profile
            if profile.config_is_profile(os.environ.get("NPROBE_DUMP_CONFIG") or config_path,
                                         None if os.environ.get("NPROBE_DUMP_CONFIG") else task):
                return super().__new__(profile.ProfileDebugger)
        return super().__new__(cls)

    def __init__(self, config_path=None, task=None, dump_path=None, level=None, step=None,
                 precision=None, device=None, torch_compile=None, data_parallel=None,
                 data_parallel_reduce=None, device_mesh=None, experts=None,
                 expert_parallel=None, **_ignored):
        env = os.environ.get("NPROBE_DUMP_CONFIG") if self._use_env else None
        path = env or config_path
        if not path:
            raise ValueError("PrecisionDebugger: no config (config_path=... or "
                             "NPROBE_DUMP_CONFIG)")
        self.config_path = path
        # msprobe's keyword overrides of the config (not under `nprobe dump`,
        # whose config says where the dump goes)
        over = {k: v for k, v in (("task", task), ("dump_path", dump_path), ("level", level),
                                  ("step", step)) if v is not None}
        text = None if env or not over else _override_config(path, over)
        self._precision, self._device = precision, device
        self._dp_reduce = _dp_reduce_arg(data_parallel_reduce)
        self._fp32 = _fp32_ops(path)
        self._compile_mode = _compile_mode(torch_compile)
        self._stance = None
        self._err = _lib.Error()
        self._eref = ctypes.byref(self._err)
        self._meta = _lib.Meta(b"pytorch", b"cpu", b"fp32", 0, 1)
        p = ctypes.c_void_p()
        if text is not None:
            rc = _lib.probe_open_json(ctypes.byref(p), _lib.text_arg(text, "PrecisionDebugger"),
                                      ctypes.byref(self._meta), self._eref)
        else:
            cpath = _lib.path_arg(path, "PrecisionDebugger: config_path")
            rc = _lib.probe_open(ctypes.byref(p), cpath, ctypes.byref(self._meta), self._eref)
        if rc:
            raise self._err.exception()
        self._p = p
        self._task = _lib.probe_task_of(p)
        self._stats_on_device = self._task == 0
        self._view = _lib.View()
        self._shape = (ctypes.c_int64 * _lib.MAX_DIMS)()
        self._strides = (ctypes.c_int64 * _lib.MAX_DIMS)()
        self._view.size = ctypes.sizeof(_lib.View)
        self._view.shape = ctypes.cast(self._shape, ctypes.POINTER(ctypes.c_int64))
        self._view.strides = ctypes.cast(self._strides, ctypes.POINTER(ctypes.c_int64))
        self._vref = ctypes.byref(self._view)
        # the tensors of the last VIEW_REUSE views, kept alive so that the
        # probe may reuse their statistics by address and version
        self._recent = collections.deque(maxlen=_lib.VIEW_REUSE)
        self._lstats = _lib.LeafStats()
        # np_probe_dump_call's leaves (grown as a call needs)
        self._cap = 64
        self._buf = ctypes.create_string_buffer(self._cap * _LEAF_SIZE)
        self._addr = ctypes.addressof(self._buf)
        self._refused = ctypes.c_int()
        self._refref = ctypes.byref(self._refused)
        self._lstats.size = ctypes.sizeof(_lib.LeafStats)
        self._lstats.shape = self._view.shape
        self._lock = threading.RLock()
        self._step = 0
        self._in_step = self._begun = False
        self._sel = 0
        self._models = []
        self._hooked = set()
        self._plain_hooks = []      # (hooks dict, handle id, fn) registered before torch.compile was in use
        self._pgrads = {}
        self._mstack = []
        self._counts, self._mcounts = {}, {}
        self._ep_state = {}      # expert parallel: container -> its API numbering (dtensor.hook_expert)
        self._local_calls = {}   # call -> its forward's Local() inputs (dtensor.routing_rows)
        self._param_ins = {}     # call -> its forward's Parameter inputs (dtensor.dp_rows)
        self._ep_calls = {}      # an API call inside an expert -> it (dtensor.expert_call)
        self._ep_rows = {}       # an expert (global path) -> its input's rows (dtensor.hook_expert)
        self._opt = None         # an optimizer step's numbering under expert parallel (ep_optim)
        self._ckpt_calls = {}    # id(ctx) of a reentrant checkpoint -> its forward's calls
        self._errors = 0
        self._first_error = None
        self._closed = False
        self._foreign = False     # True in a forked child: the parent's debugger
        self._outer = None        # the debugger this one's start() interrupted
        self._skipped = {}        # what was not dumped as the program saw it: kind -> leaves
        self._mesh = None         # the device mesh of the DTensor leaves (dtensor.py)
        self._dp = data_parallel  # the mesh dimension whose ranks see different batches
        self._user_mesh = device_mesh  # a DeviceMesh for a model without DTensors
        # expert parallel: {container path: the global index of its first
        # expert here}: its experts named by their global index, their rows
        # whole on this rank (dtensor.expert_call)
        self._experts, self._experts_total = _dtensor.experts_arg(experts)
        self._ep_dim = expert_parallel   # the mesh dimension of expert parallel
        self._ep_k = None         # its index in the mesh (dtensor.set_mesh)
        self._dp_k = None         # its index in the mesh (dtensor.set_mesh)
        self._dp_batch = None     # the step's local batch size (dtensor.dp_rows)
        self._dp_div = 1.0        # what the dp reduction divides the summed gradients by
        self._dp_red = {}         # the step's calls with a reduction= argument: call -> it
        self._mb = None           # a pipeline's micro-batches: the mesh's mb size (dtensor.set_mesh)
        self._mb_div = 1.0        # what its schedule divides the accumulated gradients by
        self._pp_k = None         # the pipeline's dimension in the mesh (dtensor.collective_rows)
        self._mb_batch = None     # the step's micro-batch size (dtensor.mb_context)
        self._mb_sizes = None     # unequal micro-batches: their sizes (dtensor.set_mesh)
        self._mb_red = {}         # the step's reductions of a batched input: call -> "A"/"P"
        self._unplaced = 0        # DTensor leaves dumped without a placement row
        self._placed = []         # the step's placement rows: (call, role, key, PlaceRow)
        self._shards = {}         # the step's placed shards by memory (dtensor._known)
        self._phooked = {}        # id -> weak reference of the parameters hooked
        self.summary = None
        PrecisionDebugger._latest = self
        _debuggers.add(self)
        atexit.register(self._at_exit)

    # ---- msprobe's interface ----------------------------------------------
    # start, stop, step, set_init_step and save are called on the instance or,
    # as msprobe's classmethods allow, on the class (the latest instance).
    _latest = None
    _timed = None       # the profile task's call timer (profile.py); None: the dump

    @_on_latest
    def start(self, model=None, token_range=None, rank_id=None, **_ignored):
        """Capture from now on (hooks `model`'s modules the first time).
        msprobe's token_range and rank_id (inference dumps) are accepted and
        not used: every rank in the config's "rank" list dumps."""
        global _current
        if self._closed or self._foreign:
            return
        _install()
        _distributed.install()
        if model is not None:
            self._hook_model(model)
        if self._plain_hooks and _dynamo_loaded():
            self._eager_hooks()
        if not self._in_step:
            self._open_step()
        if self._compile_mode == "eager" and self._stance is None:
            self._stance = _set_eager(True) or "default"
        if _current is not None and _current is not self:
            # one debugger inside another: the inner one captures until its
            # stop(), then the outer one again (it recorded nothing, silently)
            warnings.warn(f"nprobe: PrecisionDebugger({self.config_path!r}).start() while "
                          f"another debugger ({_current.config_path!r}) is capturing: this one "
                          "captures until its stop(), the other records nothing meanwhile",
                          stacklevel=2)
            self._outer = _current
        _current = self

    @_on_latest
    def stop(self):
        """Stop capturing; the step's parameter gradients are recorded."""
        global _current
        if self._foreign:
            return
        if _current is self:
            outer, self._outer = self._outer, None
            _current = outer if outer is not None and not outer._closed else None
        if self._stance is not None:
            _set_eager(False, self._stance)
            self._stance = None
        self._flush_param_grads()

    @_on_latest
    def set_init_step(self, step):
        """The number of the step in progress (msprobe's set_init_step: a
        resumed run numbers its steps on); before the step's first row."""
        if not isinstance(step, int) or step < 0:
            raise ValueError(f"PrecisionDebugger.set_init_step: expected an int >= 0, got {step!r}")
        with self._lock:
            if self._begun:
                raise RuntimeError("PrecisionDebugger.set_init_step: the step has begun")
            self._step = step
            if self._in_step:
                self._sel = _lib.probe_selects(self._p, step)

    @_on_latest
    def save(self, variable, name, save_backward=True):
        """msprobe's debug save of one variable: not supported by nprobe
        (warned once, nothing written)."""
        if not getattr(self, "_save_warned", False):
            self._save_warned = True
            warnings.warn("nprobe: PrecisionDebugger.save is not supported; nothing saved")

    @_on_latest
    def step(self):
        """End the step: its file is completed; the next step begins."""
        if self._foreign:
            return
        with self._lock:
            self._flush_param_grads()
            if self._in_step and self._begun:
                if _lib.probe_step_end(self._p, self._eref):
                    self._note_error()
            self._in_step = self._begun = False
            self._step += 1
            if _current is self:
                self._open_step()

    def close(self):
        """Close the probe. A step in progress is completed when capture was
        stopped (stop() before close()); one still capturing was interrupted
        (an exception through a `finally: close()`) and stays incomplete."""
        self._close(interrupted=_current is self)

    def _at_exit(self):
        """At exit a step that step() did not end was interrupted (an uncaught
        exception, Ctrl-C, sys.exit in the middle of it): it stays
        dump.h5.partial with complete = 0, as a killed run leaves it (it was
        stamped complete, and compared as a clean pass)."""
        self._close(interrupted=True)

    def _close(self, interrupted):
        global _current
        if self._closed or self._foreign:
            return
        if _current is self:
            _current = self._outer if self._outer is not None and not self._outer._closed \
                else None
        with self._lock:
            self._flush_param_grads()
            if interrupted and self._in_step and self._begun:
                _lib.probe_abandon(self._p)
            self._in_step = self._begun = False
            self._closed = True
            self._shards = {}
            s = _lib.Summary()
            _lib.probe_close(self._p, ctypes.byref(s), self._eref)
            self.summary = {k: getattr(s, k) for k in ("steps", "calls", "tensors",
                                                        "data_bytes", "bytes", "overflows")}
            self.summary["skipped"] = sum(self._skipped.values())
            self.summary["skipped_kinds"] = dict(self._skipped)
            self.summary["unplaced"] = self._unplaced   # DTensor leaves without a placement row
            if s.error.status:
                self._note_error(s.error)
            _lib.probe_free(self._p)
            self._p = None
        if self._first_error:
            warnings.warn(f"nprobe: {self._errors} dump error(s), the first: {self._first_error}")

    # ---- steps --------------------------------------------------------------
    def _open_step(self):
        self._in_step, self._begun = True, False
        self._counts, self._mcounts = {}, {}
        self._ep_state.clear()
        self._local_calls.clear()
        self._param_ins.clear()
        self._ep_calls.clear()
        self._ckpt_calls = {}
        self._mstack = []
        self._pgrads = {}
        self._placed, self._shards = [], {}
        self._dp_batch = None
        self._dp_red = {}
        self._mb_batch, self._mb_red = None, {}
        self._sel = _lib.probe_selects(self._p, self._step)

    def _begin(self):
        """The step's file starts with its first row: device, precision,
        rank and loss scale are known by then (an autocast region entered
        after start(), torch.distributed initialised after the debugger)."""
        if self._foreign:
            return False
        if self._begun:
            return True
        if not self._in_step or self._closed:
            return False
        rank, world = _rank()
        m = self._meta
        m.device = (self._device or self._model_device()).encode()
        m.precision = (self._precision or self._detect_precision()).encode()
        m.rank, m.world_size = rank, world
        _lib.probe_set_meta(self._p, ctypes.byref(m), self._eref)
        if _distributed.on:
            _dtensor.set_mesh(self, world)
        # under an averaging data-parallel reduction each rank's backward is
        # that of its loss scaled by the divisor (docs/TORCH.md "Data parallel"):
        # its own attribute, not the loss scale (only a loss scaler skips steps)
        _lib.probe_set_loss_scale(self._p, _loss_scale())
        # a pipeline's: each micro-batch's backward is that of its own loss
        # (dtensor.mb_over)
        _lib.probe_set_dp_grad_scale(self._p, self._dp_div * self._mb_div)
        if _lib.probe_step_begin(self._p, self._step, self._eref):
            self._note_error()
            return False
        self._begun = True
        return True

    def _model_device(self):
        for m in self._models:
            for p in m.parameters():
                return p.device.type
        return "cpu"

    def _detect_precision(self):
        dt = _autocast_dtype()
        if dt is not None:
            return _PREC.get(dt, "fp32")
        for m in self._models:
            for p in m.parameters():
                if p.is_floating_point():
                    return _PREC.get(p.dtype, "fp32")
        return "fp32"

    def _note_error(self, e=None):
        e = e or self._err
        self._errors += 1
        if self._first_error is None:
            self._first_error = str(e.exception())
        _lib.Error.__init__(self._err)

    # ---- leaves ---------------------------------------------------------------
    def _skip(self, kind, what):
        """A leaf not dumped as it is (`kind`: "sparse_coo", "complex", ...):
        one warning per kind, counted in summary["skipped"]."""
        n = self._skipped.get(kind, 0)
        self._skipped[kind] = n + 1
        if n == 0:
            warnings.warn(f"nprobe: {what}; such leaves are not dumped (the count is "
                          "summary['skipped'])", stacklevel=4)

    def _odd(self, t):
        """A tensor the probe cannot read as it is: the tensor to read
        instead (quantized: dequantized), or None (skipped with a warning)."""
        if t.is_nested:
            return self._skip("nested", "nested tensors have no single shape")
        if t.layout is not _STRIDED:
            return self._skip(str(t.layout).replace("torch.", ""),
                              f"{t.layout} tensors have no dense storage to read")
        if t.is_meta:
            return self._skip("meta", "meta tensors hold no data")
        if t.is_complex():
            return self._skip("complex", "complex tensors have no place in the dump's dtypes")
        if t.is_quantized:
            return t.detach().dequantize()
        return t

    def _leaf(self, cb, role, key, t):
        if t.layout is not _STRIDED or t.is_nested or t.is_meta or t.is_quantized or \
                t.is_complex():
            t = self._odd(t)
            if t is None:
                return
        rg = int(t.requires_grad)
        dt = _DT.get(t.dtype)
        nd = t.dim()
        if dt is None or nd > _lib.MAX_DIMS or not t.is_cpu or t.is_neg():
            # the uncommon cases on a detached tensor (no autograd record);
            # a CPU tensor of a known dtype is read as it is. A negative-bit
            # view (x.conj().imag, torch._neg_view) is resolved: its memory
            # holds the values with the opposite sign.
            t = t.detach().resolve_neg()
            if dt is None:
                t = t.to(torch.float32 if t.is_floating_point() else torch.int64)
                dt = _DT[t.dtype]
            if t.dim() > _lib.MAX_DIMS:
                t = t.reshape(-1)
            if t.device.type != "cpu":
                if self._stats_on_device:
                    return self._leaf_device_stats(cb, role, key, t, dt, rg)
                t = t.cpu()
            nd = t.dim()
        v = self._view
        v.dtype, v.ndim, v.requires_grad = dt, nd, rg
        if nd:
            self._shape[:nd] = t.shape
            self._strides[:nd] = t.stride()
        v.data = t.data_ptr() if t.numel() else None
        v.version = _version(t)
        self._recent.append(t)
        if _lib.probe_dump_view(self._p, cb, role, key, self._vref, self._eref):
            self._note_error()

    def _safe_leaf(self, call, role, key, t, known=False):
        """_leaf outside _emit: what cannot be read is skipped, never raised.
        known: a plain tensor known as a shard (an in-place op's output, the
        memory of its first input) gets that shard's placement row."""
        try:
            found = None
            if _distributed.on:
                (t,), found = _dtensor.localize((t,))
                if known and not found and self._shards:
                    mr = _dtensor._known(self, t)
                    found = [(0, mr)] if mr is not None else None
                ep = _dtensor.expert_call(self, call) if not found and role == _ROLE_PG and \
                    self._dp_k is not None and self._mesh and isinstance(t, torch.Tensor) \
                    else False
                if ep is None:
                    # a rank's gradient of its own batch: the ranks' sum
                    found = [(0, _dtensor.dp_row(self, t, "P"))]
                elif ep and _dtensor.expert_rows(self, ep):
                    # an expert's replica's gradient of its group's tokens
                    found = [(0, _dtensor.dp_row(self, t, "P", _dtensor.expert_dims(self)))]
            self._leaf(call.encode(), role, key, t)
            if found:
                _dtensor.emit_places(self, call, ((role, found, [key.decode()]),))
        except Exception as e:  # noqa: BLE001 - the user's program must not fail for the dump
            self._skip("error " + type(e).__name__,
                       f"{call}: a leaf could not be read ({type(e).__name__}: {e})")

    def _leaf_device_stats(self, cb, role, key, t, dt, rg):
        """Statistics reduced on the tensor's device; only scalars cross."""
        s = self._lstats
        nd = t.dim()
        s.dtype, s.ndim, s.requires_grad = dt, nd, rg
        if nd:
            self._shape[:nd] = t.shape
        x = t.double() if t.dtype != torch.float64 else t
        if t.is_floating_point():
            fin = torch.isfinite(x)
            s.nan_count = int(torch.isnan(x).sum())
            s.posinf_count = int(torch.isposinf(x).sum())
            s.neginf_count = int(torch.isneginf(x).sum())
            x = x[fin]
        else:
            s.nan_count = s.posinf_count = s.neginf_count = 0
            x = x.reshape(-1)
        if x.numel():
            s.max, s.min = float(x.max()), float(x.min())
            s.mean, s.norm = float(x.mean()), float(x.norm())
        else:
            s.max = s.min = s.mean = s.norm = float("nan")
        if _lib.probe_dump_stats(self._p, cb, role, key, ctypes.byref(s), self._eref):
            self._note_error()

    def _emit(self, call, parent, site, ins, scalars, params, outs, in_keys=None,
              out_keys=None, bw=False):
        """One call: its row and leaves, contiguously, under the lock (no
        forward row of a reentrant checkpoint's recompute: the original
        forward wrote it). Never raises into the user's program: a leaf
        that cannot be read is skipped (one warning per kind of failure)."""
        if (not bw and _tls.replay is not None) or self._foreign:
            return False
        places = None
        try:
            if _distributed.on:
                if not self._begun:
                    with self._lock:      # the mesh (set at the step's begin) places the leaves
                        if not self._begin():
                            return False
                ins, params, outs, places = _dtensor.localize_call(
                    self, call, ins, params, outs, in_keys, out_keys, _ROLE_IN, _ROLE_PAR,
                    _ROLE_OUT, scalars)
            began = self._emit_locked(call, parent, site, ins, scalars, params, outs, in_keys,
                                      out_keys)
            if began and places:
                _dtensor.emit_places(self, call, places)
            return began
        except Exception as e:  # noqa: BLE001 - the user's op must not fail for the dump
            self._skip("error " + type(e).__name__,
                       f"{call}: a leaf could not be read ({type(e).__name__}: {e})")
            return False

    def _emit_locked(self, call, parent, site, ins, scalars, params, outs, in_keys, out_keys):
        with self._lock:
            if not self._begun and not self._begin():
                return False
            cb = call.encode()
            began = self._emit_packed(cb, parent.encode() if parent else None, site, ins,
                                      scalars, params, outs, in_keys, out_keys)
            if began is not None:
                return began
            if _lib.probe_call_begin(self._p, cb, parent.encode() if parent else None, site,
                                     self._eref):
                self._note_error()
                return False
            leaf = self._leaf
            for i, t in enumerate(ins):
                if t is not None:
                    leaf(cb, _ROLE_IN, _key(in_keys[i] if in_keys else i), t)
            for k, v in scalars:
                if _lib.probe_dump_scalar(self._p, cb, k.encode(), v, self._eref):
                    self._note_error()
            for k, t in params:
                leaf(cb, _ROLE_PAR, k.encode(), t)
            for i, t in enumerate(outs):
                if t is not None:
                    leaf(cb, _ROLE_OUT, _key(out_keys[i] if out_keys else i), t)
            return True

    def _emit_packed(self, cb, pb, site, ins, scalars, params, outs, in_keys, out_keys):
        """_emit's common case in one crossing (np_probe_dump_call): every
        tensor a CPU tensor of a known dtype with at most MAX_DIMS
        dimensions, its leaves packed as np_probe_leaf rows. None (nothing
        done) when a tensor needs _leaf's conversions; else whether the call
        began."""
        n = len(ins) + len(scalars) + len(params) + len(outs)
        if n > self._cap:
            self._cap = max(n, 2 * self._cap)
            self._buf = ctypes.create_string_buffer(self._cap * _LEAF_SIZE)
            self._addr = ctypes.addressof(self._buf)
        buf = self._buf
        keep = []
        names = b""
        off = _pack_tensors(buf, 0, _ROLE_IN, ins, in_keys, keep)
        if off < 0:
            return None
        for k, v in scalars:
            _LEAF_PACK[0].pack_into(buf, off, _ROLE_KW, 0, len(names), 0, 0, 0, 0, 0, v)
            names += k.encode() + b"\0"
            off += _LEAF_SIZE
        for k, t in params:
            shape = t.shape
            nd = len(shape)
            dt = _DT.get(t.dtype)
            if dt is None or nd > _MAX_DIMS or not t.is_cpu or t.is_neg():
                return None
            try:
                _LEAF_PACK[nd].pack_into(buf, off, _ROLE_PAR, 0, len(names), dt, nd,
                                         t.requires_grad, t.data_ptr(), t._version, 0.0,
                                         *shape, *t.stride())
            except RuntimeError:    # no storage, no version: _leaf's conversions
                return None
            names += k.encode() + b"\0"
            keep.append(t)
            off += _LEAF_SIZE
        off = _pack_tensors(buf, off, _ROLE_OUT, outs, out_keys, keep)
        if off < 0:
            return None
        # the data pointer of an empty tensor is not read (numel 0)
        st = _lib.probe_dump_call(self._p, cb, pb, site, self._addr, off // _LEAF_SIZE,
                                  names, self._refref, self._eref)
        self._recent.extend(keep)
        if st:
            self._errors += max(self._refused.value, 1) - 1
            self._note_error()
            return self._refused.value > 0
        return True

    # ---- API calls --------------------------------------------------------------
    def _open_call(self, api, args=(), kwargs=None):
        """A call's number in the step, forward name, enclosing module call
        and callsite (the start every kind of API call shares); in an
        optimizer step under expert parallel its one-process number
        (ep_optim: the call's arguments say which parameter it updates)."""
        with self._lock:        # threads: one number per call
            if self._opt is not None:
                self._opt.enter(api, args, kwargs)
            n = self._number(api, api)
        parent = self._mstack[-1] if self._mstack else None
        # _callsite <- _open_call <- _api_call/_alias_call/_inplace_call <-
        # the wrapper <- its caller: the first frame that may be the user's
        site = _callsite(4) if self._sel & _SEL_CALLSITE else None
        if _tls.replay is not None or _tls.ckpt is not None:
            site = _ckpt_site(site)
        return n, f"{api}.{n}.forward", parent, site

    def _number(self, key, name, counts=None):
        """The next number of API `name` (module path: counts=_mcounts) in
        the step; in a reentrant checkpoint's recompute the original call's
        (activation checkpointing above); a recompute that parts from the
        original's order counts on under "name.recomputed"."""
        counts = self._counts if counts is None else counts
        rp = _tls.replay
        if rp is not None:
            n = rp.number(key)
            if n is not None:
                return n
            name += ".recomputed"
        n = counts.get(name, 0)
        counts[name] = n + 1
        if _tls.ckpt is not None:
            _tls.ckpt.append([key, n, None])
        return n if rp is None else f"recomputed{n}"

    def _api_call(self, api, op, fn, is_method, args, kwargs):
        _tls.depth += 1
        try:
            n, call, parent, site = self._open_call(api, args, kwargs)
            flat = _flat_tensors(args, kwargs)
            rec = None
            if torch.is_grad_enabled():
                g = [k for k, (_, t) in enumerate(flat) if _grad_tensor(t)]
                if g:
                    rec = _Rec(self, f"{api}.{n}.backward", _bw_name(parent), site)
                    rec.idx, rec.has_in = g, True
                    try:
                        new = _BwIn.apply(rec, *[flat[k][1] for k in g])
                    except Exception as e:  # noqa: BLE001 - a tensor autograd functions refuse
                        self._skip("backward " + type(e).__name__,
                                   f"{call}: its backward cannot be captured "
                                   f"({type(e).__name__}: {e})")
                        rec = None
                    else:
                        args, kwargs = _replace(args, kwargs, [flat[k][0] for k in g], new)
            if (self._dp_k is not None or self._mb) and isinstance(kwargs.get("reduction"), str):
                self._dp_red[f"{api}.{n}"] = kwargs["reduction"]     # dtensor.dp_rows, mb_context
            promoted = self._fp32 and _fp32_match(self._fp32, api, n, parent)
            y = _run_fp32(op, fn, args, kwargs, promoted == "module") if promoted else fn(*args, **kwargs)
            if rec is not None and rec.has_in:
                y = self._unalias(op, y, new, [flat[k][1] for k in g])
            outs = _out_tensors(y)
            if rec is None and outs and torch.is_grad_enabled() and any(
                    _grad_tensor(t) for t in outs):
                rec = _Rec(self, f"{api}.{n}.backward", _bw_name(parent), site)
            if rec is not None:
                _hook_outputs(outs, rec)
            scalars = self._scalars(fn, is_method, args, kwargs)
            if promoted:  # recorded in the dump, as the runtime does (docs/CONFIG.md)
                scalars.append(("fp32_override", 1.0))
            if rec is not None:
                rec.scalars = scalars
            self._emit(call, parent, site, [t for _, t in flat], scalars, (), outs)
            return y
        finally:
            _tls.depth -= 1

    @staticmethod
    def _unalias(op, y, aliases, originals):
        """An op that handed back one of its (aliased) inputs returns the
        caller's own tensor, as without the package; one that returned a
        view of an input is an alias op from now on (ops.ALIAS)."""
        outs = _out_tensors(y)
        for o in outs:
            if o._is_view() and any(o._base is a for a in aliases):
                ops.ALIAS.add(op)
        if isinstance(y, torch.Tensor):
            for a, x in zip(aliases, originals):
                if y is a:
                    return x
        return y

    def _alias_call(self, api, fn, is_method, args, kwargs):
        """A view op (ops.ALIAS): recorded as it runs, untouched; its
        backward from a hook on the node that made its output: the gradients
        arriving at its outputs, and those it produced for its input when
        that node takes the input directly."""
        _tls.depth += 1
        try:
            n, call, parent, site = self._open_call(api, args, kwargs)
            flat = _flat_tensors(args, kwargs)
            y = fn(*args, **kwargs)
            outs = _out_tensors(y)
            scalars = self._scalars(fn, is_method, args, kwargs)
            self._emit(call, parent, site, [t for _, t in flat], scalars, (), outs)
            ins = [t for _, t in flat]
            if torch.is_grad_enabled() and outs and _grad_tensor(outs[0]) and \
                    not any(outs[0] is t for t in ins):
                node = outs[0].grad_fn
                if node is not None:
                    rec = _Rec(self, f"{api}.{n}.backward", _bw_name(parent), site)
                    rec.scalars = scalars
                    direct = len(ins) == 1 and ins[0].grad_fn is not None and any(
                        f is ins[0].grad_fn for f, _ in node.next_functions)
                    node.register_hook(self._node_hook(rec, produced=direct))
            return y
        finally:
            _tls.depth -= 1

    def _inplace_call(self, api, fn, is_method, args, kwargs):
        """A call that writes into its first tensor argument (`add_`,
        `__setitem__`, `F.relu(x, inplace=True)`): its inputs are recorded
        before the write, its output (that tensor, new version) after, all
        under the lock so that the call's rows stay together. Its backward
        comes from a hook on the autograd node the write made."""
        _tls.depth += 1
        try:
            n, call, parent, site = self._open_call(api, args, kwargs)
            flat = _flat_tensors(args, kwargs)
            scalars = self._scalars(fn, is_method, args, kwargs)
            grad = torch.is_grad_enabled() and any(_grad_tensor(t) for _, t in flat)
            with self._lock:
                began = self._emit(call, parent, site, [t for _, t in flat], scalars, (), ())
                y = fn(*args, **kwargs)
                out = y if isinstance(y, torch.Tensor) else (flat[0][1] if flat else None)
                if began and out is not None:
                    self._safe_leaf(call, _ROLE_OUT, b"0", out, known=True)
            node = out.grad_fn if grad and isinstance(out, torch.Tensor) else None
            if node is not None:
                rec = _Rec(self, f"{api}.{n}.backward", _bw_name(parent), site)
                rec.scalars = scalars
                node.register_hook(self._node_hook(rec))
            return y
        finally:
            _tls.depth -= 1

    def _node_hook(self, rec, produced=True):
        """An autograd node's hook: the gradients arriving at its outputs
        are the backward's input.N, those it produced for its inputs
        output.N (left out when `produced` is false)."""
        def hook(grad_inputs, grad_outputs):
            rec.gin = tuple(grad_outputs)
            self._bw_emit(rec, tuple(grad_inputs) if produced else ())
        return hook

    @staticmethod
    def _scalars(fn, is_method, args, kwargs):
        """(name, value) of the int/float/bool arguments and of the lists of
        them (name.0, name.1, ...), positional by parameter name, then
        keyword."""
        out = []
        names = None
        for i, a in enumerate(args):
            tp = type(a)
            if tp is _Tensor or a is None or (tp not in _NOT_TENSOR and isinstance(a, _Tensor)):
                continue
            names = names if names is not None else _argnames(fn, is_method)
            base = names[i] if i < len(names) else str(i)
            if tp is int or tp is float or tp is bool or isinstance(a, _NUM):
                out.append((base, float(a)))
            elif isinstance(a, (list, tuple)) and a and all(isinstance(b, _NUM) for b in a):
                out.extend((f"{base}.{j}", float(b)) for j, b in enumerate(a))
            else:
                v = _code(base, a)
                if v is not None:
                    out.append((base, v))
        if kwargs:
            for k, a in kwargs.items():
                if isinstance(a, _NUM):
                    out.append((k, float(a)))
                elif isinstance(a, (list, tuple)) and a and all(isinstance(b, _NUM) for b in a):
                    out.extend((f"{k}.{j}", float(b)) for j, b in enumerate(a))
                else:
                    v = _code(k, a)
                    if v is not None:
                        out.append((k, v))
        return out

    def _bw_emit(self, rec, gouts):
        if rec.step != self._step or not self._in_step or self._closed or self._foreign:
            return
        _tls.depth += 1
        try:
            ins = list(rec.gin) if rec.gin is not None else []
            outs = list(gouts)
            # a second backward through the same graph (retain_graph, double
            # backward) is NAME.1, NAME.2, ...: its rows were refused as
            # duplicates of the first
            name = rec.name if not rec.passes else f"{rec.name}.{rec.passes}"
            rec.passes += 1
            self._emit(name, rec.parent, rec.site, ins, rec.scalars, (), outs,
                       in_keys=rec.out_idx or None, out_keys=rec.idx or None, bw=True)
        finally:
            _tls.depth -= 1

    # ---- modules -------------------------------------------------------------------
    def _hook_model(self, model):
        if id(model) in self._hooked:
            return
        self._hooked.add(id(model))
        self._models.append(model)
        promoted = {_fp32_module(e) for e in self._fp32}
        for path, mod in model.named_modules():
            path = _compiled_path(path)
            if not path or _is_compile_wrapper(mod):
                continue          # the root: the runtime has no module call for it
            if path in promoted:
                _promote_module(mod)
            if self._experts:
                path = _dtensor.expert_path(self._experts, path)
                top = _dtensor.expert_top(self._experts, path)
                if top:
                    box = model.get_submodule(top[0]) if hasattr(model, "get_submodule") else ()
                    _dtensor.hook_expert(self, mod, *top, functools.partial(
                        _dtensor.experts_total, self, top[0], box))
            path, cls = _safe_name(path), _safe_name(_dtensor.module_class_name(mod))
            pre = self._make_pre(path, cls)
            h = mod.register_forward_pre_hook(_eager_hook(pre))
            post = self._make_post(path)
            try:
                # run also when the forward raises: its frame leaves the
                # module stack (a caught exception left a dead parent for
                # every later call of the step)
                h2 = mod.register_forward_hook(_eager_hook(post), always_call=True)
            except TypeError:       # torch < 2.1
                h2 = mod.register_forward_hook(_eager_hook(post))
            if not _dynamo_loaded():
                self._plain_hooks += [(mod._forward_pre_hooks, h.id, pre), (mod._forward_hooks, h2.id, post)]
            self._hook_params(mod, path, cls)

    def _hook_params(self, mod, path, cls):
        """Gradient hooks on the module's parameters not hooked yet; again
        at each forward under torch.distributed (FSDP2 swaps a sharded
        DTensor parameter for an unsharded one around forward and backward:
        the gradient arrives at that one, before its reduce-scatter)."""
        for pname, prm in _safe_params(mod):
            r = self._phooked.get(id(prm))
            if (r is not None and r() is prm) or not prm.requires_grad:
                continue
            self._phooked[id(prm)] = weakref.ref(prm)
            prm.register_hook(self._make_pgrad(f"Module.{path}.{cls}", pname))

    def _eager_hooks(self):
        """The module hooks registered before torch.compile was in use, kept
        out of its graphs now (in place: same handles, same order)."""
        for hooks, hid, fn in self._plain_hooks:
            if hid in hooks:
                hooks[hid] = _eager_hook(fn)
        self._plain_hooks = []

    def _make_pre(self, path, cls):
        frames = []

        def pre(mod, args):
            if _current is not self or _tls.depth or not self._sel:
                frames.append(None)
                return None
            if _distributed.on:
                self._hook_params(mod, path, cls)
            with self._lock:
                n = self._number(("module", path), path, self._mcounts)
            call = f"Module.{path}.{cls}.forward.{n}"
            parent = self._mstack[-1] if self._mstack else None
            # the module's own callsite is written only on its rows (L0, mix):
            # at L1 its frames are not walked
            sel = self._sel
            site = _callsite() if sel & _lib.SELECT_CALLSITE and sel & _lib.SELECT_MODULE \
                else None
            if _tls.replay is not None or _tls.ckpt is not None:
                site = _ckpt_site(site)
            rec = None
            new_args = None
            if self._sel & _lib.SELECT_MODULE and torch.is_grad_enabled():
                rec = _Rec(self, f"Module.{path}.{cls}.backward.{n}", _bw_name(parent), site)
                rec.module = True
                g = [i for i, a in enumerate(args) if _grad_tensor(a)]
                if g:
                    rec.idx, rec.has_in = g, True
                    _tls.depth += 1
                    try:
                        new = _BwIn.apply(rec, *[args[i] for i in g])
                    finally:
                        _tls.depth -= 1
                    lst = list(args)
                    for i, t in zip(g, new):
                        lst[i] = t
                    new_args = tuple(lst)
            self._mstack.append(call)
            frames.append((call, parent, site, rec))
            return new_args
        self._frames_of = getattr(self, "_frames_of", {})
        self._frames_of[path] = frames
        return pre

    def _make_post(self, path):
        def post(mod, args, out):
            frames = self._frames_of[path]
            fr = frames.pop() if frames else None
            if fr is None:
                return None
            call, parent, site, rec = fr
            if self._mstack and self._mstack[-1] == call:
                self._mstack.pop()
            elif call in self._mstack:      # frames left by an exception
                del self._mstack[self._mstack.index(call):]
            if out is None and sys.exc_info()[1] is not None:
                return None                 # the forward raised: no row
            if not self._sel & _lib.SELECT_MODULE:
                return None
            _tls.depth += 1
            try:
                if rec is not None:
                    out = _wrap_outputs(out, rec)
                self._emit(call, parent, site,
                           [a if isinstance(a, torch.Tensor) else None for a in args], (),
                           _safe_params(mod), _out_tensors(out))
            finally:
                _tls.depth -= 1
            return out
        return post

    def _make_pgrad(self, call, pname):
        def hook(grad):
            if _current is not self or not self._sel & _lib.SELECT_MODULE or _pipeline._paused:
                return None
            _tls.depth += 1
            try:
                key = (call, pname)
                g = grad.detach().clone()
                prev = self._pgrads.get(key)
                self._pgrads[key] = g if prev is None else prev + g
            finally:
                _tls.depth -= 1
            return None
        return hook

    def _flush_param_grads(self):
        if not self._pgrads:
            return
        grads, self._pgrads = self._pgrads, {}
        _tls.depth += 1
        try:
            with self._lock:
                if not self._begin():
                    return
                by_call = {}
                for (call, pname), g in grads.items():
                    by_call.setdefault(call, []).append((pname, g))
                for call, lst in by_call.items():
                    cb = call.encode()
                    _lib.probe_call_begin(self._p, cb, None, None, self._eref)
                    for pname, g in lst:
                        self._safe_leaf(call, _ROLE_PG, pname.encode(), g)
        finally:
            _tls.depth -= 1


# scalers made after this import are known from their creation (_patch_scaler)
_patch_scaler()
