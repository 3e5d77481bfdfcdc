"""The profile task of PrecisionDebugger (docs/PROFILE.md, "Through the
PyTorch package"): a config with "task": "profile" makes PrecisionDebugger
a ProfileDebugger, with the config's schedule (its "profile" section:
skip_first, wait, warmup, active, repeat, as torch.profiler.schedule takes
them). Each recorded cycle is written as a Chrome trace,
{dump_path}/rank{R}.step{S}.trace.json (S: the cycle's last step).

By default nprobe times the calls itself, with the wrappers and module
hooks the dump task captures through (no torch.profiler): one `cpu_op`
slice per API call as the dump names it (`Functional.linear.3.forward`)
and per API call's backward (`Functional.linear.3.backward`: the autograd
nodes the call made, from the first one's pre-hook to the last one's
hook), one `python_function` slice per module call
(`Module.layers.0.mlp.LlamaMLP.forward.0`) enclosing its calls and per
module backward (`Module.layers.0.mlp.LlamaMLP.backward.0`: from the first
gradient reaching its output to its inputs' gradients done) enclosing its
calls' backwards, and `ProfilerStep#N` per step; times are
time.perf_counter_ns (CLOCK_MONOTONIC, the runtime's clock), per thread
(its native id). "record_shapes": true adds the calls' Input Dims and
FLOPs estimated from the shapes for linear, matmul, mm, bmm, conv2d and
scaled_dot_product_attention. A Memory counter (the process's resident
bytes, /proc/self/statm; on CUDA also torch.cuda.memory_allocated) is
sampled at the end of each module call and at each step's start and end.

"torch_profiler": true runs torch.profiler instead (CPU, and CUDA when
there is one: aten ops and kernels under torch's names), every module
call a record_function range named as the dump names it; record_shapes
then records the aten ops' shapes and torch's FLOPs, "profile_memory": true
torch's allocator events."""
import atexit
import json
import os
import threading
import time

import torch

from . import debugger as _dbg
from . import distributed as _distributed
from . import dtensor as _dtensor
from .debugger import PrecisionDebugger, _rank, _safe_name

_KEYS = ("skip_first", "wait", "warmup", "active", "repeat")
_FLAGS = ("record_shapes", "torch_profiler", "profile_memory")
# the calls record_function's __enter__/__exit__ make, without the object,
# the CUPTI monitor look-up and the torch-function guard (module calls are
# not tensor subclasses' business): two C calls per module call
_enter = torch.ops.profiler._record_function_enter_new
_exit = torch.ops.profiler._record_function_exit._RecordFunction
_ns = time.perf_counter_ns
_tid = threading.get_native_id
_Tensor = torch.Tensor
# the thread's next autograd sequence number (each node made takes one): the
# nodes a call makes are those numbered from its value before the call to
# its value after; None on a torch without it (the last node only, then)
_seq = getattr(torch._C._autograd, "_get_sequence_nr", None)
_grad_tensor = _dbg._grad_tensor
_out_tensors = _dbg._out_tensors
# event kinds: an API call, its backward, a module call, a module backward,
# a step, a memory sample. Each event is (kind, name, n, t0, t1, tid, args);
# a backward's has its enclosing module backward's record at [7] (None at
# the top), a module backward's is a list [.., parent, depth, has_in, step]
_API, _BWD, _MOD, _MBWD, _STEP, _MEM = range(6)
_CAT = ("cpu_op", "cpu_op", "python_function", "python_function", "user_annotation")
try:
    _PAGE = os.sysconf("SC_PAGE_SIZE")
except (ValueError, OSError, AttributeError):
    _PAGE = 4096
