"""torch.distributed.pipelining under the PrecisionDebugger (issue 26).

A pipeline schedule (ScheduleGPipe, Schedule1F1B, ...) runs each stage's
module once per micro-batch: `forward_one_chunk(chunk)`,
`backward_one_chunk(chunk)` (and `backward_weight_one_chunk` for the
zero-bubble schedules) on the stage object, the loss in
`_maybe_compute_loss(stage, ..., mb_index)`. The package wraps those
methods (once, when the pipelining module is in use) to know, for every
row written meanwhile, the stage (`stage_index`) and the micro-batch:
`current()`. The schedule's sends and receives between the stages
(`_batch_p2p`: torch.distributed.isend/irecv) are
`Distributed.batch_isend_irecv` calls (the tensors sent). Placement rows
carry the stage and micro-batch (docs/FORMAT.md "/placements": `stage`,
`micro_batch`); parameter rows and the parameters' gradients (summed over
the micro-batches, written at stop()) keep micro_batch -1. The schedule's
step() is wrapped too: while it runs, schedule() gives its pipeline group
and micro-batch count, from which the dump's mesh gets its `pp` and `mb`
dimensions (dtensor.set_mesh; docs/TORCH.md "Pipelines").

The stage's set-up runs the module once more on its first step, to learn
the shapes it sends (`_forward_metadata_inference`,
`_backward_metadata_inference`, `_prepare_*_infra`, the metadata sent
between the stages): pipelining's work, not the model's, so nothing is
captured there (no rows, no collectives, no parameter gradients).
"""
import sys
import threading

import torch

_installed = False
_paused = 0          # > 0 inside a stage's set-up (the debugger's hooks stand aside)
_active = 0          # chunks running now, all threads (current() reads its thread's only then)
_sched = None        # the schedule whose step() runs now (schedule())


class _Tls(threading.local):
    stage = -1
    micro_batch = -1


_tls = _Tls()
def current():
    """(stage, micro_batch) of the chunk running now; (-1, -1) outside one."""
    if not _active:
        return -1, -1
    return _tls.stage, _tls.micro_batch


def _wraps(orig, wrapper):
    """wrapper, marked as the package's wrapper of orig, with orig's name."""
    wrapper._nprobe_orig = orig
    wrapper.__name__, wrapper.__doc__ = orig.__name__, orig.__doc__
    return wrapper


def _in_chunk(stage, mb, call):
    """call() as the chunk of `stage` (its stage_index) for micro-batch `mb`:
    current() says so meanwhile, in this thread."""
    global _active
    saved = _tls.stage, _tls.micro_batch
    try:
        _tls.stage = int(getattr(stage, "stage_index", -1))
        _tls.micro_batch = int(mb) if isinstance(mb, int) else -1
    except (TypeError, ValueError):
        pass
    _active += 1
    try:
        return call()
    finally:
        _active -= 1
        _tls.stage, _tls.micro_batch = saved


_seen = {}           # (stage, micro-batch) -> its rows, this step's forward chunks


def _chunk_rows(stage, mb, args, kwargs):
    """The rows of forward chunk `mb`: the first dimension of its first
    tensor argument (the first stage's) or of the first buffer it receives
    into (a later stage's), None when neither is known."""
    a = kwargs.get("args", args[1] if len(args) > 1 else None)
    ts = [t for t in (a if isinstance(a, (tuple, list)) else (a,)) if isinstance(t, torch.Tensor)]
    if not ts:
        try:
            ts = [i.buffer for i in stage.args_recv_info[mb]
                  if isinstance(getattr(i, "buffer", None), torch.Tensor)]
        except Exception:  # noqa: BLE001 - another torch's stage internals: not known
            ts = []
    return int(ts[0].shape[0]) if ts and ts[0].dim() else None


def _chunk(orig, pos, name):
    """Wrap a stage method whose argument `name` (position `pos` after
    self) is the micro-batch index; a forward chunk's rows are noted
    (chunk_sizes)."""
    def wrapper(self, *args, **kwargs):
        mb = kwargs.get(name, args[pos] if len(args) > pos else -1)
        if name == "fwd_chunk_id" and isinstance(mb, int):
            rows = _chunk_rows(self, mb, args, kwargs)
            if rows is not None:
                _seen[(int(getattr(self, "stage_index", -1)), mb)] = rows
        return _in_chunk(self, mb, lambda: orig(self, *args, **kwargs))
    return _wraps(orig, wrapper)


def chunk_sizes(n):
    """The n micro-batches' rows as the running chunk's stage has seen them
    in this step's forward chunks (a stage not given the batch: neither the
    first nor the last), the ones not seen yet taken as the running one's;
    None outside a chunk, before its forward, or while every micro-batch
    seen has the running one's rows (equal sizes: the step's first call
    says them, dtensor.mb_context)."""
    st, m = current()
    if st < 0 or not 0 <= m < n or (st, m) not in _seen:
        return None
    rows = _seen[(st, m)]
    sizes = [_seen.get((st, j), rows) if j <= m else rows for j in range(n)]
    return sizes if any(x != rows for x in sizes) else None


def seen_rows():
    """Every forward chunk's rows seen in this step (a set)."""
    return set(_seen.values())


def _loss(orig):
    """_maybe_compute_loss(self, stage, output, target_mbs, mb_index, ...)."""
    def wrapper(self, stage, output, target_mbs, mb_index, *args, **kwargs):
        return _in_chunk(stage, mb_index,
                         lambda: orig(self, stage, output, target_mbs, mb_index, *args, **kwargs))
    return _wraps(orig, wrapper)


