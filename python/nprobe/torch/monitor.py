"""nprobe's monitor for PyTorch under msprobe's name (docs/MONITOR.md, "PyTorch").

    from nprobe.torch import TrainerMon          # msprobe: from msprobe.pytorch import TrainerMon
    monitor = TrainerMon("config.json")          # "task": "monitor" and a "monitor" section
    monitor.set_monitor(model, optimizer)
    for batch in loader:
        loss = model(batch); loss.backward(); optimizer.step()   # one step a optimizer.step()

Per recorded step it writes the runtime monitor's file, {dump_path}/
monitor_rank{R}.h5, by the runtime's own writer in libnprobe
(np_monitor_file_append: the same tables, HDF5 SWMR, readable while the run
goes on and after a kill -9 up to its last finished step), which `nprobe
monitor DIR` reads: module outputs (`activation`) and the gradients arriving at them (`activation_grad`) of the modules the targets
select, parameter gradients as the optimizer reads them (`grad`) and, in a
run of several ranks, as this rank's backward made them before a
data-parallel reduction (`grad_pre`), weights after the update (`weight`),
the update-to-weight ratio, the optimizer's state tensors (Adam's
`exp_avg`, `exp_avg_sq`), the global gradient norm (`grad_norm`) and the
loss (`loss`: the model's output's `.loss` or `["loss"]`, as Hugging Face
models return it, or record_loss(loss)). The statistics are libnprobe's kernel (float64 sums over the
float32 values, the dump's statistics) with a count of the zeros, in one
pass (np_probe_tensor_stats_f32).
"""
import ctypes
import fnmatch
import json
import math
import os
import warnings

import numpy as np
import torch

from .. import _lib
from . import debugger as _dbg
from . import dtensor as _dtensor

NAME_LEN, METRIC_LEN = 192, 32
_SECTION_KEYS = ("targets", "step_interval", "start_step", "collect_times", "xy_distribution",
                 "wg_distribution", "mv_distribution", "param_distribution", "alert", "format",
                 "ops", "eps", "anomaly_checkpoint", "anomaly_ring",
                 "anomaly_calls", "anomaly_calls_after", "update_source",
                 "cc_distribution", "ur_distribution")  # anomaly_checkpoint, anomaly_ring: the runtime's
_RULES = ("AnomalyNan", "AnomalyTurbulence", "AnomalySpike", "AnomalyUpdateRatio")
_EMA = 0.9   # the turbulence rule's running mean: weight on the past (monitor_read.c)
_SCALAR_METRICS = ("loss", "grad_norm", "loss_scale", "update_ratio")
_TURBULENT_METRICS = ("activation", "activation_grad", "grad_pre", "grad", "comm_in", "comm_out")
_DERIVED = object()   # a weight whose update is derived from Adam's state (no snapshot)
REC_DTYPE = np.dtype([("step", "<i8"), ("seq", "<i4"), ("key", "<i4"), ("numel", "<i8"),
                      ("norm", "<f8"), ("min", "<f8"), ("max", "<f8"), ("mean", "<f8"),
                      ("zeros", "<i8"), ("nans", "<i8"), ("infs", "<i8")])
KEY_DTYPE = np.dtype([("name", f"S{NAME_LEN}"), ("metric", f"S{METRIC_LEN}")])


class _Stats(ctypes.Structure):
    _fields_ = [("max", ctypes.c_double), ("min", ctypes.c_double), ("mean", ctypes.c_double),
                ("norm", ctypes.c_double), ("nan_count", ctypes.c_int64),
                ("posinf_count", ctypes.c_int64), ("neginf_count", ctypes.c_int64)]


_stats_f32 = _lib._sig("np_probe_tensor_stats_f32", None, ctypes.POINTER(_Stats),
                       ctypes.POINTER(ctypes.c_int64), ctypes.POINTER(ctypes.c_double),
                       ctypes.c_void_p, ctypes.c_void_p, ctypes.c_int64)
_stats_f32_many = _lib._sig("np_probe_tensor_stats_f32_many", None, ctypes.c_void_p,
                            ctypes.c_void_p, ctypes.c_void_p, ctypes.c_void_p, ctypes.c_void_p,
                            ctypes.c_void_p, ctypes.c_int64, ctypes.c_void_p, ctypes.c_void_p)
# _Stats as a numpy record (the outputs of one call over many tensors)
_STATS_NP = np.dtype([("max", "<f8"), ("min", "<f8"), ("mean", "<f8"), ("norm", "<f8"),
                      ("nan", "<i8"), ("pinf", "<i8"), ("ninf", "<i8")])
assert _STATS_NP.itemsize == ctypes.sizeof(_Stats)
# the monitor file's writer (nprobe/probe.h np_monitor_file_*: the runtime's
# own, one writer of the format); the rows as REC_DTYPE/KEY_DTYPE lay them out
_file_create = _lib._sig("np_monitor_file_create", ctypes.c_int, ctypes.POINTER(ctypes.c_void_p),
                         ctypes.c_char_p, ctypes.c_int, ctypes.c_int, ctypes.c_int, ctypes.c_int,
                         ctypes.c_int, ctypes.POINTER(_lib.Error))