# torch.profiler.schedule's actions, as _action() gives them
_NONE, _WARMUP, _RECORD, _SAVE = range(4)


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
                         "keys (skip_first, wait, warmup, active, repeat), record_shapes, "
                         "torch_profiler and profile_memory")
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
                             "(skip_first, wait, warmup, active, repeat, record_shapes, "
                             "torch_profiler, profile_memory)")
        if type(v) is not int or v < 0:
            raise ValueError(f"PrecisionDebugger: {path}: profile.{k}: expected an integer >= 0, "
                             f"got {v!r}")
        sched[k] = v
    return dp, sched


def _action(sched, step):
    """What torch.profiler.schedule(**sched) does at `step` (0-based, counted
    from start()): _NONE, _WARMUP, _RECORD or _SAVE (record, and the cycle
    ends with this step); every step is recorded without `active`."""
    active = sched.get("active", 0)
    if active <= 0:
        return _RECORD
    step -= sched.get("skip_first", 0)
    if step < 0:
        return _NONE
    wait, warmup, repeat = sched.get("wait", 0), sched.get("warmup", 0), sched.get("repeat", 0)
    cycle = wait + warmup + active
    if repeat > 0 and step // cycle >= repeat:
        return _NONE
    k = step % cycle
    if k < wait:
        return _NONE
    if k < wait + warmup:
        return _WARMUP
    return _RECORD if k < cycle - 1 else _SAVE


def _dims(args, kwargs):
    """torch.profiler's Input Dims: each argument's shape, [] for a non-tensor."""
    return [list(a.shape) if isinstance(a, _Tensor) else [] for a in
            list(args) + list(kwargs.values())]


def _prod(xs):
    p = 1
    for x in xs:
        p *= x
    return p


def _flops(api, args, kwargs, y):
    """FLOPs of a forward call from its shapes, as torch.utils.flop_counter
    counts them: 2 x out x K per GEMM (linear, matmul, mm, bmm), conv2d 2 x
    out x (Cin/groups x kh x kw), attention 2 x batch x L x S x (E + Ev)
    (the causal mask not subtracted); 0 for other ops or odd arguments."""
    op = api.rsplit(".", 1)[-1]
    ts = [a for a in list(args) + list(kwargs.values()) if isinstance(a, _Tensor)]
    if not isinstance(y, _Tensor) or not ts:
        return 0
    try:
        if op in ("linear", "matmul", "mm", "bmm", "__matmul__") and ts[0].dim() >= 1:
            return 2 * y.numel() * ts[0].shape[-1]
        if op == "conv2d" and len(ts) >= 2 and ts[1].dim() == 4:
            return 2 * y.numel() * _prod(ts[1].shape[1:])
        if op == "scaled_dot_product_attention" and len(ts) >= 3 and ts[0].dim() >= 2:
            q, k, v = ts[0], ts[1], ts[2]
            return 2 * _prod(q.shape[:-1]) * k.shape[-2] * (q.shape[-1] + v.shape[-1])
    except (RuntimeError, IndexError):
        return 0
    return 0


def _us(t):
    return f"{t // 1000}.{t % 1000:03d}"


class _NoCalls(dict):
    """The reentrant checkpoint's record of a region's calls (debugger.py):
    the profile task keeps none, so the recompute runs as torch's own work
    (inside the backward, not timed call by call)."""

    def __setitem__(self, k, v):
        pass


class _ModIn(torch.autograd.Function):
    """Identity on a module call's inputs (aliases, as the dump's _BwIn):
    its backward runs when the module's inputs' gradients are done, the
    end of the module's backward (on one thread the engine runs a graph's
    later-made nodes first, and this one is made before the module's)."""

    @staticmethod
    def forward(ctx, done, r, *xs):
        ctx.done, ctx.r = done, r
        return tuple(x.detach() for x in xs)

    @staticmethod
    def backward(ctx, *gs):
        ctx.done(ctx.r)
        return (None, None) + gs


