"""ConfigChecker: a config_check pack of a PyTorch run, written by libnprobe
(np_cc_pack_ex), the same pack as `nprobe config_check pack` (docs/CONFIG_CHECK.md):
env (secrets masked), libs (nprobe, HDF5, OpenBLAS, ... and torch, CUDA,
cuDNN, torch_npu, numpy, Python), pip.txt of this interpreter, random (the
seeding calls apply_patches() recorded, with their callsites, and torch's
initial seed), weights (SHA-256 and statistics per entry of the model's
state_dict), dataset (SHA-256 of the first batches of a loader), and
hyperparameters. Compare two packs with `nprobe config_check compare`.
"""
import ctypes
import hashlib
import os
import platform
import random as _random
import sys

import torch

from .. import _lib

_SEEDS = []          # (api, value, callsite) in call order
_patched = False


def _callsite():
    here = os.path.dirname(os.path.abspath(__file__))
    tdir = os.path.dirname(torch.__file__)
    f = sys._getframe(2)
    while f is not None and f.f_code.co_filename.startswith((here, tdir)):
        f = f.f_back
    if f is None:
        return ""
    return f"{os.path.basename(f.f_code.co_filename)}:{f.f_lineno} {f.f_code.co_name}"


def _recording(api, fn):
    def seed(*args, **kwargs):
        value = args[0] if args else next(iter(kwargs.values()), None)
        _SEEDS.append((api, value, _callsite()))
        return fn(*args, **kwargs)
    seed._nprobe_orig = fn
    return seed


def apply_patches(fmk="pytorch"):
    """Record every seeding call from now on (random.seed, numpy.random.seed,
    torch.manual_seed, torch.cuda.manual_seed[_all]) with its callsite, for
    the pack's random.json. Call it before the script seeds anything."""
    global _patched
    if _patched:
        return
    _patched = True
    targets = [(_random, "seed", "random.seed"), (torch, "manual_seed", "torch.manual_seed"),
               (torch.random, "manual_seed", "torch.manual_seed"),
               (torch.cuda, "manual_seed", "torch.cuda.manual_seed"),
               (torch.cuda, "manual_seed_all", "torch.cuda.manual_seed_all")]
    try:
        import numpy
        targets.append((numpy.random, "seed", "numpy.random.seed"))
    except ImportError:
        pass
    for mod, attr, api in targets:
        fn = getattr(mod, attr, None)
        if fn is not None and not hasattr(fn, "_nprobe_orig"):
            setattr(mod, attr, _recording(api, fn))


def _libs():
    out = [("torch", torch.__version__), ("python", platform.python_version())]
    out.append(("torch.cuda", str(torch.version.cuda)))
    cudnn = torch.backends.cudnn.version() if torch.backends.cudnn.is_available() else None
    out.append(("torch.cudnn", str(cudnn)))
    for name in ("numpy", "torch_npu"):
        try:
            mod = __import__(name)
            out.append((name, getattr(mod, "__version__", "unknown")))
        except ImportError:
            pass
    out.append(("torch.num_threads", str(torch.get_num_threads())))
    return out


def _batch_hash(batch):
    h = hashlib.sha256()

    def feed(x):
        if isinstance(x, torch.Tensor):
            t = x.detach().cpu().contiguous()
            h.update(f"{t.dtype}{tuple(t.shape)}".encode())
            h.update(t.reshape(-1).view(torch.uint8).numpy().tobytes() if t.numel() else b"")
        elif isinstance(x, dict):
            for k in sorted(x):
                h.update(str(k).encode())
                feed(x[k])
        elif isinstance(x, (list, tuple)):
            for y in x:
                feed(y)
        else:
            h.update(repr(x).encode())
    feed(batch)
    return h.hexdigest()


_STORE = {torch.float32: _lib.FLOAT32, torch.bfloat16: _lib.BFLOAT16,
          torch.float16: _lib.FLOAT16, torch.float64: _lib.FLOAT64, torch.int64: _lib.INT64,
          torch.int32: _lib.INT32, torch.bool: _lib.BOOL}


