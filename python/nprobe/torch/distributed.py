"""torch.distributed under the PrecisionDebugger (issue 26).

- Collectives as calls: torch.distributed's collectives (all_reduce,
  broadcast, all_gather_into_tensor, reduce_scatter_tensor,
  all_to_all_single, send/recv, batch_isend_irecv, ...) and the
  functional collectives DTensor, tensor parallel and FSDP2 call
  (torch.distributed._functional_collectives: all_reduce, all_gather_single,
  reduce_scatter_single, all_to_all_single, broadcast) are recorded as
  `Distributed.<name>.<n>.forward` calls: what was sent (input.N, read
  before the collective runs), what arrived (output.N), and as scalar
  arguments the group's global ranks (`ranks.0`, `ranks.1`, ...), the
  reduction (`op`: OP_CODES) and the peer or root (`src`, `dst`). A
  functional collective is named after its torch.distributed counterpart
  (all_gather_single -> Distributed.all_gather_into_tensor). They are
  recorded wherever they run (inside a captured call, in backward), the
  ones torch issues for DTensor and FSDP2 included; a collective inside
  another (a functional one calling c10d) is one call. An asynchronous one
  (async_op=True, batch_isend_irecv) has its inputs only (and `async_op`
  1): its outputs arrive at the program's wait, and the package never waits
  in the program's place (a second wait hangs gloo's point-to-point). A
  functional collective's pending result is waited for (AsyncCollectiveTensor
  waits once, whoever asks).
- Observers (add_observer: TrainerMon's cc_distribution, monitor_cc.py):
  before(dname, ins) and after(outs) around each collective, run whether
  or not a debugger captures (inside its record when one does), their own
  torch calls paused from any capture; none: the wrappers' fast path is
  the same but for one test of an empty list.
- torch's own distributed code: a Torch/Tensor/Functional API called
  directly from torch/distributed/ (DTensor's from_local/to_local views,
  parallel styles' hooks, FSDP2's flattening and copies) is torch's work,
  not the model's: not recorded (`internal`).
"""
import inspect
import os
import sys
import threading

import torch

from .. import _lib

on = False          # torch.distributed in use: the internal() check runs
_DIST_DIR = _TORCH_DIR = None
_internal_code = {}
_installed = False

# the reduction of a collective as the `op` scalar
OP_CODES = {"sum": 0.0, "avg": 1.0, "product": 2.0, "min": 3.0, "max": 4.0, "band": 5.0,
            "bor": 6.0, "bxor": 7.0, "premul_sum": 8.0}

# torch.distributed's collectives: name -> (dump name, input arguments,
# output arguments, scalar arguments); an argument named in both is written
# in place (read before and after)
_C10D = {
    "all_reduce": ("all_reduce", ("tensor",), ("tensor",), ("op",)),
    "broadcast": ("broadcast", ("tensor",), ("tensor",), ("src",)),
    "all_gather_into_tensor": ("all_gather_into_tensor", ("input_tensor",), ("output_tensor",),
                               ()),
    "all_gather_single": ("all_gather_into_tensor", ("input_tensor",), ("output_tensor",), ()),
    "all_gather": ("all_gather", ("tensor",), ("tensor_list",), ()),
    "reduce_scatter_tensor": ("reduce_scatter_tensor", ("input",), ("output",), ("op",)),
    "reduce_scatter_single": ("reduce_scatter_tensor", ("input",), ("output",), ("op",)),
    "reduce_scatter": ("reduce_scatter", ("input_list",), ("output",), ("op",)),
    "all_to_all_single": ("all_to_all_single", ("input",), ("output",),
                          ("output_split_sizes", "input_split_sizes")),
    "reduce": ("reduce", ("tensor",), ("tensor",), ("dst", "op")),
    "send": ("send", ("tensor",), (), ("dst",)),
    "recv": ("recv", (), ("tensor",), ("src",)),
}
# isend/irecv are not wrapped: P2POp checks its op by identity against
# them, and a program holding torch's own (imported before start()) would
# be refused; batch_isend_irecv records the pipelines' point-to-point
# the functional collectives (results are new tensors)
_FUNCOL = {
    "all_reduce": ("all_reduce", ("self",), ("reduceOp",)),
    "all_gather_single": ("all_gather_into_tensor", ("self",), ("gather_dim",)),
    "all_gather_tensor": ("all_gather_into_tensor", ("self",), ("gather_dim",)),
    "all_gather_single_autograd": ("all_gather_into_tensor", ("self",), ("gather_dim",)),
    "all_gather_tensor_autograd": ("all_gather_into_tensor", ("self",), ("gather_dim",)),
    "reduce_scatter_single": ("reduce_scatter_tensor", ("self",), ("reduceOp", "scatter_dim")),
    "reduce_scatter_tensor": ("reduce_scatter_tensor", ("self",), ("reduceOp", "scatter_dim")),
    "reduce_scatter_single_autograd": ("reduce_scatter_tensor", ("self",),
                                       ("reduceOp", "scatter_dim")),
    "reduce_scatter_tensor_autograd": ("reduce_scatter_tensor", ("self",),
                                       ("reduceOp", "scatter_dim")),
    "all_to_all_single": ("all_to_all_single", ("self",),
                          ("output_split_sizes", "input_split_sizes")),
    "all_to_all_single_autograd": ("all_to_all_single", ("self",),
                                   ("output_split_sizes", "input_split_sizes")),
    "broadcast": ("broadcast", ("self",), ("src",)),
}


