"""The profile task of PrecisionDebugger (docs/PROFILE.md, "Through the
PyTorch package"): a config with "task": "profile" makes PrecisionDebugger
a ProfileDebugger. It runs torch.profiler (CPU, and CUDA when there is one)
with the config's schedule (its "profile" section: skip_first, wait, warmup,
active, repeat, as torch.profiler.schedule takes them; record_shapes, off
by default, records the ops' input shapes and torch's FLOPs estimate with
them), and marks every module call of the model given to start() as
a record_function range named as the dump names it
("Module.layers.0.mlp.LlamaMLP.forward.0"), so the trace pairs with a dump
and `nprobe profile compare` pairs two runs' module calls by name. Each
recorded cycle is written as torch writes it, a Chrome trace:
{dump_path}/rank{R}.step{S}.trace.json (S: the cycle's last step).
The API calls inside keep torch's own names (aten::...)."""
import atexit
import json
import os

import torch

from .debugger import PrecisionDebugger, _rank, _safe_name

_KEYS = ("skip_first", "wait", "warmup", "active", "repeat")
_FLAGS = ("record_shapes",)
# the calls record_function's __enter__/__exit__ make, without the object,
# the CUPTI monitor look-up and the torch-function guard (module calls are
# not tensor subclasses' business): two C calls per module call
_enter = torch.ops.profiler._record_function_enter_new
_exit = torch.ops.profiler._record_function_exit._RecordFunction


def config_is_profile(path, task):
    """1 when the config (or the task override) asks for the profile task"""
    if task is not None:
        return task == "profile"
    try:
        with open(path, encoding="utf-8") as f:
            cfg = json.load(f)
    except (OSError, ValueError, TypeError):
        return False      # PrecisionDebugger's own loader names what is wrong
    return isinstance(cfg, dict) and cfg.get("task") == "profile"


def _load(path, over):
    try:
        with open(path, encoding="utf-8") as f:
            cfg = json.load(f)
    except (OSError, ValueError) as e:
        raise ValueError(f"PrecisionDebugger: config_path {path}: {e}") from None
    if not isinstance(cfg, dict):
        raise ValueError(f"PrecisionDebugger: config_path {path}: not a JSON object")
    cfg.update(over)
    dp = cfg.get("dump_path")
    if not isinstance(dp, str) or not dp:
        raise ValueError(f"PrecisionDebugger: {path}: dump_path: the profile task needs the "
                         "trace's folder")
    sec = cfg.get("profile", {})
    if not isinstance(sec, dict):
        raise ValueError(f"PrecisionDebugger: {path}: profile: expected an object of schedule "
                         "keys (skip_first, wait, warmup, active, repeat) and record_shapes")
    sched = {}
    for k, v in sec.items():
        if k in _FLAGS:
            if type(v) is not bool:
                raise ValueError(f"PrecisionDebugger: {path}: profile.{k}: expected true or "
                                 f"false, got {v!r}")
            sched[k] = v
            continue
        if k not in _KEYS:
            raise ValueError(f"PrecisionDebugger: {path}: profile.{k}: unknown key "
                             "(skip_first, wait, warmup, active, repeat, record_shapes)")
        if type(v) is not int or v < 0:
            raise ValueError(f"PrecisionDebugger: {path}: profile.{k}: expected an integer >= 0, "
                             f"got {v!r}")
        sched[k] = v
    return dp, sched


class ProfileDebugger(PrecisionDebugger):
    """PrecisionDebugger for a config with "task": "profile": start, stop,
    step and close drive torch.profiler instead of the probe."""

    def __init__(self, config_path=None, task=None, dump_path=None, **_ignored):
        env = os.environ.get("NPROBE_DUMP_CONFIG")
        path = env or config_path
        over = {} if env else {k: v for k, v in (("task", task), ("dump_path", dump_path))
                               if v is not None}
        self.config_path = path
        self.dir, sched = _load(path, over)
        self.rank, self.world = _rank()
        self.summary = None
        self.traces = []
        self._hooked = set()
        self._handles = []       # the module hooks, removed at close
        self._open = []          # record_function ranges of the module calls in progress
        self._counts = {}
        self._started = self._closed = False
        acts = [torch.profiler.ProfilerActivity.CPU]
        if torch.cuda.is_available():
            acts.append(torch.profiler.ProfilerActivity.CUDA)
        # active 0: every step is recorded, one trace written at close
        schedule = None
        if sched.get("active", 0) > 0:
            schedule = torch.profiler.schedule(**{k: sched.get(k, 0) for k in _KEYS})
        self._steps = 0
        # record_shapes costs most of torch.profiler's time per op (it keeps
        # the inputs' sizes and strides; with_flops reads them): off unless asked
        shapes = sched.get("record_shapes", False)
        self._prof = torch.profiler.profile(activities=acts, schedule=schedule,
                                            on_trace_ready=self._ready, record_shapes=shapes,
                                            with_flops=shapes)
        PrecisionDebugger._latest = self
        atexit.register(self.close)

    def _ready(self, prof):
        os.makedirs(self.dir, exist_ok=True)
        path = os.path.join(self.dir, f"rank{self.rank}.step{max(self._steps - 1, 0)}.trace.json")
        prof.export_chrome_trace(path)
        self.traces.append(path)

    # ---- module calls as record_function ranges ----------------------------
    def _hook_model(self, model):
        if id(model) in self._hooked:
            return
        self._hooked.add(id(model))
        for path, mod in model.named_modules():
            if not path:
                continue          # the root: no module call in the dump either
            path, cls = _safe_name(path), _safe_name(type(mod).__name__)
            self._handles.append(mod.register_forward_pre_hook(self._make_pre(path, cls)))
            self._handles.append(mod.register_forward_hook(self._post))

    def _make_pre(self, path, cls):
        # the names of a module's calls, made once: the n-th call of a step
        # takes names[n] (one list look-up in the hot path, no formatting)
        prefix = f"Module.{path}.{cls}.forward."
        names = [prefix + str(i) for i in range(4)]
        counts, opened = self._counts, self._open

        def pre(mod, args):
            n = counts.get(path, 0)
            counts[path] = n + 1
            while n >= len(names):
                names.append(prefix + str(len(names)))
            opened.append(_enter(names[n], None))
        return pre

    def _post(self, mod, args, out):
        if self._open:
            _exit(self._open.pop())

    # ---- msprobe's interface -----------------------------------------------
    def start(self, model=None, **_ignored):
        if self._closed:
            return
        if model is not None:
            self._hook_model(model)
        if not self._started:
            self._started = True
            self._prof.start()

    def stop(self):
        pass              # the profiler runs on to the step's end (step())

    def step(self):
        if self._started and not self._closed:
            self._steps += 1
            self._counts.clear()        # the hooks hold this dict
            self._prof.step()

    def set_init_step(self, step):
        pass

    def save(self, variable, name, save_backward=True):
        pass

    def close(self):
        if self._closed:
            return
        self._closed = True
        for h in self._handles:
            h.remove()
        self._handles.clear()
        if self._started:
            self._prof.stop()
        self.summary = {"steps": self._steps, "traces": list(self.traces)}

    def _at_exit(self):
        self.close()
