"""ctypes binding of libnprobe (include/nprobe/probe.h, nprobe/configcheck.h).

The library is found, in this order, at $NPROBE_LIB (the .so itself or its
folder: a developer's override), inside this package (lib/libnprobe.so.0,
where `pip install .` puts it), beside the `nprobe` program named by
$NPROBE_BIN (its build tree's lib/), in a build tree around this package
(build/*/lib), then by the dynamic loader (an installed libnprobe.so.0).
"""
import ctypes
import ctypes.util
import glob
import os
import struct

SONAME = "libnprobe.so.0"
ABI = 6   # np_monitor_file_* (5: np_probe_set_dp_grad_scale; 4: np_probe_set_mesh, np_probe_place; 3: np_probe_abandon, 2: np_probe_dump_call)

# np_status (nprobe/common.h): the ones the package tells apart
ERR_IO = 3
# np_role
ROLE_INPUT, ROLE_OUTPUT, ROLE_PARAMETERS, ROLE_KWARGS, ROLE_PARAMETERS_GRAD = range(5)
# np_dtype
FLOAT32, BFLOAT16, FLOAT16, FLOAT64, INT64, INT32, BOOL, FLOAT8_E4M3FN, FLOAT8_E5M2, HIFLOAT8 = range(10)
TASKS = ("statistics", "tensor", "md5", "overflow_check")
SELECT_API, SELECT_MODULE, SELECT_CALLSITE = 1, 2, 4
MAX_DIMS = 8


class NprobeError(Exception):
    """An error reported by libnprobe: status, file, key and message."""

    def __init__(self, status, file, key, text):
        self.status, self.file, self.key, self.text = status, file, key, text
        where = ": ".join(x for x in (file, key) if x)
        super().__init__(f"{where}: {text}" if where else text)


def path_arg(path, what):
    """A path argument (str, bytes or os.PathLike) as the bytes the C
    library opens: the file system's encoding (os.fsencode: a name that is
    not UTF-8 still works), never truncated at an embedded NUL (a ValueError
    naming the argument, as open() raises, rather than opening another
    file)."""
    try:
        b = os.fsencode(os.fspath(path))
    except TypeError:
        raise TypeError(f"{what}: expected a path (str, bytes or os.PathLike), got "
                        f"{type(path).__name__}") from None
    if b"\0" in b:
        raise ValueError(f"{what}: embedded null byte in {path!r}")
    return b


def text_arg(text, what):
    """str(text) as UTF-8 for the C library, refused (ValueError naming it)
    when it holds a NUL, which C would cut the text at."""
    s = str(text)
    if "\0" in s:
        raise ValueError(f"{what}: embedded null byte in {s!r}")
    return s.encode("utf-8", "surrogateescape")


class Error(ctypes.Structure):
    _fields_ = [("status", ctypes.c_int), ("file", ctypes.c_char * 512),
                ("key", ctypes.c_char * 256), ("line", ctypes.c_long),
                ("column", ctypes.c_long), ("text", ctypes.c_char * 1024)]

    def exception(self):
        d = lambda b: b.decode("utf-8", "replace")  # noqa: E731
        return NprobeError(self.status, d(self.file), d(self.key), d(self.text))


class Meta(ctypes.Structure):
    _fields_ = [("framework", ctypes.c_char_p), ("device", ctypes.c_char_p),
                ("precision", ctypes.c_char_p), ("rank", ctypes.c_int),
                ("world_size", ctypes.c_int)]


class View(ctypes.Structure):
    _fields_ = [("size", ctypes.c_size_t), ("dtype", ctypes.c_int), ("ndim", ctypes.c_int),
                ("shape", ctypes.POINTER(ctypes.c_int64)),
                ("strides", ctypes.POINTER(ctypes.c_int64)), ("data", ctypes.c_void_p),
                ("byte_offset", ctypes.c_int64), ("requires_grad", ctypes.c_int),
                ("version", ctypes.c_int64)]


VIEW_REUSE = 16   # NP_VIEW_REUSE

# np_probe_leaf (nprobe/probe.h), packed with struct: role, index, name_off,
# dtype, ndim, requires_grad, data, version, value, shape[8], strides[8]
# (only the first ndim of each written). LEAF_PACK[ndim].pack_into(buf, off,
# role, index, name_off, dtype, ndim, requires_grad, data, version, value,
# *shape, *strides).
LEAF_SIZE = 6 * 4 + 8 + 8 + 8 + 2 * MAX_DIMS * 8
LEAF_PACK = [struct.Struct(f"=6iQqd{nd}q{(MAX_DIMS - nd) * 8}x{nd}q")
             for nd in range(MAX_DIMS + 1)]