def _pause(orig):
    def wrapper(*args, **kwargs):
        global _paused
        from . import debugger, distributed
        _paused += 1
        debugger._tls.depth += 1
        inside, distributed._tls.inside = distributed._tls.inside, True
        try:
            return orig(*args, **kwargs)
        finally:
            distributed._tls.inside = inside
            debugger._tls.depth -= 1
            _paused -= 1
    return _wraps(orig, wrapper)


_batch = None        # the rows of the batch the running step() was given (None: unknown)


def _rows(args, kwargs):
    """The first dimension of step()'s first tensor argument (the first
    stage's batch) or of its target (the last stage's), None without one."""
    for t in list(args) + [kwargs.get("target")]:
        if isinstance(t, torch.Tensor) and t.dim():
            return int(t.shape[0])
    return None


def _step(orig):
    """A schedule's step(): schedule() gives it meanwhile."""
    def wrapper(self, *args, **kwargs):
        global _sched, _batch
        saved, _sched = (_sched, _batch), self
        _batch = _rows(args, kwargs)
        _seen.clear()
        try:
            return orig(self, *args, **kwargs)
        finally:
            _sched, _batch = saved
    wrapper._nprobe_orig = orig
    wrapper.__name__, wrapper.__doc__ = orig.__name__, orig.__doc__
    return wrapper


class Schedule:
    """What the dump's mesh needs of the schedule running now: the global
    ranks of its pipeline group in order (`ranks`), this rank's index among
    them (`coord`), its micro-batches (`n_mb`), and what the schedule
    divides the parameters' accumulated gradients by (`div`: the
    micro-batch count under scale_grads, pipelining's mean-loss
    convention; 1 for a summed loss), and the micro-batches' sizes when
    the batch's rows are known and M does not divide them (`sizes`:
    torch.tensor_split's, as pipelining splits; None otherwise)."""
    __slots__ = ("ranks", "coord", "n_mb", "div", "sizes")

    def __init__(self, ranks, coord, n_mb, div, sizes=None):
        self.ranks, self.coord, self.n_mb, self.div = ranks, coord, n_mb, div
        self.sizes = sizes


def schedule():
    """The Schedule of the pipeline step running now, None outside one (or
    when its stage or group cannot be read)."""
    s = _sched
    if s is None:
        return None
    try:
        import torch.distributed as dist
        stage = getattr(s, "_stage", None)
        if stage is None:
            stage = (getattr(s, "_stages", None) or [None])[0]
        n = int(getattr(s, "_n_microbatches"))
        group = getattr(stage, "group", None)
        ranks = list(dist.get_process_group_ranks(group)) if group is not None else \
            list(range(dist.get_world_size()))
        coord = ranks.index(dist.get_rank())
        div = n if getattr(s, "scale_grads", True) else 1
    except Exception:  # noqa: BLE001 - another torch's pipelining internals: no mesh from it
        return None
    sizes = None
    if _batch is not None and n >= 1 and _batch % n:
        q, r = divmod(_batch, n)
        sizes = [q + (m < r) for m in range(n)]
    return Schedule(ranks, coord, n, div, sizes) if n >= 1 else None


def _p2p(orig):
    """schedules._batch_p2p(p2p_ops, desc): the schedule's sends and
    receives between stages (torch.distributed.isend/irecv, which the
    package does not wrap) as one Distributed.batch_isend_irecv call: the
    tensors sent, the peers."""
    from . import distributed

    def wrapper(p2p_ops, *args, **kwargs):
        return distributed._batch_wrapper(lambda ops: orig(ops, *args, **kwargs))(p2p_ops)
    return _wraps(orig, wrapper)


_CHUNKS = {"forward_one_chunk": (0, "fwd_chunk_id"), "backward_one_chunk": (0, "bwd_chunk_id"),
           "backward_weight_one_chunk": (0, "bwd_chunk_id")}
_SETUP = ("_forward_metadata_inference", "_backward_metadata_inference",
          "_prepare_forward_infra", "_prepare_backward_infra", "_send_meta", "_recv_meta",
          "_warmup_forward_vote", "_warmup_backward_result")


def install():
    """Wrap the stages' and schedules' methods (once), when
    torch.distributed.pipelining has been imported by the program."""
    global _installed
    if _installed:
        return
    stage_mod = sys.modules.get("torch.distributed.pipelining.stage")
    sched_mod = sys.modules.get("torch.distributed.pipelining.schedules")
    if stage_mod is None or sched_mod is None:
        return
    _installed = True
    for obj in list(vars(stage_mod).values()):
        if not isinstance(obj, type):
            continue
        for name, (pos, arg) in _CHUNKS.items():
            f = obj.__dict__.get(name)
            if callable(f) and not hasattr(f, "_nprobe_orig"):
                setattr(obj, name, _chunk(f, pos, arg))
        for name in _SETUP:
            f = obj.__dict__.get(name)
            if callable(f) and not hasattr(f, "_nprobe_orig"):
                setattr(obj, name, _pause(f))
    f = getattr(sched_mod, "_batch_p2p", None)
    if callable(f) and not hasattr(f, "_nprobe_orig"):
        sched_mod._batch_p2p = _p2p(f)
    for obj in list(vars(sched_mod).values()):
        if not isinstance(obj, type):
            continue
        f = obj.__dict__.get("step")
        if callable(f) and not hasattr(f, "_nprobe_orig"):
            setattr(obj, "step", _step(f))
        f = obj.__dict__.get("_maybe_compute_loss")
        if callable(f) and not hasattr(f, "_nprobe_orig"):
            setattr(obj, "_maybe_compute_loss", _loss(f))