class _Tls(threading.local):
    inside = False       # in a recorded collective (one inside it is its own work)


_tls = _Tls()

# Observers of the collectives (TrainerMon's cc_distribution): objects with
# before(dname, ins) -> None or after(outs), run by the wrappers whether or
# not a debugger captures. Empty: the wrappers' fast path is one more test.
_observers = []


def add_observer(ob):
    """Run ob.before(dname, ins) before each collective (dname the dump's
    name: all_reduce, all_gather_into_tensor, ...; ins the tensors sent, not
    yet read by the collective) and, when it returns a callable, that with
    the tensors that arrived after the collective ([] for an asynchronous
    one). A collective inside another is one call; an observer's own torch
    calls are not captured; an exception in one is a warning and removes it
    (the program's collective runs whatever the observer does)."""
    if ob not in _observers:
        _observers.append(ob)


def remove_observer(ob):
    if ob in _observers:
        _observers.remove(ob)


# torch's plumbing between a caller and what it calls (an autograd
# Function's apply, a no_grad decorator, dynamo's disable wrapper): looked
# through to the frame that called them
_THROUGH = ("autograd/function.py", "utils/_contextlib.py", "_dynamo/eval_frame.py",
            "_compile.py")


def internal(frame):
    """True when `frame` (the caller of an API), looked through torch's
    plumbing (_THROUGH), is torch.distributed's own code."""
    while frame is not None:
        c = frame.f_code
        e = _internal_code.get(id(c))     # by id: a code object's hash is costly (_callsite)
        if e is None or e[0] is not c:
            fn = c.co_filename
            e = _internal_code[id(c)] = (c, 1 if fn.startswith(_DIST_DIR) else 2 if (
                fn.startswith(_TORCH_DIR) and fn[len(_TORCH_DIR):] in _THROUGH) else 0)
        r = e[1]
        if r != 2:
            return r == 1
        frame = frame.f_back
    return False


def run_internal(fn, args, kwargs):
    """An API torch.distributed's own code called: run with the package's
    capture paused (what it calls in turn is torch's work too; the
    collectives it issues are still recorded)."""
    from . import debugger
    debugger._tls.depth += 1
    try:
        return fn(*args, **kwargs)
    finally:
        debugger._tls.depth -= 1