# np_leaf_stats; its np_stats member (max .. neginf_count) laid out flat, as in C
class LeafStats(ctypes.Structure):
    _fields_ = [("size", ctypes.c_size_t), ("dtype", ctypes.c_int), ("ndim", ctypes.c_int),
                ("shape", ctypes.POINTER(ctypes.c_int64)), ("max", ctypes.c_double),
                ("min", ctypes.c_double), ("mean", ctypes.c_double), ("norm", ctypes.c_double),
                ("nan_count", ctypes.c_int64), ("posinf_count", ctypes.c_int64),
                ("neginf_count", ctypes.c_int64), ("requires_grad", ctypes.c_int)]


NAME_LEN = 256


class Summary(ctypes.Structure):
    _fields_ = [("steps", ctypes.c_int64), ("ranks", ctypes.c_int64), ("calls", ctypes.c_int64),
                ("tensors", ctypes.c_int64), ("data_bytes", ctypes.c_int64),
                ("bytes", ctypes.c_int64), ("files", ctypes.c_int64),
                ("overflows", ctypes.c_int64), ("has_overflow", ctypes.c_int),
                ("overflow_call", ctypes.c_char * NAME_LEN),
                ("overflow_module", ctypes.c_char * NAME_LEN),
                ("overflow_step", ctypes.c_int), ("overflow_rank", ctypes.c_int),
                ("scope_steps", ctypes.c_int64), ("scope_unreached", ctypes.c_int64),
                ("scope_open", ctypes.c_int64), ("scope_unreached_step", ctypes.c_int),
                ("scope_open_step", ctypes.c_int), ("scope_first", ctypes.c_char * NAME_LEN),
                ("scope_last", ctypes.c_char * NAME_LEN), ("error", Error)]


def _candidates():
    env = os.environ.get("NPROBE_LIB")
    if env:
        if os.path.isdir(env):
            yield os.path.join(env, "libnprobe.so")
            yield os.path.join(env, SONAME)
        else:
            yield env
        return
    here = os.path.dirname(os.path.abspath(__file__))
    own = os.path.join(here, "lib", SONAME)   # the wheel's (pyproject.toml)
    if os.path.exists(own):
        yield own
    nbin = os.environ.get("NPROBE_BIN")
    if nbin:
        yield os.path.join(os.path.dirname(os.path.abspath(nbin)), "lib", "libnprobe.so")
    root = os.path.dirname(os.path.dirname(here))
    for d in ("release", "sanitize", "*"):
        yield from sorted(glob.glob(os.path.join(root, "build", d, "lib", "libnprobe.so")))
    found = ctypes.util.find_library("nprobe")
    yield found or SONAME


def _load():
    tried = []
    for path in _candidates():
        try:
            lib = ctypes.CDLL(path)
        except OSError as e:
            tried.append(f"{path} ({e})")
            continue
        # a shared library that is not libnprobe (a wrong $NPROBE_LIB) is
        # refused here, not by an AttributeError at its first missing symbol
        if not all(hasattr(lib, s) for s in ("np_lib_version", "np_lib_abi", "np_probe_open")):
            tried.append(f"{path} (a shared library, but not libnprobe: no np_lib_version)")
            continue
        return lib, path
    raise ImportError("nprobe: cannot load libnprobe; install the package with its library "
                      "(`pip install .` at the source root), or set NPROBE_LIB to a built "
                      "libnprobe.so (build/release/lib/libnprobe.so). Tried: " + "; ".join(tried))


_L, _PATH = _load()


def _sig(name, res, *args):
    f = getattr(_L, name)
    f.restype = res
    f.argtypes = list(args)
    return f


_P = ctypes.c_void_p
_S = ctypes.c_char_p
_E = ctypes.POINTER(Error)
_I = ctypes.c_int
lib_version = _sig("np_lib_version", _S)
lib_abi = _sig("np_lib_abi", _I)
if lib_abi() < ABI:
    raise ImportError(f"nprobe: {_PATH} has ABI level {lib_abi()}, this package needs {ABI}")