_file_append = _lib._sig("np_monitor_file_append", ctypes.c_int, ctypes.c_void_p, ctypes.c_int64,
                         ctypes.c_void_p, ctypes.c_int64, ctypes.c_void_p, ctypes.c_int64,
                         ctypes.POINTER(_lib.Error))
_file_close = _lib._sig("np_monitor_file_close", ctypes.c_int, ctypes.c_void_p,
                        ctypes.POINTER(_lib.Error))
assert REC_DTYPE.itemsize == 80 and KEY_DTYPE.itemsize == 224
_stats_f32_adam = _lib._sig("np_probe_tensor_stats_f32_adam", None, ctypes.c_void_p,
                            ctypes.c_void_p, ctypes.c_void_p, ctypes.c_void_p, ctypes.c_void_p,
                            ctypes.c_void_p, ctypes.c_void_p, ctypes.c_void_p, ctypes.c_int64,
                            ctypes.c_void_p, ctypes.c_void_p)


def _config(path):
    """The monitor's settings of config.json; errors name the file and key."""
    where = os.fspath(path)
    with open(path, "rb") as f:
        try:
            root = json.load(f)
        except ValueError as e:
            raise ValueError(f"{where}: {e}") from None
    if not isinstance(root, dict):
        raise ValueError(f"{where}: expected a JSON object")
    dump_path = root.get("dump_path")
    if not isinstance(dump_path, str) or not dump_path:
        raise ValueError(f"{where}: dump_path: missing key \"dump_path\" (the monitor's folder)")
    ranks = root.get("rank", [])
    if not isinstance(ranks, list) or not all(isinstance(r, int) and r >= 0 for r in ranks):
        raise ValueError(f"{where}: rank: expected a list of integers >= 0")
    sec = root.get("monitor", {})
    if not isinstance(sec, dict):
        raise ValueError(f"{where}: monitor: expected an object")
    for k in sec:
        if k not in _SECTION_KEYS:
            raise ValueError(f"{where}: {k}: monitor: unknown key \"{k}\" (allowed: "
                             + ", ".join(_SECTION_KEYS[:9]) + ")")
    targets = sec.get("targets", [])
    if isinstance(targets, dict):
        targets = list(targets)
    if not isinstance(targets, list) or not all(isinstance(t, str) for t in targets):
        raise ValueError(f"{where}: targets: monitor.targets: expected a list of module patterns")
    cfg = {"dump_path": dump_path, "ranks": ranks, "targets": targets}
    for k, d, lo in (("step_interval", 1, 1), ("start_step", 0, 0), ("collect_times", 0, 0)):
        v = sec.get(k, d)
        if not isinstance(v, int) or isinstance(v, bool) or v < lo:
            raise ValueError(f"{where}: {k}: monitor.{k}: expected an integer >= {lo}")
        cfg[k] = v
    for k in ("xy_distribution", "wg_distribution", "mv_distribution", "param_distribution"):
        v = sec.get(k, True)
        if not isinstance(v, bool):
            raise ValueError(f"{where}: {k}: monitor.{k}: expected true or false")
        cfg[k] = v
    # the update ratio: msprobe's key for its own update view (off there by
    # default); here it follows param_distribution unless given
    v = sec.get("ur_distribution", cfg["param_distribution"])
    if not isinstance(v, bool):
        raise ValueError(f"{where}: ur_distribution: monitor.ur_distribution: expected true or false")
    cfg["ur_distribution"] = v
    for k in ("anomaly_calls", "anomaly_calls_after"):
        v = sec.get(k, 0)
        if not isinstance(v, int) or isinstance(v, bool) or not 0 <= v <= 65536:
            raise ValueError(f"{where}: {k}: monitor.{k}: expected an integer 0 .. 65536 (each "
                             "call kept holds a copy of its tensors)")
        cfg[k] = v
    v = sec.get("update_source", "auto")
    if v not in ("auto", "snapshot", "derived"):
        raise ValueError(f"{where}: update_source: monitor.update_source: expected \"auto\", "
                         "\"derived\" (Adam's update derived from its state where exact) or "
                         "\"snapshot\" (always measured)")
    cfg["update_source"] = v
    from . import monitor_cc
    cfg["cc"] = monitor_cc.config(sec.get("cc_distribution"), where)
    cfg["rules"] = _rules_config(sec.get("alert"), where)
    return cfg