def install():
    """Turn the distributed side on when torch.distributed is initialised
    (at each start()): the internal-caller check
    and the collectives' wrappers (installed once per process)."""
    global on, _DIST_DIR, _TORCH_DIR, _installed
    dist = getattr(torch, "distributed", None)
    if dist is None or not dist.is_available() or not dist.is_initialized():
        return
    from . import dtensor
    dtensor.refresh()
    if _DIST_DIR is None:
        _DIST_DIR = os.path.join(os.path.dirname(dist.__file__), "")
        _TORCH_DIR = os.path.join(os.path.dirname(torch.__file__), "")
    on = True
    from . import pipeline
    pipeline.install()
    if _installed:
        return
    _installed = True
    import torch.distributed.distributed_c10d as c10d
    for name, spec in _C10D.items():
        f = getattr(c10d, name, None)
        if callable(f) and not hasattr(f, "_nprobe_orig"):
            w = _c10d_wrapper(name, spec, f)
            setattr(c10d, name, w)
            if getattr(dist, name, None) is f:
                setattr(dist, name, w)
    f = getattr(c10d, "batch_isend_irecv", None)
    if callable(f) and not hasattr(f, "_nprobe_orig"):
        w = _batch_wrapper(f)
        c10d.batch_isend_irecv = w
        if getattr(dist, "batch_isend_irecv", None) is f:
            dist.batch_isend_irecv = w
    try:
        import torch.distributed._functional_collectives as funcol
    except ImportError:
        return
    for name, spec in _FUNCOL.items():
        f = getattr(funcol, name, None)
        if callable(f) and not hasattr(f, "_nprobe_orig"):
            setattr(funcol, name, _funcol_wrapper(name, spec, f))


# ---- arguments ----------------------------------------------------------------

def _op_code(op):
    if op is None:
        return None
    if isinstance(op, str):
        s = op
    else:
        s = getattr(op, "name", None) or str(op)
    s = s.rsplit(".", 1)[-1].lower()
    return OP_CODES.get(s, float("nan"))


def group_ranks(group, funcol=False):
    """The global ranks of a collective's group (None: the default group,
    a ProcessGroup, a group name, a DeviceMesh or (mesh, dim), a list of
    ranks); [] when they cannot be told."""
    import torch.distributed as dist
    try:
        if group is None:
            return list(range(dist.get_world_size()))
        if isinstance(group, (list, tuple)) and group and all(isinstance(r, int) for r in group):
            return list(group)
        if funcol or not isinstance(group, dist.ProcessGroup):
            import torch.distributed._functional_collectives as fc
            # torch 2.6 has only _resolve_group_name (the group's name, resolved below)
            resolve = getattr(fc, "_resolve_group", None) or fc._resolve_group_name
            group = resolve(group, "")
        if isinstance(group, str):
            import torch.distributed.distributed_c10d as c10d
            group = c10d._resolve_process_group(group)
        return list(dist.get_process_group_ranks(group))
    except Exception:  # noqa: BLE001 - the ranks are information, not a need
        return []


def _scalars(bound, names, group, funcol=False):
    out = []
    for n in names:
        if n not in bound:
            continue
        v = bound[n]
        if n in ("op", "reduceOp"):
            c = _op_code(v)
            if c is not None:
                out.append(("op", c))
        elif isinstance(v, bool) or v is None:
            continue
        elif isinstance(v, (int, float)):
            out.append((n, float(v)))
        elif isinstance(v, (list, tuple)) and all(isinstance(x, int) for x in v):
            out.extend((f"{n}.{j}", float(x)) for j, x in enumerate(v))
    out.extend((f"ranks.{j}", float(r)) for j, r in enumerate(group_ranks(group, funcol)))
    return out


def _tensors(bound, names):
    ts = []
    for n in names:
        v = bound.get(n)
        if isinstance(v, torch.Tensor):
            ts.append(v)
        elif isinstance(v, (list, tuple)):
            ts.extend(t for t in v if isinstance(t, torch.Tensor))
    return ts


def _bind(sig_cache, fn, args, kwargs):
    sig = sig_cache.get(fn)
    if sig is None:
        sig = sig_cache[fn] = inspect.signature(fn)
    b = sig.bind(*args, **kwargs)
    b.apply_defaults()
    return b.arguments


_sigs = {}


def _capturing():
    """The debugger capturing API calls now, else None."""
    from . import debugger
    d = debugger._current
    if d is None or _tls.inside or debugger._compiling() or not (d._sel & _lib.SELECT_API):
        return None
    return d


def _observer_failed(ob, e):
    import warnings
    remove_observer(ob)
    warnings.warn(f"nprobe: a collective's observer failed and is removed ({type(e).__name__}: "
                  f"{e}); the program goes on", RuntimeWarning, stacklevel=3)


def _before(dname, ins):
    """The observers' before(): [(observer, after)] of those that want the
    outputs. Their torch calls paused from any capture."""
    from . import debugger
    pending = []
    debugger._tls.depth += 1
    try:
        for ob in list(_observers):
            try:
                after = ob.before(dname, ins)
            except Exception as e:  # noqa: BLE001 - an observer never fails the program
                _observer_failed(ob, e)
                continue
            if after is not None:
                pending.append((ob, after))
    finally:
        debugger._tls.depth -= 1
    return pending


