"""TrainerMon's collectives (`cc_distribution`; docs/MONITOR.md, "PyTorch").

An observer of the collectives nprobe.torch.distributed wraps: per call of
a recorded step, `comm_in` (the tensors sent, read before the collective
runs) and `comm_out` (what arrived), under the key
`Distributed.{dname}.{k}.forward` (dname the dump's name of the op, k its
call index in the step). Several tensors of one call are one record, with
the statistics of their concatenation. With `cc_log_only` no statistics:
each op's distinct Python call stacks are written to
{dump_path}/cc_stacks_rank{R}.json after the first recorded step.
"""
import json
import math
import os
import re
import sys
import weakref

import torch

from . import dtensor
from .monitor import tensor_stats, tensor_stats_many

CC_KEYS = ("enable", "cc_codeline", "cc_pre_hook", "cc_log_only")
_PKG = os.path.join(os.path.dirname(os.path.dirname(os.path.abspath(__file__))), "")
# frames left out of a call stack (as msprobe's stack filter: the hook
# machinery, not the program): nprobe's own, nn.Module's call plumbing,
# multiprocessing's process start
_SKIP = (os.path.join("torch", "nn", "modules", "module.py"), "multiprocessing" + os.sep)


def config(sec, where):
    """monitor.cc_distribution: {"enable", "codeline" (compiled regexes),
    "log_only"}; errors name the key. cc_pre_hook is accepted: the inputs are
    always recorded (comm_in)."""
    if sec is None:
        sec = {}
    if not isinstance(sec, dict):
        raise ValueError(f"{where}: cc_distribution: monitor.cc_distribution: expected an object")
    for k in sec:
        if k not in CC_KEYS:
            raise ValueError(f"{where}: {k}: monitor.cc_distribution: unknown key \"{k}\" "
                             f"(allowed: {', '.join(CC_KEYS)})")
    out = {}
    for k in ("enable", "cc_pre_hook", "cc_log_only"):
        v = sec.get(k, False)
        if not isinstance(v, bool):
            raise ValueError(f"{where}: {k}: monitor.cc_distribution.{k}: expected true or false")
        out[k] = v
    lines = sec.get("cc_codeline", [])
    if not isinstance(lines, list) or not all(isinstance(x, str) for x in lines):
        raise ValueError(f"{where}: cc_codeline: monitor.cc_distribution.cc_codeline: expected a "
                         "list of regular expressions")
    codeline = []
    for x in lines:
        try:
            codeline.append(re.compile(x))
        except re.error as e:
            raise ValueError(f"{where}: cc_codeline: monitor.cc_distribution.cc_codeline: "
                             f"{x!r}: {e}") from None
    return {"enable": out["enable"], "codeline": codeline, "log_only": out["cc_log_only"]}


def call_stack():
    """The Python call stack of the collective's caller as one string, the
    innermost frame first, each frame `FILE[LINE]   FUNCTION`, joined by
    ';' (msprobe's format, so its cc_codeline patterns apply), without
    nprobe's frames, nn.Module's call plumbing and multiprocessing's."""
    out = []
    f = sys._getframe(1)
    while f is not None:
        fn = f.f_code.co_filename
        if not fn.startswith(_PKG) and not any(s in fn for s in _SKIP):
            out.append(f"{fn}[{f.f_lineno}]   {f.f_code.co_name}")
        f = f.f_back
    return ";".join(out)


def merged_stats(ts):
    """The statistics (numel, norm, min, max, mean, zeros, nans, infs) of
    the floating-point tensors among `ts` taken as one (their
    concatenation): the norms' squares summed, min of the minima, max of the
    maxima, the counts summed, the mean over the finite elements (each
    tensor's weighted by its finite count); None when there is no element.
    A DTensor is its local shard, a pending functional collective is waited
    for (the program needs its result anyway)."""
    xs = []
    for t in ts:
        t = dtensor.local(t)
        if isinstance(t, torch.Tensor) and t.is_floating_point() and t.numel():
            xs.append(t)
    if not xs:
        return None
    if len(xs) == 1:
        return tensor_stats(xs[0])
    rows = tensor_stats_many(xs)
    numel = zeros = nans = infs = fin = 0
    ss = tot = 0.0
    lo, hi = math.inf, -math.inf
    for n, norm, mn, mx, mean, z, na, inf in rows:
        numel, zeros, nans, infs = numel + n, zeros + z, nans + na, infs + inf
        f = n - na - inf
        if f > 0:
            fin += f
            ss += norm * norm
            tot += mean * f
            lo, hi = min(lo, mn), max(hi, mx)
    if not fin:
        return (numel, math.nan, math.nan, math.nan, math.nan, zeros, nans, infs)
    return (numel, math.sqrt(ss), lo, hi, tot / fin, zeros, nans, infs)


class CommRecorder:
    """TrainerMon's observer of the collectives (distributed.add_observer)."""

    def __init__(self, mon, cfg):
        self._mon = weakref.ref(mon)    # the observer does not keep the monitor alive
        self.codeline = cfg["codeline"]
        self.log_only = cfg["log_only"]
        self.count = {}         # dname -> calls in this step
        self.stacks = {}        # dname -> distinct call stacks (cc_log_only)
        self.logged = False     # the stacks file written

    def before(self, dname, ins):
        mon = self._mon()
        if mon is None or mon.file is None or not mon._recording():
            return None
        k = self.count.get(dname, 0)
        self.count[dname] = k + 1
        if self.log_only:
            self.stacks.setdefault(dname, set()).add(call_stack())
            return None
        if self.codeline:
            st = call_stack()
            if not any(r.search(st) for r in self.codeline):
                return None
        name = f"Distributed.{dname}.{k}.forward"
        s = merged_stats(ins)
        if s is not None:
            mon._add(name, "comm_in", s)

        def after(outs):
            s = merged_stats(outs)
            if s is not None:
                mon._add(name, "comm_out", s)
        return after

    def step_end(self, recorded):
        """At the end of a step (TrainerMon's post-step hook): the counts
        start again; under cc_log_only, after the first recorded step, the
        stacks are written and the observer removed (True)."""
        self.count = {}
        if not (self.log_only and recorded) or self.logged:
            return False
        self.logged = True
        mon = self._mon()
        path = os.path.join(mon.config["dump_path"], f"cc_stacks_rank{mon.rank}.json")
        doc = {k: sorted(s.split(";") for s in v) for k, v in sorted(self.stacks.items())}
        tmp = path + ".tmp"
        try:
            with open(tmp, "w") as f:
                json.dump(doc, f, indent=1)
            os.replace(tmp, path)
        except OSError as e:        # a log, not worth the program's run
            import warnings
            warnings.warn(f"nprobe: monitor: cc_log_only: {path}: {e}", RuntimeWarning)
        return True