def _rules_config(alert, where):
    """monitor.alert.rules as the runtime reads them (monitor.c parse_rules):
    absent, the defaults; a list names the rules in force."""
    r = {"nan": True, "turbulence": 49.0, "warmup": 10, "spike": 10.0, "window": 10,
         "ratio_min": 0.0, "ratio_max": 0.0}
    if alert is None:
        return r
    if not isinstance(alert, dict):
        raise ValueError(f"{where}: alert: monitor.alert: expected an object")
    rules = alert.get("rules")
    if rules is None:
        return r
    if not isinstance(rules, list):
        raise ValueError(f"{where}: rules: monitor.alert.rules: expected a list")
    d, r = r, dict(r, nan=False, turbulence=0.0, spike=0.0, ratio_max=0.0)

    def num(args, k, dflt, rule):
        v = args.get(k, dflt)
        if isinstance(v, bool) or not isinstance(v, (int, float)) or not math.isfinite(v):
            raise ValueError(f"{where}: {k}: {rule}.args.{k}: expected a finite number")
        return float(v)

    for it in rules:
        name = it.get("rule_name") if isinstance(it, dict) else None
        args = it.get("args", {}) if isinstance(it, dict) else None
        if not isinstance(name, str):
            raise ValueError(f"{where}: rule_name: monitor.alert.rules: each rule needs a "
                             "\"rule_name\" string")
        if not isinstance(args, dict):
            raise ValueError(f"{where}: args: monitor.alert.rules: \"args\" must be an object")
        if name == "AnomalyNan":
            r["nan"] = True
        elif name == "AnomalyTurbulence":
            r["turbulence"] = num(args, "threshold", d["turbulence"], name)
            r["warmup"] = int(num(args, "warmup", r["warmup"], name))
        elif name == "AnomalySpike":
            r["spike"] = num(args, "factor", d["spike"], name)
            w = num(args, "window", r["window"], name)
            if not 1 <= w <= 100000:
                raise ValueError(f"{where}: window: AnomalySpike.args.window: expected 1 .. 100000")
            r["window"] = int(w)
        elif name == "AnomalyUpdateRatio":
            r["ratio_min"] = num(args, "min", d["ratio_min"], name)
            r["ratio_max"] = num(args, "max", d["ratio_max"], name)
        else:
            raise ValueError(f"{where}: rule_name: monitor.alert.rules: unknown rule \"{name}\" "
                             f"(allowed: {', '.join(_RULES)})")
    return r


class _Rules:
    """The rules record by record, online (the runtime's np_mon_rules_feed,
    monitor_read.c: the same history, so the same verdict as `nprobe
    monitor` on the file): feed() gives the rule that fired, or None."""

    def __init__(self, cfg):
        self.c = cfg
        self.hist = {}      # key -> [records seen, running mean, spike window]

    def feed(self, key, metric, rec):
        c = self.c
        h = self.hist.setdefault(key, [0, 0.0, []])
        numel, norm, mean, nans, infs = rec[3], rec[4], rec[7], rec[9], rec[10]
        scalar = metric in _SCALAR_METRICS
        v = mean if scalar else norm
        hit = None
        if c["nan"] and metric == "grad_norm" and math.isnan(v) and nans:
            pass        # a step the loss scaler skipped records NaN
        elif c["nan"] and (nans or infs) and metric != "loss_scale":
            hit = ("nan", v)
        if hit is None and metric in _TURBULENT_METRICS and c["turbulence"] > 0 and \
                h[0] >= c["warmup"] and math.isfinite(v) and v > (1.0 + c["turbulence"]) * h[1]:
            hit = ("turbulence", v)
        if hit is None and c["spike"] > 0 and metric in ("loss", "grad_norm") and math.isfinite(v):
            if not h[2]:
                h[2] = [[0.0] * c["window"], 0, 0]     # the window, its count, its next slot
            w = h[2]
            if w[1] >= min(c["window"], 3):
                tot = 0.0
                for j in range(w[1]):   # the C loop's order (slot order)
                    tot += w[0][j]
                if v > c["spike"] * (tot / w[1]):
                    hit = ("spike", v)
            w[0][w[2]] = v
            w[2] = (w[2] + 1) % c["window"]
            w[1] = min(w[1] + 1, c["window"])
        if hit is None and c["ratio_max"] > 0 and metric == "update_ratio" and math.isfinite(v) \
                and not c["ratio_min"] <= v <= c["ratio_max"]:
            hit = ("update_ratio", v)
        if not scalar and math.isfinite(v):
            h[1] = _EMA * h[1] + (1.0 - _EMA) * v if h[0] else v
            h[0] += 1
        return hit


def _f32(t):
    """t's values as a contiguous float32 CPU tensor (t itself when it is one).
    A DTensor (FSDP2's, tensor parallel's parameters and gradients) is its
    local shard (its own data pointer is 0: no storage), a pending
    functional collective its result."""
    if _dtensor._WRAPPED and isinstance(t, _dtensor._WRAPPED):
        t = _dtensor.local(t)
    if t.dtype == torch.float32 and t.is_cpu and t.is_contiguous():
        return t
    x = t.detach()
    if x.dtype != torch.float32:
        x = x.float()
    if x.device.type != "cpu" or not x.is_contiguous():
        x = x.contiguous().cpu()
    return x


def tensor_stats(t, before=None):
    """(numel, norm, min, max, mean, zeros, nans, infs) of a tensor's values as
    float32, by libnprobe's statistics kernel with its zero count, one pass
    (np_probe_tensor_stats_f32). With `before` (t's values before an
    update, same shape), also the L2 norm of t - before over the finite
    differences, each taken in double, in the same pass: (stats, norm)."""
    x = _f32(t)
    n = x.numel()
    s, z = _Stats(), ctypes.c_int64()
    if before is None:
        _stats_f32(ctypes.byref(s), ctypes.byref(z), None, x.data_ptr(), None, n)
    else:
        b = _f32(before)
        if b.numel() != n:
            raise ValueError(f"tensor_stats: before has {b.numel()} elements, the tensor {n}")
        d = ctypes.c_double()
        _stats_f32(ctypes.byref(s), ctypes.byref(z), ctypes.byref(d), x.data_ptr(),
                   b.data_ptr(), n)
    st = (n, s.norm, s.min, s.max, s.mean, z.value, s.nan_count, s.posinf_count + s.neginf_count)
    return st if before is None else (st, d.value)