def _nest_backward(ev):
    """Each module backward widened to enclose the backwards of the calls
    made inside it (theirs propagated up the module records they were made
    in): it starts at its first output gradient (or at its first call's
    backward where no output gradient was seen: a module returning a
    ModelOutput) and ends when its inputs' gradients are done (or at its
    last call's backward where no input needs one). An end so taken is 1 ns
    after the enclosed one's: a viewer that adds ts and dur in floating
    point (the DevTools Performance panel) would otherwise see the two ends
    apart by a rounding and the enclosed slice overlapping its parent."""
    for e in ev:
        k = e[0]
        if (k != _BWD and k != _MBWD) or len(e) < 8 or not e[3]:
            continue
        t0, t1 = e[3], max(e[4], e[3])
        p = e[7]
        while p is not None:
            if not p[3] or t0 < p[3]:
                p[3] = t0
                if not p[5]:
                    p[5] = e[5]
            if t1 >= p[4]:
                p[4] = t1 + 1
            t1 = p[4]
            p = p[7]
    for e in ev:
        if e[0] == _MBWD and e[4] < e[3]:
            e[4] = e[3]


def _order(e):
    """The writer's order: start, the longer first, a module backward
    before the calls it encloses (the outer module first) on a tie."""
    return (e[3], e[3] - e[4], e[0] != _MBWD, e[8] if e[0] == _MBWD else 0)