def _np_tensor(name, t, keep):
    """An np_tensor over a host copy of `t` in the runtime's storage
    (bf16/fp16 values in float32)."""
    t = t.detach().cpu()
    # what the program sees: dequantized, dense, a complex tensor as its
    # (real, imag) pairs (an int64 cast dropped the imaginary part and the
    # fraction: 1.2+1j and 1.4-5j hashed equal), lazy conj/neg bits resolved
    if t.is_quantized:
        t = t.dequantize()
    if t.layout != torch.strided:
        t = t.to_dense()
    if t.is_complex():
        t = torch.view_as_real(t.resolve_conj())
    t = t.resolve_neg()
    dt = _STORE.get(t.dtype)
    if dt is None:
        t, dt = t.to(torch.float64 if t.is_floating_point() else torch.int64), None
        dt = _STORE[t.dtype]
    if t.dtype in (torch.bfloat16, torch.float16):
        t = t.float()
    if t.dtype == torch.bool:
        t = t.to(torch.uint8)
    t = t.contiguous()
    keep.append(t)
    nt = _lib.Tensor()
    nt.dtype, nt.ndim = dt, min(t.dim(), _lib.MAX_DIMS)
    if t.dim() > _lib.MAX_DIMS:
        nt.ndim, nt.shape[0] = 1, t.numel()
    else:
        for i, s in enumerate(t.shape):
            nt.shape[i] = s
    nt.numel = t.numel()
    nt.data = t.data_ptr() if t.numel() else None
    keep.append(nt)
    return nt


class ConfigChecker:
    """msprobe's ConfigChecker: writes the pack at `output_zip_path` now.

    model: its state_dict is hashed (weights.json); dataloader: the first
    `n_batches` batches are hashed (a fresh iterator: give a loader whose
    order does not depend on the seed, or accept a dataset difference);
    hyperparameters: a dict; seed: the run's seed when not recorded by
    apply_patches(). Raises nprobe.NprobeError when the pack cannot be
    written.
    """

    def __init__(self, model=None, shell_path=None, output_zip_path="./config_check_pack.zip",
                 fmk="pytorch", dataloader=None, n_batches=2, hyperparameters=None, seed=None):
        self.output_zip_path = output_zip_path
        keep = []
        weights = []
        if model is not None:
            for name, t in model.state_dict().items():
                nt = _np_tensor(name, t, keep)
                weights.append((name.encode(), nt))
        warr = (_lib.NamedTensor * max(1, len(weights)))()
        for i, (n, nt) in enumerate(weights):
            warr[i].name, warr[i].t = n, ctypes.pointer(nt)
        hashes = []
        if dataloader is not None:
            for i, batch in enumerate(dataloader):
                if i >= n_batches:
                    break
                hashes.append(_batch_hash(batch).encode())
        harr = (ctypes.c_char_p * max(1, len(hashes)))(*hashes)
        rnd = [("torch.initial_seed", torch.initial_seed())]
        count = {}
        for api, value, site in _SEEDS:
            k = count.get(api, 0)
            count[api] = k + 1
            rnd.append((f"{api}[{k}]", value))
            rnd.append((f"{api}[{k}].callsite", site))
        rarr, nr = _lib.kv_array(rnd)
        hp = sorted((hyperparameters or {}).items())
        hparr, nh = _lib.kv_array(hp)
        larr, nl = _lib.kv_array(_libs())
        run = _lib.RunInfo(hparr, nh, rarr, nr, warr, len(weights), harr, len(hashes),
                           None, 0, larr, nl)
        opts = _lib.PackOpts()
        opts.python = _lib.path_arg(sys.executable, "sys.executable")
        if shell_path:
            opts.hyperparams_path = _lib.path_arg(shell_path, "ConfigChecker: shell_path")
        if seed is not None:
            opts.seed, opts.has_seed = int(seed), 1
        err = _lib.Error()
        out = _lib.path_arg(output_zip_path, "ConfigChecker: output_zip_path")
        if _lib.cc_pack_ex(out, ctypes.byref(opts), ctypes.byref(run),
                           ctypes.byref(err)):
            raise err.exception()

    @staticmethod
    def apply_patches(fmk="pytorch"):
        apply_patches(fmk)