probe_open = _sig("np_probe_open", _I, ctypes.POINTER(_P), _S, ctypes.POINTER(Meta), _E)
probe_open_json = _sig("np_probe_open_json", _I, ctypes.POINTER(_P), _S, ctypes.POINTER(Meta), _E)
probe_set_meta = _sig("np_probe_set_meta", _I, _P, ctypes.POINTER(Meta), _E)
probe_selects = _sig("np_probe_selects", _I, _P, _I)
probe_task_of = _sig("np_probe_task_of", _I, _P)
probe_set_loss_scale = _sig("np_probe_set_loss_scale", None, _P, ctypes.c_double)
probe_set_dp_grad_scale = _sig("np_probe_set_dp_grad_scale", None, _P, ctypes.c_double)
probe_step_begin = _sig("np_probe_step_begin", _I, _P, _I, _E)
probe_step_end = _sig("np_probe_step_end", _I, _P, _E)
probe_call_begin = _sig("np_probe_call_begin", _I, _P, _S, _S, _S, _E)
probe_dump_view = _sig("np_probe_dump_view", _I, _P, _S, _I, _S, ctypes.POINTER(View), _E)
probe_dump_stats = _sig("np_probe_dump_stats", _I, _P, _S, _I, _S, ctypes.POINTER(LeafStats), _E)
probe_dump_scalar = _sig("np_probe_dump_scalar", _I, _P, _S, _S, ctypes.c_double, _E)
probe_dump_call = _sig("np_probe_dump_call", _I, _P, _S, _S, _S, ctypes.c_void_p, _I, _S,
                       ctypes.POINTER(_I), _E)
probe_close = _sig("np_probe_close", _I, _P, ctypes.POINTER(Summary), _E)
probe_free = _sig("np_probe_free", None, _P)
probe_abandon = _sig("np_probe_abandon", None, _P)


def version():
    """libnprobe's version string."""
    return lib_version().decode()


def library_path():
    """The libnprobe file this package loaded."""
    return _PATH


# ---- config_check (nprobe/configcheck.h) -------------------------------------

class KV(ctypes.Structure):
    _fields_ = [("key", ctypes.c_char_p), ("value", ctypes.c_char_p)]


class Tensor(ctypes.Structure):
    """np_tensor (nprobe/tensor.h): bf16/fp16 values in float32 storage."""
    _fields_ = [("dtype", ctypes.c_int), ("ndim", ctypes.c_int),
                ("shape", ctypes.c_int64 * MAX_DIMS), ("numel", ctypes.c_int64),
                ("data", ctypes.c_void_p), ("grad", ctypes.c_void_p),
                ("requires_grad", ctypes.c_int), ("name", ctypes.c_char_p),
                ("rt", ctypes.c_void_p)]


class NamedTensor(ctypes.Structure):
    _fields_ = [("name", ctypes.c_char_p), ("t", ctypes.POINTER(Tensor))]


class RunInfo(ctypes.Structure):
    _fields_ = [("hyperparams", ctypes.POINTER(KV)), ("n_hyperparams", ctypes.c_int),
                ("random", ctypes.POINTER(KV)), ("n_random", ctypes.c_int),
                ("weights", ctypes.POINTER(NamedTensor)), ("n_weights", ctypes.c_int),
                ("batch_hashes", ctypes.POINTER(ctypes.c_char_p)), ("n_batches", ctypes.c_int),
                ("data_files", ctypes.POINTER(ctypes.c_char_p)), ("n_data_files", ctypes.c_int),
                ("libs", ctypes.POINTER(KV)), ("n_libs", ctypes.c_int)]


class PackOpts(ctypes.Structure):
    _fields_ = [("weights_path", ctypes.c_char_p), ("dump_path", ctypes.c_char_p),
                ("datasets", ctypes.POINTER(ctypes.c_char_p)), ("n_datasets", ctypes.c_int),
                ("hyperparams_path", ctypes.c_char_p), ("seed", ctypes.c_longlong),
                ("has_seed", ctypes.c_int), ("python", ctypes.c_char_p),
                ("python_timeout_s", ctypes.c_int)]  # 0: 60 s


cc_pack_ex = _sig("np_cc_pack_ex", _I, _S, ctypes.POINTER(PackOpts), ctypes.POINTER(RunInfo), _E)


def kv_array(pairs):
    arr = (KV * max(1, len(pairs)))()
    for i, (k, v) in enumerate(pairs):
        arr[i].key, arr[i].value = text_arg(k, "key"), text_arg(v, f"value of {k}")
    return arr, len(pairs)