def _after(pending, outs_fn, y):
    from . import debugger
    debugger._tls.depth += 1
    try:
        outs = outs_fn(y)
        for ob, after in pending:
            try:
                after(outs)
            except Exception as e:  # noqa: BLE001
                _observer_failed(ob, e)
    finally:
        debugger._tls.depth -= 1


def _observed(dname, ins, outs_fn, run):
    """A collective no debugger captures, with observers: before, run(),
    after (one inside it, a functional collective's c10d call, is its own
    work: not observed; nor one dynamo traces)."""
    from . import debugger
    if _tls.inside or not _observers or debugger._compiling():
        return run()
    _tls.inside = True
    try:
        return _observing(dname, ins, outs_fn, run)()
    finally:
        _tls.inside = False


def _observing(dname, ins, outs_fn, run):
    """run() with the observers around it (inside a debugger's record)."""
    def go():
        pending = _before(dname, ins)
        y = run()
        if pending:
            _after(pending, outs_fn, y)
        return y
    return go


# ---- the wrappers ---------------------------------------------------------------

def _record(d, dname, ins, outs_fn, scalars, run):
    """One collective: its call row and inputs, then `run()`, then its outputs
    (outs_fn(result)) and the placement rows of its leaves on the dump's
    mesh (dtensor.collective_rows); the result of run()."""
    from . import debugger
    if d._timed is not None:       # the profile task (profile.py): timed, its bytes
        _tls.inside = True
        try:
            def timed():
                return d._collective(f"Distributed.{dname}", ins, run)
            # the observers outside the timed collective
            return _observing(dname, ins, outs_fn, timed)() if _observers else timed()
        finally:
            _tls.inside = False
    if _observers:
        run = _observing(dname, ins, outs_fn, run)
    debugger._tls.depth += 1
    _tls.inside = True
    try:
        _, call, parent, site = d._open_call(f"Distributed.{dname}")
        ranks = [int(v) for k, v in scalars if k.startswith("ranks.")]
        with d._lock:
            if not d._begun:
                d._begin()        # the mesh is set there (FSDP2 gathers before any call)
            scalars = _line_scalars(d, ranks, scalars)
            n0 = len(d._placed)
            began = d._emit(call, parent, site, ins, scalars, (), ())
            y = run()
            if began:
                outs = outs_fn(y)
                for k, t in enumerate(outs):
                    d._safe_leaf(call, _lib.ROLE_OUTPUT, str(k).encode(), t)
                if d._mesh:
                    _place_leaves(d, call, dname, ranks, scalars, ins, outs, n0)
        return y
    finally:
        _tls.inside = False
        debugger._tls.depth -= 1


def _line_scalars(d, ranks, scalars):
    """On a mesh of several dimensions, a group that is one line of it
    (FSDP2's dp all-gather at each tp coordinate) is written as
    `mesh_dim` (its dimension: the same on every rank, as compare's replica
    check wants a scalar argument) instead of its ranks (which differ from
    line to line; mesh_coords and the dimension give them), and a
    point-to-point call's `peer.N` as the peer's index in the group."""
    mesh = d._mesh
    if not mesh or len(mesh.shape) < 2 or not ranks:
        return scalars
    gd = mesh.group_dim(ranks)
    if gd is None:
        return scalars
    # a point-to-point peer by its place in the group (a pipeline's next
    # stage), the same on every line
    return [(k, float(ranks.index(int(v))) if k.startswith("peer.") and int(v) in ranks else v)
            for k, v in scalars if not k.startswith("ranks.")] + [("mesh_dim", float(gd[0]))]