def _stats_rows(numel, out, zeros):
    return list(zip(numel.tolist(), out["norm"].tolist(), out["min"].tolist(),
                    out["max"].tolist(), out["mean"].tolist(), zeros.tolist(),
                    out["nan"].tolist(), (out["pinf"] + out["ninf"]).tolist()))


def _many_buffers(xs):
    """The pointer-array type, numel array and statistics/zero-count outputs
    of a many-tensor libnprobe statistics call over xs."""
    n = len(xs)
    return (ctypes.c_void_p * n, np.array([x.numel() for x in xs], dtype=np.int64),
            np.empty(n, dtype=_STATS_NP), np.empty(n, dtype=np.int64))


def tensor_stats_many(ts, befores=None, copies=None):
    """tensor_stats over a list of tensors in one libnprobe call
    (np_probe_tensor_stats_f32_many: the same bits as one call each):
    [stats] or, with `befores` (a list, None where there is none), [(stats,
    norm of t - before or None)]. `copies`: (src, dst) pairs of contiguous
    float32 CPU tensors of the same numel, or None; pair k's src is copied
    into its dst in the same call, after tensor k (the weights' snapshot
    beside the gradients' statistics)."""
    xs = [_f32(t) for t in ts]
    n = len(xs)
    if n == 0:
        return []
    bs = None
    if befores is not None:
        bs = [None if b is None else _f32(b) for b in befores]
        for x, b in zip(xs, bs):
            if b is not None and b.numel() != x.numel():
                raise ValueError(f"tensor_stats: before has {b.numel()} elements, the tensor "
                                 f"{x.numel()}")
    ptr, numel, out, zeros = _many_buffers(xs)
    dn = np.empty(n, dtype=np.float64)
    data = ptr(*[x.data_ptr() for x in xs])
    before = ptr(*[0 if b is None else b.data_ptr() for b in bs]) if bs is not None else None
    src = dst = None
    if copies is not None:
        src = ptr(*[0 if c is None else c[0].data_ptr() for c in copies])
        dst = ptr(*[0 if c is None else c[1].data_ptr() for c in copies])
    _stats_f32_many(out.ctypes.data, zeros.ctypes.data, dn.ctypes.data, data, before,
                    numel.ctypes.data, n, src, dst)
    st = _stats_rows(numel, out, zeros)
    if bs is None:
        return st
    return [(a, None if b is None else d) for a, b, d in zip(st, bs, dn.tolist())]


def tensor_stats_adam(ws, ms, vs, coefs, mv=False):
    """The weights' statistics (tensor_stats_many's, the same bits) and the
    norm of the update derived from Adam's state after the step, in one
    libnprobe call (np_probe_tensor_stats_f32_adam): [(stats, update norm)],
    with mv [(stats, update norm, m's stats, v's stats)] (m and v read once
    for both). coefs: (A, K, B, E) per weight (_adam_coef)."""
    xs = [_f32(t) for t in ws]
    n = len(xs)
    if n == 0:
        return []
    mm = [_f32(t) for t in ms]
    vv = [_f32(t) for t in vs]
    for x, a, b in zip(xs, mm, vv):
        if a.numel() != x.numel() or b.numel() != x.numel():
            raise ValueError(f"tensor_stats_adam: the state holds {a.numel()}/{b.numel()} "
                             f"elements, the weight {x.numel()}")
    ptr, numel, out, zeros = _many_buffers(xs)
    un = np.empty(n, dtype=np.float64)
    coef = np.ascontiguousarray(coefs, dtype=np.float64).reshape(n, 4)
    mv_out = np.empty(2 * n, dtype=_STATS_NP) if mv else None
    mv_zeros = np.empty(2 * n, dtype=np.int64) if mv else None
    _stats_f32_adam(out.ctypes.data, zeros.ctypes.data, un.ctypes.data,
                    ptr(*[x.data_ptr() for x in xs]), ptr(*[a.data_ptr() for a in mm]),
                    ptr(*[b.data_ptr() for b in vv]), coef.ctypes.data, numel.ctypes.data, n,
                    mv_out.ctypes.data if mv else None, mv_zeros.ctypes.data if mv else None)
    res = list(zip(_stats_rows(numel, out, zeros), un.tolist()))
    if not mv:
        return res
    mvs = _stats_rows(np.repeat(numel, 2), mv_out, mv_zeros)
    return [(w, u, mvs[2 * k], mvs[2 * k + 1]) for k, (w, u) in enumerate(res)]