class ProfileDebugger(PrecisionDebugger):
    """PrecisionDebugger for a config with "task": "profile": start, stop,
    step and close time the run's calls (or drive torch.profiler)."""

    def __init__(self, config_path=None, task=None, dump_path=None, **_ignored):
        env = os.environ.get("NPROBE_DUMP_CONFIG")
        path = env or config_path
        over = {} if env else {k: v for k, v in (("task", task), ("dump_path", dump_path))
                               if v is not None}
        self.config_path = path
        self.dir, self._sched = _load(path, over)
        self.rank, self.world = _rank()
        self.summary = None
        self.traces = []
        self._hooked = set()
        self._handles = []       # the module hooks, removed at close
        self._counts = {}
        self._started = self._closed = False
        self._foreign = False
        self._steps = 0
        self._shapes = self._sched.get("record_shapes", False)
        self._prof = None
        if self._sched.get("torch_profiler", False):
            self._init_torch()
        else:
            self._init_timer()
        PrecisionDebugger._latest = self
        atexit.register(self.close)

    # ---- torch.profiler (opt-in) ------------------------------------------
    def _init_torch(self):
        self._open = []          # record_function ranges of the module calls in progress
        acts = [torch.profiler.ProfilerActivity.CPU]
        if torch.cuda.is_available():
            acts.append(torch.profiler.ProfilerActivity.CUDA)
        # active 0: every step is recorded, one trace written at close
        schedule = None
        if self._sched.get("active", 0) > 0:
            schedule = torch.profiler.schedule(**{k: self._sched.get(k, 0) for k in _KEYS})
        # record_shapes costs most of torch.profiler's time per op (it keeps
        # the inputs' sizes and strides; with_flops reads them): off unless asked
        self._prof = torch.profiler.profile(activities=acts, schedule=schedule,
                                            on_trace_ready=self._ready,
                                            record_shapes=self._shapes, with_flops=self._shapes,
                                            profile_memory=self._sched.get("profile_memory",
                                                                           False))

    def _ready(self, prof):
        os.makedirs(self.dir, exist_ok=True)
        path = os.path.join(self.dir, f"rank{self.rank}.step{max(self._steps - 1, 0)}.trace.json")
        prof.export_chrome_trace(path)
        self.traces.append(path)

    # ---- nprobe's own timing (the default) ----------------------------------
    def _init_timer(self):
        self._lock = threading.Lock()
        self._ev = []            # the step's events (kind, name, n, t0, t1, tid, args[, ...])
        self._sel = 0            # what the wrappers read: SELECT_API while a step is recorded
        self._mstack, self._ckpt_calls, self._step = [], _NoCalls(), 0
        self._bstack = []        # the module backward records of the module calls open
        self._mfd = None         # /proc/self/statm, read at each Memory sample
        self._cuda = torch.cuda.is_available()
        if self._sched.get("profile_memory", True):
            try:
                self._mfd = os.open("/proc/self/statm", os.O_RDONLY)
            except OSError:      # no procfs: CUDA's counter alone, where there is one
                pass
        self._mem = self._mfd is not None or (self._cuda and self._sched.get("profile_memory", True))
        self._fp = None          # the cycle's trace, written step by step
        self._t_step = None      # the step's start: the last step() or the first start()
        self._tids = set()
        self._timed = self._time_call
        self._base = time.time_ns() - _ns()

    def _recording(self):
        return _action(self._sched, self._steps) in (_RECORD, _SAVE)

    def _time_call(self, api, fn, args, kwargs, inplace):
        """An API call the package's wrapper hands over (debugger.py): timed,
        numbered per step as the dump numbers it; its backward timed over the
        autograd nodes the call made (the node that made its output when it
        made one)."""
        with self._lock:
            counts = self._counts
            n = counts.get(api, 0)
            counts[api] = n + 1
        tls = _dbg._tls
        tls.depth += 1
        s0 = _seq() if _seq is not None else 0
        t0 = _ns()
        try:
            y = fn(*args, **kwargs)
        finally:
            t1 = _ns()
            tls.depth -= 1
            if self._shapes:
                extra = {"Input Dims": _dims(args, kwargs)}
                self._ev.append((_API, api, n, t0, t1, _tid(), extra))
            else:
                self._ev.append((_API, api, n, t0, t1, _tid(), None))
        if self._shapes:
            f = _flops(api, args, kwargs, y)
            if f:
                extra["flops"] = f
        out = y if type(y) is _Tensor or isinstance(y, _Tensor) else \
            next((t for t in y if isinstance(t, _Tensor)), None) \
            if isinstance(y, (tuple, list)) else None
        if out is None and inplace and args and isinstance(args[0], _Tensor):
            out = args[0]         # __setitem__ returns None: its tensor is the first argument
        if out is not None:
            node = out.grad_fn
            if node is not None and (inplace or not any(out is a for a in args)):
                bs = self._bstack
                par = bs[-1] if bs else None
                if _seq is not None and _seq() - s0 > 1:
                    self._hook_composite(node, s0, api, n, par)
                else:
                    self._hook_backward(node, api, n, par)
        return y

    def _hook_backward(self, node, api, n, par):
        ev, step, t = self._ev, self._steps, [0]

        def pre(grad_outputs):
            t[0] = _ns()

        def post(grad_inputs, grad_outputs):
            if self._steps == step and self._sel:
                ev.append((_BWD, api, n, t[0], _ns(), _tid(), None, par))
        try:
            node.register_prehook(pre)
        except AttributeError:     # torch < 2.0: no node pre-hooks, no backward slices
            return
        node.register_hook(post)

    def _hook_composite(self, node, s0, api, n, par):
        """A call that made several autograd nodes (F.cross_entropy: log_softmax
        and nll_loss; F.linear on a 3-d input: t, view, mm, view): its
        backward from the output's node's pre-hook to the hook of the node it
        made first, found among the nodes reachable from the output's through
        nodes numbered from s0 to the thread's next number (made during the
        call). On one thread the engine runs the ready node numbered highest
        first, and a node's consumers are numbered above it, so the node made
        first runs last: it ends the call's backward."""
        s1 = _seq()
        last, lo, todo, seen = node, node._sequence_nr(), [node], {id(node)}
        while todo and lo > s0:
            for f, _ in todo.pop().next_functions:
                if f is not None and id(f) not in seen:
                    seen.add(id(f))
                    k = f._sequence_nr()
                    if s0 <= k < s1:
                        todo.append(f)
                        if k < lo:
                            last, lo = f, k
        ev, step = self._ev, self._steps
        r = [_BWD, api, n, 0, 0, 0, None, par]

        def pre(grad_outputs):
            if self._steps == step and self._sel:
                r[3], r[5] = _ns(), _tid()

        def post(grad_inputs, grad_outputs):
            if r[3]:
                r[4] = _ns()
                ev.append(r)
        try:
            node.register_prehook(pre)
        except AttributeError:      # torch < 2.0
            return
        last.register_hook(post)

    def _collective(self, name, ins, run):
        """A torch.distributed collective (distributed.py's wrappers): timed
        as a call, its input bytes in args."""
        with self._lock:
            n = self._counts.get(name, 0)
            self._counts[name] = n + 1
        _dbg._tls.depth += 1
        t0 = _ns()
        try:
            return run()
        finally:
            t1 = _ns()
            _dbg._tls.depth -= 1
            nb = sum(t.numel() * t.element_size() for t in ins if isinstance(t, _Tensor))
            self._ev.append((_API, name, n, t0, t1, _tid(), {"bytes": nb}))

    # ---- module calls -----------------------------------------------------------
    def _hook_model(self, model):
        if id(model) in self._hooked:
            return
        self._hooked.add(id(model))
        for path, mod in model.named_modules():
            path = _dbg._compiled_path(path)
            if not path or _dbg._is_compile_wrapper(mod):
                continue          # the root: no module call in the dump either
            path, cls = _safe_name(path), _safe_name(_dtensor.module_class_name(mod))
            if self._prof is not None:
                pre, post = self._make_range(path, cls), self._range_end
            else:
                pre, post = self._make_timer(path, cls)
            self._handles.append(mod.register_forward_pre_hook(_dbg._eager_hook(pre)))
            try:
                # also when the forward raises: the call's frame is popped
                self._handles.append(mod.register_forward_hook(_dbg._eager_hook(post),
                                                               always_call=True))
            except TypeError:       # torch < 2.1
                self._handles.append(mod.register_forward_hook(_dbg._eager_hook(post)))

    def _names(self, path, cls):
        # the names of a module's calls, made once: the n-th call of a step
        # takes names[n] (one list look-up in the hot path, no formatting)
        prefix = f"Module.{path}.{cls}.forward."
        return prefix, [prefix + str(i) for i in range(4)]

    def _make_range(self, path, cls):
        prefix, names = self._names(path, cls)
        counts, opened = self._counts, self._open

        def pre(mod, args):
            n = counts.get(path, 0)
            counts[path] = n + 1
            while n >= len(names):
                names.append(prefix + str(len(names)))
            opened.append(_enter(names[n], None))
        return pre

    def _range_end(self, mod, args, out):
        if self._open:
            _exit(self._open.pop())

    def _make_timer(self, path, cls):
        prefix, names = self._names(path, cls)
        bname = f"Module.{path}.{cls}.backward."
        key = ("module", path)      # apart from an API of the same name
        frames, bstack, mem = [], self._bstack, self._mem

        def pre(mod, args):
            if _dbg._current is not self or _dbg._tls.depth or not self._sel:
                frames.append(None)
                return None
            counts, ev = self._counts, self._ev
            with self._lock:
                n = counts.get(key, 0)
                counts[key] = n + 1
            while n >= len(names):
                names.append(prefix + str(len(names)))
            new, r = None, None
            if torch.is_grad_enabled():
                # the module's backward: [kind, name, n, t0, t1, tid, args,
                # parent, depth, has_in, step]
                r = [_MBWD, bname + str(n), 0, 0, 0, 0, None, bstack[-1] if bstack else None,
                     len(bstack), False, self._steps]
                g = [i for i, a in enumerate(args) if _grad_tensor(a)]
                if g:
                    # its inputs through an identity whose backward comes
                    # when their gradients are done (the dump's _BwIn)
                    _dbg._tls.depth += 1
                    try:
                        xs = _ModIn.apply(self._module_back, r, *[args[i] for i in g])
                    except Exception:  # noqa: BLE001 - a tensor autograd functions refuse:
                        xs = None      # the backward ends with its calls' (no input hook)
                    finally:
                        _dbg._tls.depth -= 1
                    if xs is not None:
                        r[9] = True
                        new = list(args)
                        for i, x in zip(g, xs):
                            new[i] = x
                        new = tuple(new)
            bstack.append(r)
            frames.append((names[n], ev, _ns(), r))
            return new

        def post(mod, args, out):
            fr = frames.pop() if frames else None
            if fr is None:
                return
            t1 = _ns()
            ev, r = fr[1], fr[3]
            ev.append((_MOD, fr[0], 0, fr[2], t1, _tid(), None))
            while bstack and bstack.pop() is not r:
                pass                # frames left by an exception
            if r is not None and out is not None:
                for t in _out_tensors(out):
                    if _grad_tensor(t):
                        t.register_hook(self._module_out(r))
            if mem:
                self._memory(ev)
        return pre, post

    def _module_out(self, r):
        """A tensor hook on a module call's output: the first gradient
        arriving starts its backward (the slice is kept from there when no
        input needs a gradient: the dump writes that module's row then)."""
        ev = self._ev

        def hook(g):
            if not r[3] and self._steps == r[10] and self._sel:
                r[3], r[5] = _ns(), _tid()
                if not r[9]:
                    ev.append(r)
        return hook

    def _module_back(self, r):
        """The module's inputs' gradients are done (_ModIn's backward): its
        backward ends (it starts here when no output gradient was seen: the
        enclosed calls' backwards give its start, _nest_backward)."""
        if self._steps != r[10] or not self._sel or r[4]:
            return
        t = _ns()
        if not r[3]:
            r[3], r[5] = t, _tid()
        r[4] = t
        self._ev.append(r)

    def _memory(self, ev):
        """A Memory sample: the process's resident bytes (statm's second
        field, in pages), and torch.cuda.memory_allocated once CUDA is in use."""
        t = _ns()
        rss = -1
        if self._mfd is not None:
            try:
                rss = int(os.pread(self._mfd, 64, 0).split()[1]) * _PAGE
            except (OSError, ValueError, IndexError):
                rss = -1
        cuda = torch.cuda.memory_allocated() if self._cuda and torch.cuda.is_initialized() else -1
        if rss >= 0 or cuda >= 0:
            ev.append((_MEM, "Memory", 0, t, t, _tid(), (rss, cuda)))

    # ---- msprobe's interface -----------------------------------------------
    def start(self, model=None, **_ignored):
        if self._closed or self._foreign:
            return
        if self._prof is not None:
            if model is not None:
                self._hook_model(model)
            if not self._started:
                self._started = True
                self._prof.start()
            return
        _dbg._install()
        _distributed.install()
        if model is not None:
            self._hook_model(model)
        self._started = True
        self._sel = _dbg._SEL_API if self._recording() else 0
        if self._t_step is None:
            self._t_step = _ns()
            if self._sel and self._mem:
                self._memory(self._ev)    # the step's start
        _dbg._current = self

    def stop(self):
        if self._prof is None and _dbg._current is self:
            _dbg._current = None   # the calls up to the step's end (step()) are not timed

    def step(self):
        if not self._started or self._closed:
            return
        if self._prof is not None:
            self._steps += 1
            self._counts.clear()        # the hooks hold this dict
            self._prof.step()
            return
        t1 = _ns()
        act = _action(self._sched, self._steps)
        if act in (_RECORD, _SAVE):
            self._end_step(t1)
            if act == _SAVE:
                self._finish_trace()
        self._ev = []
        self._counts.clear()
        self._steps += 1
        self._step = self._steps
        self._t_step = t1 if _dbg._current is self else None
        self._sel = _dbg._SEL_API if _dbg._current is self and self._recording() else 0

    def _end_step(self, t1):
        ev = self._ev
        t0 = self._t_step if self._t_step is not None else t1
        ev.append((_STEP, "ProfilerStep#%d" % self._steps, 0, t0, t1, _tid(), None))
        if self._mem:
            self._memory(ev)
        self._write_step(ev)

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
        if self._prof is not None:
            if self._started:
                self._prof.stop()
        else:
            if _dbg._current is self:
                _dbg._current = None
            if self._started and self._ev and self._recording():
                self._end_step(_ns())     # a step close() cut short, as torch.profiler keeps it
            self._sel = 0
            self._finish_trace()
            if self._mfd is not None:
                os.close(self._mfd)
                self._mfd = None
        self.summary = {"steps": self._steps, "traces": list(self.traces)}

    def _at_exit(self):
        self.close()

    # ---- the trace --------------------------------------------------------------
    def _write_step(self, ev):
        """The step's events, in start order (the enclosing call first), into
        the cycle's trace (opened at its first recorded step)."""
        if self._fp is None:
            os.makedirs(self.dir, exist_ok=True)
            self._part = os.path.join(self.dir, f"rank{self.rank}.trace.json.partial")
            self._fp = open(self._part, "w", encoding="utf-8")
            self._fp.write(
                '{"schemaVersion":1,"displayTimeUnit":"ms","baseTimeNanoseconds":%d,'
                '"deviceProperties":[],"distributedInfo":{"backend":"nprobe","rank":%d,'
                '"world_size":%d},"traceName":"nprobe profile task (PyTorch package)",'
                '"traceEvents":[\n{"ph":"M","name":"process_name","pid":%d,"tid":0,'
                '"args":{"name":"rank %d"}}' % (self._base, self.rank, self.world, self.rank,
                                                self.rank))
            self._tids = set()
        _nest_backward(ev)
        ev.sort(key=_order)
        step, rank, out, names = self._steps, self.rank, [], {}
        for e in ev:
            kind, t0, tid = e[0], e[3], e[5]
            self._tids.add(tid)
            if kind == _MEM:
                rss, cuda = e[6]
                out.append(',\n{"ph":"C","name":"Memory","pid":%d,"tid":%d,"ts":%s,"args":{%s}}'
                           % (rank, tid, _us(t0), ",".join(
                               '"%s":%d' % kv for kv in (("resident_bytes", rss),
                                                         ("allocated_bytes", cuda)) if kv[1] >= 0)))
                continue
            name = e[1] if kind >= _MOD else "%s.%d.%s" % (e[1], e[2], "forward" if kind == _API
                                                           else "backward")
            q = names.get(name)
            if q is None:
                q = names[name] = json.dumps(name)
            extra = ""
            if e[6]:
                extra = json.dumps(e[6], separators=(",", ":"))[1:-1] + ","
            out.append(',\n{"ph":"X","cat":"%s","name":%s,"pid":%d,"tid":%d,"ts":%s,"dur":%s,'
                       '"args":{%s"step":%d,"rank":%d}}' % (_CAT[kind], q, rank, tid, _us(t0),
                                                           _us(e[4] - t0), extra, step, rank))
        self._fp.write("".join(out))
        self._last = step

    def _finish_trace(self):
        """The cycle's trace complete: its thread names, the closing
        brackets, renamed to rank{R}.step{S}.trace.json (S: its last step)."""
        if self._fp is None:
            return
        names = {t.native_id: t.name for t in threading.enumerate()}
        main = threading.main_thread().native_id
        meta = "".join(',\n{"ph":"M","name":"thread_name","pid":%d,"tid":%d,"args":{"name":%s}}'
                       % (self.rank, t, json.dumps(
                           "API and module calls" if t == main else names.get(t, f"thread {t}")))
                       for t in sorted(self._tids))
        self._fp.write(meta + "\n]}\n")
        self._fp.close()
        self._fp = None
        path = os.path.join(self.dir, f"rank{self.rank}.step{self._last}.trace.json")
        os.replace(self._part, path)
        self.traces.append(path)