def _place_leaves(d, call, dname, ranks, scalars, ins, outs, n0):
    """The collective's placement rows, but for leaves placed already (a
    DTensor's shard known by its memory)."""
    from . import dtensor
    try:
        op = next((v for k, v in scalars if k == "op"), None)
        done = {(role, key) for c, role, key, _ in d._placed[n0:] if c == call}
        # an all_to_all with split sizes: pieces of sizes only each rank knows
        local = any(k.startswith(("input_split_sizes", "output_split_sizes")) for k, _ in scalars)
        rows = dtensor.collective_rows(d, dname, ranks, op,
                                       [dtensor.local(t) for t in ins],
                                       [dtensor.local(t) for t in outs], local)
        for role, i, mr in rows:
            if (role, str(i)) not in done:
                dtensor.place(d, call, role, str(i), mr)
            if local and role == _lib.ROLE_OUTPUT:
                # what a dispatch delivered is this rank's own, for the calls
                # that take it (the combine's output put back in order)
                dtensor._remember_local(d, dtensor.local(outs[i]), mr)
    except Exception as e:  # noqa: BLE001 - the dump must not fail the program
        dtensor._no_row(d, f"{call}: {type(e).__name__}: {e}")


def _c10d_wrapper(name, spec, orig):
    dname, in_names, out_names, sc_names = spec

    def wrapper(*args, **kwargs):
        d = _capturing()
        if d is None and not _observers:
            return orig(*args, **kwargs)
        try:
            b = _bind(_sigs, orig, args, kwargs)
        except TypeError:
            return orig(*args, **kwargs)       # torch says what is wrong
        ins = _tensors(b, in_names)
        # asynchronous: the outputs are not there before the program waits,
        # and a second wait hangs on gloo's point-to-point: the inputs only
        asy = bool(b.get("async_op"))
        outs_fn = (lambda _y: []) if asy else (lambda _y: _tensors(b, out_names))
        if d is None:
            return _observed(dname, ins, outs_fn, lambda: orig(*args, **kwargs))
        scalars = _scalars(b, sc_names, b.get("group"))
        if asy:
            scalars.append(("async_op", 1.0))
        return _record(d, dname, ins, outs_fn, scalars, lambda: orig(*args, **kwargs))
    wrapper._nprobe_orig = orig
    wrapper.__wrapped__ = orig
    wrapper.__name__, wrapper.__doc__ = orig.__name__, orig.__doc__
    return wrapper


def _batch_wrapper(orig):
    """batch_isend_irecv(p2p_op_list): one Distributed.batch_isend_irecv
    call: the tensors sent as inputs and the peers (`peer.N`, in the list's
    order); what is received is not recorded (it arrives at the program's
    wait)."""
    def wrapper(p2p_op_list):
        d = _capturing()
        if d is None and not _observers:
            return orig(p2p_op_list)
        sends, scalars = [], []
        for j, op in enumerate(p2p_op_list):
            if getattr(op.op, "__name__", "") == "isend":
                sends.append(op.tensor)
            scalars.append((f"peer.{j}", float(op.peer)))
        if d is None:
            return _observed("batch_isend_irecv", sends, lambda _y: [],
                             lambda: orig(p2p_op_list))
        group = getattr(p2p_op_list[0], "group", None) if p2p_op_list else None
        scalars.extend((f"ranks.{j}", float(r)) for j, r in enumerate(group_ranks(group)))

        # asynchronous: what is received is not there before the program
        # waits (a wait here, then the program's, hangs on gloo): the
        # tensors sent only
        return _record(d, "batch_isend_irecv", sends, lambda _y: [], scalars,
                       lambda: orig(p2p_op_list))
    wrapper._nprobe_orig = orig
    wrapper.__wrapped__ = orig
    wrapper.__name__, wrapper.__doc__ = orig.__name__, orig.__doc__
    return wrapper


def _funcol_wrapper(name, spec, orig):
    dname, in_names, sc_names = spec

    def wrapper(*args, **kwargs):
        d = _capturing()
        if d is None and not _observers:
            return orig(*args, **kwargs)
        try:
            b = _bind(_sigs, orig, args, kwargs)
        except TypeError:
            return orig(*args, **kwargs)
        ins = _tensors(b, in_names)

        def outs_fn(y):
            return [y] if isinstance(y, torch.Tensor) else []
        if d is None:
            return _observed(dname, ins, outs_fn, lambda: orig(*args, **kwargs))
        scalars = _scalars(b, sc_names, b.get("group"), funcol=True)
        return _record(d, dname, ins, outs_fn, scalars, lambda: orig(*args, **kwargs))
    wrapper._nprobe_orig = orig
    wrapper.__wrapped__ = orig
    wrapper.__name__, wrapper.__doc__ = orig.__name__, orig.__doc__
    return wrapper