def _adam_groups(optimizer, own_hooks):
    """{param: its group} for the parameters whose update torch.optim.Adam or
    AdamW makes by the formula the derived update ratio assumes (the
    single-tensor or foreach implementation: not fused, capturable or
    differentiable), where no other step hook can change a weight between
    the monitor's two hooks; {} for any other optimizer (then every update
    ratio is measured from a snapshot)."""
    if type(optimizer) not in (torch.optim.Adam, torch.optim.AdamW):
        return {}
    from torch.optim import optimizer as _o
    if len(getattr(optimizer, "_optimizer_step_pre_hooks", {})) > own_hooks or \
            len(getattr(optimizer, "_optimizer_step_post_hooks", {})) > own_hooks or \
            getattr(_o, "_global_optimizer_pre_hooks", None) or \
            getattr(_o, "_global_optimizer_post_hooks", None):
        return {}
    res = {}
    for g in optimizer.param_groups:
        if g.get("fused") or g.get("capturable") or g.get("differentiable"):
            continue
        for p in g["params"]:
            res[p] = g
    return res


def _adam_coef(optimizer, p, g):
    """(m, v, (A, K, B, E)) of p's update after the step (np_probe_tensor_stats_f32_adam):
    torch's W_after = c W_before - lr / (1 - b1^t) * m / (sqrt(v) / sqrt(1 - b2^t) + eps),
    c = float32(1 - lr wd) under the decoupled decay (AdamW) else 1, so
    W_after - W_before = -(lr / (1 - b1^t) / c * m / (...) + (1 - c) / c * W_after);
    None when the state is not there."""
    st = optimizer.state.get(p)
    if not st or "step" not in st or "exp_avg" not in st:
        return None
    v = st.get("max_exp_avg_sq") if g.get("amsgrad") else st.get("exp_avg_sq")
    if not isinstance(v, torch.Tensor):
        return None
    t = float(st["step"])
    lr, b1, b2 = float(g["lr"]), float(g["betas"][0]), float(g["betas"][1])
    wd = float(g["weight_decay"])
    decoupled = g.get("decoupled_weight_decay", isinstance(optimizer, torch.optim.AdamW))
    c = float(np.float32(1.0 - lr * wd)) if decoupled and wd != 0 else 1.0
    return (st["exp_avg"], v, (lr / (1.0 - b1 ** t) / c, (1.0 - c) / c,
                               1.0 / math.sqrt(1.0 - b2 ** t), float(g["eps"])))


def _matches(targets, name):
    if not targets:
        return True
    for t in targets:
        if any(c in t for c in "*?["):
            if fnmatch.fnmatchcase(name, t):
                return True
        elif name.startswith(t):
            return True
    return False


class TrainerMon:
    """msprobe's TrainerMon: TrainerMon(config_file_path), then
    set_monitor(model, optimizer). process_group, params_have_main_grad and
    opt_ty are accepted for msprobe's signature (the optimizer's state is
    read from torch.optim's state)."""

    def __init__(self, config_file_path, process_group=None, params_have_main_grad=True,
                 opt_ty=None, torch_compile=None):
        self.config = _config(config_file_path)
        # the ring's capture of a compiled model (docs/MONITOR.md "The ring
        # under torch.compile"): "capture" (module rows around the compiled
        # regions) or "eager" (compiled code run uncompiled while the ring
        # captures); else $NPROBE_TORCH_COMPILE, as PrecisionDebugger's
        self._compile_mode = _dbg._compile_mode(torch_compile)
        dist = torch.distributed
        on = dist.is_available() and dist.is_initialized()
        self.rank = dist.get_rank() if on else 0
        self.world = dist.get_world_size() if on else 1
        self.active = not self.config["ranks"] or self.rank in self.config["ranks"]
        self.handles = []
        self.file = None
        self.step = 0
        self.collected = 0
        self._keys, self._key_rows, self._rec = {}, [], []
        self._flushed_keys = 0
        self._rows = 0
        self._before = {}
        self._snap = {}
        self._adam = {}         # {param: group} whose update is derived (_adam_groups)
        self._own_hooks = 0     # this monitor's step hooks on the optimizer (pre, post: 1 each)
        self.update_paths = {}  # {parameter name: "derived" | "snapshot"}: how its last update_ratio was taken
        self.path = None
        self._ring = None       # the ring of calls (anomaly_calls: ring.py)
        self._rules = None      # the rules, online, while the ring waits for an anomaly
        self.anomaly = None     # the run's first anomaly seen online: step, name, metric, rule, value
        self.anomaly_calls = None  # what the ring wrote: step, before, after, bytes, dir
        self._cc = None         # the collectives' observer (cc_distribution: monitor_cc.py)
        self._warned = False    # a write error was told (once: the recording stopped there)

    # ---- the file ------------------------------------------------------

    def _open(self):
        d = self.config["dump_path"]
        os.makedirs(d, exist_ok=True)
        self.path = os.path.join(d, f"monitor_rank{self.rank}.h5")
        h, err = ctypes.c_void_p(), _lib.Error()
        if _file_create(ctypes.byref(h), _lib.path_arg(self.path, "dump_path"), self.rank,
                        self.world, self.config["step_interval"], 0, 0, ctypes.byref(err)):
            e = err.exception()
            if e.status == _lib.ERR_IO and os.path.exists(self.path):
                raise FileExistsError(str(e))   # a run's record is never overwritten
            raise e
        self.file = h

    def _write(self, recs, keys):
        """The step's records and new keys, flushed, then its /steps row,
        by libnprobe's writer (np_monitor_file_append). A write error
        (a full disk) stops the recording with a warning: the program
        goes on."""
        err = _lib.Error()
        if _file_append(self.file, self.step, recs.ctypes.data if len(recs) else None, len(recs),
                        keys.ctypes.data if len(keys) else None, len(keys), ctypes.byref(err)):
            warnings.warn(f"nprobe monitor: {err.exception()}; the monitor stops recording "
                          "(its file keeps the steps before)", RuntimeWarning)
            self.active = False
            self._warned = True
            return False
        return True

    def _key(self, name, metric):
        k = (name, metric)
        if k not in self._keys:
            self._keys[k] = len(self._key_rows)
            self._key_rows.append((name.encode()[:NAME_LEN - 1], metric.encode()[:METRIC_LEN - 1]))
        return self._keys[k]

    def _add(self, name, metric, stats):
        rec = (self.step, len(self._rec), self._key(name, metric)) + tuple(stats)
        self._rec.append(rec)
        if self._rules is not None:
            hit = self._rules.feed(rec[2], metric, rec)
            if hit is not None:
                # the run's first anomaly: the ring's calls are written now
                self.anomaly = {"step": self.step, "name": name, "metric": metric,
                                "rule": hit[0], "value": hit[1]}
                self._rules = None
                if self._ring.fire():
                    self.anomaly_calls = self._ring.info

    def _add_scalar(self, name, metric, v):
        v = float(v)
        self._add(name, metric, (1, abs(v), v, v, v, int(v == 0.0), int(math.isnan(v)),
                                 int(math.isinf(v))))

    def _recording(self):
        return self._recording_at(self.step)

    def _recording_at(self, s):
        c = self.config
        return (self.active and s >= c["start_step"] and (s - c["start_step"]) % c["step_interval"] == 0
                and (c["collect_times"] <= 0 or self.collected < c["collect_times"]))

    def _flush(self):
        """The step's records and new keys, flushed, then its /steps row."""
        recs = np.array(self._rec, dtype=REC_DTYPE)
        keys = np.array(self._key_rows[self._flushed_keys:], dtype=KEY_DTYPE)
        if not self._write(recs, keys):
            return
        self._rows += len(recs)
        self._flushed_keys = len(self._key_rows)
        self.collected += 1

    # ---- hooks ---------------------------------------------------------

    def set_monitor(self, model, optimizer, grad_acc_steps=1, tp_group=None, dp_group=None,
                    start_iteration=0):
        """Hook the model's modules (the targets') and the optimizer's step."""
        self.step = int(start_iteration)
        if not self.active:
            return
        _dtensor.refresh()      # DTensor's class, when the model has them (_f32)
        self._open()
        models = model if isinstance(model, (list, tuple)) else [model]
        # a compiled model (torch.compile's wrapper, or compiled submodules):
        # its modules and parameters named as the eager model's, the hooks
        # kept out of dynamo's graphs (run eagerly at the compiled regions'
        # boundaries, as PrecisionDebugger's module hooks)
        compiled = any(_dbg._is_compile_wrapper(mod) for m in models for mod in m.modules())
        hook = (lambda f: _dbg._eager_hook(_dbg._paused(f))) if compiled else _dbg._paused
        c = self.config
        if c["anomaly_calls"] or c["anomaly_calls_after"]:
            from .ring import CallRing
            # under torch.compile the API calls inside compiled regions are
            # the compiler's: the ring keeps the module rows too (level mix),
            # or, asked for, runs the compiled code uncompiled (every call)
            eager = compiled and self._compile_mode == "eager"
            self._ring = CallRing(os.path.join(c["dump_path"], "anomaly_calls"),
                                  c["anomaly_calls"], c["anomaly_calls_after"], self.step,
                                  self._recording_at,
                                  level="mix" if compiled and not eager else "L1",
                                  torch_compile="eager" if eager else "capture")
            self._rules = _Rules(c["rules"])
            for m in models:
                # before the monitor's hooks: a module's row (level mix) is
                # in the ring when the monitor's hook on its output fires it
                self._ring.start(m)
        self.params = {}
        for m in models:
            for name, p in m.named_parameters():
                self.params[p] = _dbg._compiled_path(name)
        if self.config["xy_distribution"]:
            for m in models:
                for name, mod in m.named_modules():
                    name = _dbg._compiled_path(name)
                    if name and not _dbg._is_compile_wrapper(mod) and \
                            _matches(self.config["targets"], name):
                        self.handles.append(mod.register_forward_hook(hook(self._fwd(name))))
        if self.config["wg_distribution"] and self.world > 1:
            # the gradient as backward hands it to the parameter, before
            # DDP's reduction (its hooks run after the accumulation)
            for p, n in self._selected():
                if p.requires_grad:
                    self.handles.append(p.register_hook(_dbg._paused(self._gpre(n))))
        for m in models:
            self.handles.append(m.register_forward_hook(hook(self._loss_hook)))
        self.handles.append(optimizer.register_step_pre_hook(_dbg._paused(self._pre_step)))
        self.handles.append(optimizer.register_step_post_hook(_dbg._paused(self._post_step)))
        self._own_hooks = 1
        self._watch_collectives()

    def _watch_collectives(self):
        """cc_distribution: the collectives' observer, when torch.distributed
        is initialised (distributed.install() wraps its collectives)."""
        dist = torch.distributed
        if not self.config["cc"]["enable"] or self._cc is not None or \
                not (dist.is_available() and dist.is_initialized()):
            return
        from . import distributed, monitor_cc
        distributed.install()
        _dtensor.refresh()      # funcol's AsyncCollectiveTensor, imported by install()
        self._cc = monitor_cc.CommRecorder(self, self.config["cc"])
        self._arm_collectives()

    def _arm_collectives(self):
        """The observer in the wrappers' list on a recorded step only: the
        collectives of the others take the wrappers' fast path."""
        from . import distributed
        if self._recording():
            distributed.add_observer(self._cc)
        else:
            distributed.remove_observer(self._cc)

    def _unwatch_collectives(self):
        if self._cc is not None:
            from . import distributed
            distributed.remove_observer(self._cc)
            self._cc = None

    def _fwd(self, name):
        """The module's output (`activation`) and, by a hook on that tensor,
        the gradient that arrives at it (`activation_grad`). Not a full
        backward hook: torch's BackwardHook clones and views the module's
        inputs and outputs (Tensor.clone and Tensor.view_as calls in the
        program, a ring's or a dump's rows, and their memory)."""
        grad_hook = _dbg._paused(self._bwd(name))

        def hook(mod, args, out):
            t = out[0] if isinstance(out, (tuple, list)) and out else out
            if self._recording() and isinstance(t, torch.Tensor) and t.is_floating_point():
                self._add(name, "activation", tensor_stats(t))
                if t.requires_grad:
                    t.register_hook(grad_hook)
        return hook

    def _gpre(self, name):
        def hook(g):
            if self._recording() and g.is_floating_point():
                self._add(name, "grad_pre", tensor_stats(g))
        return hook

    def _loss_hook(self, mod, args, out):
        loss = out.get("loss") if isinstance(out, dict) else getattr(out, "loss", None)
        if isinstance(loss, torch.Tensor) and loss.numel() == 1:
            self.record_loss(loss)

    @_dbg._paused     # its own torch calls are not the run's (a ring's or a debugger's capture)
    def record_loss(self, loss, loss_scale=None):
        """Record this step's loss (a number or a one-element tensor; the
        model's output's `.loss` is recorded by itself) and, when given, the
        loss scale."""
        if self._recording() and self.file is not None:
            self._add_scalar("loss", "loss", float(loss.detach()) if isinstance(loss, torch.Tensor)
                             else float(loss))
            if loss_scale is not None:
                self._add_scalar("loss_scale", "loss_scale", float(loss_scale))

    def _bwd(self, name):
        def hook(g):
            if self._recording() and isinstance(g, torch.Tensor) and g.is_floating_point():
                self._add(name, "activation_grad", tensor_stats(g))
        return hook

    def _selected(self):
        return [(p, n) for p, n in self.params.items() if _matches(self.config["targets"], n)]

    def _pre_step(self, optimizer, args, kwargs):
        """The gradients' statistics (all of them for the global norm, the
        selected ones recorded) and the selected weights' snapshot for their
        update ratio: one libnprobe call over every tensor (tensor_stats_many),
        the snapshots copied in it beside the gradients."""
        if not self._recording():
            return
        c = self.config
        sel = self._selected()
        before, copy = {}, {}
        self._adam = {}
        src = c["update_source"]
        if c["ur_distribution"] and (src == "derived" or src == "auto" and c["mv_distribution"]):
            # Adam's update derived after the step from its state: no
            # snapshot. "auto" only where mv_distribution reads m and v
            # anyway (reading them for the update alone costs more than the
            # snapshot: docs/PERFORMANCE.md "The update without a snapshot")
            self._adam = _adam_groups(optimizer, self._own_hooks)
        if c["ur_distribution"]:
            for p, _ in sel:
                if p in self._adam and p.grad is not None and not p.grad.is_sparse and \
                        p.dtype == torch.float32 and not p.is_complex() and \
                        not (src == "auto" and self._adam[p].get("amsgrad")):
                    before[p] = _DERIVED
                    continue
                b = self._snap_buffer(p) if p.grad is not None else None
                if b is None:
                    before[p] = self._snapshot(p)
                else:
                    before[p] = copy[p] = b
        items = [(p, n, p.grad) for p, n in self.params.items()]
        items = [it for it in items if it[2] is not None]
        stats = tensor_stats_many([g for _, _, g in items],
                                  copies=[(p, copy[p]) if p in copy else None
                                          for p, _, _ in items] if copy else None)
        total, want = 0.0, set(p for p, _ in sel) if c["wg_distribution"] else set()
        for (p, n, _), st in zip(items, stats):
            total += st[1] ** 2
            if p in want:
                self._add(n, "grad", st)
        self._grad_norm = math.sqrt(total)
        self._before = before

    def _snap_buffer(self, p):
        """The buffer kept for the run that p's snapshot is copied into by
        the statistics' call (a float32 contiguous CPU parameter), or None
        (then _snapshot copies it)."""
        if not p.is_cpu or p.dtype != torch.float32 or not p.is_contiguous():
            return None
        b = self._snap.get(p)
        if b is None or b.shape != p.shape or b.dtype != p.dtype:
            b = self._snap[p] = torch.empty_like(p.detach(), memory_format=torch.contiguous_format)
        return b

    def _snapshot(self, p):
        """A copy of p before the step, for its update ratio. On the CPU into
        a buffer kept for the run (a fresh copy each recorded step cost a
        page fault per 4 KiB: 9 ms a step on a 3.7 M-parameter Llama, the
        copy itself 1 ms); elsewhere a clone (CUDA's caching allocator reuses
        the block, and a buffer held between steps would cost device memory
        while the activations peak)."""
        x = p.detach()
        if x.device.type != "cpu":
            return x.clone()
        b = self._snap.get(p)
        if b is None or b.shape != x.shape or b.dtype != x.dtype:
            b = self._snap[p] = torch.empty_like(x, memory_format=torch.contiguous_format)
        return b.copy_(x)

    def _post_step(self, optimizer, args, kwargs):
        recorded = self._recording()
        if recorded:
            c = self.config
            sel = self._selected()
            # every tensor of the step's records in one libnprobe call: the
            # weights (with their snapshot: the update's norm in the same
            # pass) and the optimizer's state tensors
            ts, bs = [], []
            ws, ms, vs, cs, derived = [], [], [], [], {}
            ur = c["ur_distribution"]
            want_w = c["param_distribution"] or ur   # the ratio's denominator is the weight's norm
            for p, n in sel:
                if want_w:
                    b = self._before.get(p)
                    if b is _DERIVED:
                        mvc = _adam_coef(optimizer, p, self._adam[p])
                        if mvc is not None:
                            derived[p] = len(ws)
                            ws.append(p)
                            ms.append(mvc[0])
                            vs.append(mvc[1])
                            cs.append(mvc[2])
                            self.update_paths[n] = "derived"
                            b = _DERIVED
                        else:
                            b = None
                    if b is not _DERIVED:
                        ts.append(p)
                        bs.append(b)
                        if ur:
                            self.update_paths[n] = "snapshot" if b is not None else None
                if c["mv_distribution"] and not (p in derived and self._fused_mv(p)):
                    st = optimizer.state.get(p, {})
                    for s in ("exp_avg", "exp_avg_sq", "momentum_buffer"):
                        if isinstance(st.get(s), torch.Tensor):
                            ts.append(st[s])
                            bs.append(None)
            res = iter(tensor_stats_many(ts, befores=bs))
            # the derived weights: with mv_distribution m's and v's
            # statistics in the same call, m and v read once for both
            dres = tensor_stats_adam(ws, ms, vs, cs, mv=c["mv_distribution"])
            for p, n in sel:
                mv = None
                if want_w:
                    if p in derived:
                        r = dres[derived[p]]
                        w, d = r[0], r[1]
                        if self._fused_mv(p):
                            mv = r[2:]
                    else:
                        w, d = next(res)
                    if c["param_distribution"]:
                        self._add(n, "weight", w)
                    if d is not None:
                        self._add_scalar(n, "update_ratio", d / w[1] if w[1] > 0 else 0.0)
                if mv is not None:
                    self._add(n, "exp_avg", mv[0])
                    self._add(n, "exp_avg_sq", mv[1])
                elif c["mv_distribution"]:
                    st = optimizer.state.get(p, {})
                    for s in ("exp_avg", "exp_avg_sq", "momentum_buffer"):
                        if isinstance(st.get(s), torch.Tensor):
                            self._add(n, s, next(res)[0])
            self._add_scalar("grad_norm", "grad_norm", self._grad_norm)
            self._flush()
        self._rec = []
        self._before = {}
        if self._cc is not None and self._cc.step_end(recorded):
            self._unwatch_collectives()       # cc_log_only: the stacks are written
        self.step += 1
        if self._cc is not None:
            self._arm_collectives()
        if self._ring is not None:
            self._ring.step()

    def _fused_mv(self, p):
        """p's exp_avg and exp_avg_sq records come from the derived update's
        call (its v is exp_avg_sq: not under amsgrad)"""
        return self.config["mv_distribution"] and not self._adam[p].get("amsgrad")

    def stop(self):
        """Remove the hooks and close the file (also at garbage collection)."""
        for h in self.handles:
            h.remove()
        self.handles = []
        self._unwatch_collectives()
        if self._ring is not None:
            self._ring.finish()
        if self.file is not None:
            err = _lib.Error()
            st = _file_close(self.file, ctypes.byref(err))
            self.file = None
            if st and not self._warned:     # a write error was told when it came
                warnings.warn(f"nprobe monitor: {err.exception()}", RuntimeWarning)

    def __del__(self):
        try:
            self.stop()
        except Exception:
            pass
