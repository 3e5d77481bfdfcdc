"""nprobe.torch.ep_optim - an optimizer's API calls under expert parallel
numbered as one process numbers them (docs/TORCH.md "Expert parallel").

A per-parameter optimizer (SGD's, Adam's and AdamW's for-loop step, the
default on CPU) makes the same calls for each parameter it updates, one
parameter after the other, in the order of its parameter list. Rank e of
an expert-parallel run updates only its own experts' parameters, so from
the first parameter the one process would update for another rank's
expert on, its calls (`Tensor.add_.N` of SGD) take numbers one process
gives other parameters' calls, and nothing pairs.

So during `optimizer.step()` (a global step pre-hook) each captured API
call is given to the parameter it works on: the first of its tensor
arguments that is a parameter of the step, its gradient or a tensor of
its optimizer state (a call on none of them, `denom.add_(eps)` on a
temporary, belongs to the parameter before it). A call on a new parameter
opens its block; at that point each API's counter is set to where one
process's would be: the previous block's start plus (the one-process
positions between the two parameters) times that block's calls of the
API, so that the parameters of other ranks' experts in between count as
if they had been updated here. After the step the counters are moved past
the one process's remaining parameters the same way.

A parameter's one-process position: its position in the optimizer's
parameter list (groups in order) plus, for each experts container
(`PrecisionDebugger(experts=...)`), the parameters of the experts this
rank does not hold that come before it (their count times the parameters
of one expert): the experts held here before it in the one-process order
for an expert's parameter, all of them for a parameter after the
container's. This takes each container's parameters in the list to be
contiguous and in expert order (model.parameters() and groups built from
it), every expert with as many parameters, and every parameter updated
(a parameter whose gradient is None is skipped by the optimizer: the
block counts then differ, as they would in one process)."""
import warnings

import torch

from . import dtensor as _dtensor


class StepNumbering:
    """The renumbering of one optimizer step of debugger `d`."""

    def __init__(self, d, glob, owners, n_glob, keep):
        self.d = d
        self.glob = glob            # id(parameter) -> its one-process position
        self.owners = owners        # id(tensor) -> id(parameter): parameter, grad, state
        self.n_glob = n_glob        # the one process's parameter count
        self._keep = keep           # the tensors whose ids are keys, alive for the step
        self.cur = None             # id of the parameter whose block is open
        self.start = {}             # API -> its counter at its first call in the block
        self.k = {}                 # API -> its calls in the block

    def _owner(self, args, kwargs):
        for a in list(args) + list(kwargs.values() if kwargs else ()):
            if isinstance(a, torch.Tensor):
                o = self.owners.get(id(a))
                if o is not None:
                    return o
        return None

    def enter(self, api, args, kwargs):
        """Before API call `api` takes its number (under the debugger's lock)."""
        o = self._owner(args, kwargs)
        if o is not None and o != self.cur:
            self._move(self.glob[o] if self.cur is not None else None)
            self.cur, self.start, self.k = o, {}, {}
        if self.cur is not None:
            if api not in self.start:
                self.start[api] = self.d._counts.get(api, 0)
            self.k[api] = self.k.get(api, 0) + 1

    def _move(self, to):
        """The counters as one process has them at one-process position `to`
        (None: nothing to move yet; n_glob: after the last parameter)."""
        if to is None or self.cur is None:
            return
        gap = to - self.glob[self.cur]
        if gap == 1:
            return
        for api, n in self.k.items():
            self.d._counts[api] = self.start[api] + gap * n

    def finish(self):
        """After the step: past the one process's remaining parameters."""
        self._move(self.n_glob)
        self._keep = None


def _expert_of(d):
    """{id(parameter): (container path, global expert index)} of the
    debugger's models' expert parameters, and {container path: (experts of
    one process, the container module)}."""
    out, boxes = {}, {}
    for m in d._models:
        for path, mod in m.named_modules():
            gpath = _dtensor.expert_path(d._experts, path)
            top = _dtensor.expert_top(d._experts, gpath)
            if not top:
                continue
            if top[0] not in boxes:
                box = m.get_submodule(top[0]) if hasattr(m, "get_submodule") else ()
                boxes[top[0]] = _dtensor.experts_total(d, top[0], box)
            for p in mod.parameters():
                out[id(p)] = top
    return out, boxes


def _positions(d, params):
    """{id(p): one-process position} of the step's parameters `params` (in
    the optimizer's order), and the one process's count; None when the
    layout is not the one this numbering knows (a container's parameters
    not contiguous, experts with unequal parameter counts)."""
    expert, totals = _expert_of(d)
    runs = {}               # container -> [first list index, last, experts held]
    for i, p in enumerate(params):
        t = expert.get(id(p))
        if t is not None:
            r = runs.setdefault(t[0], [i, i, []])
            r[1] = i
            if t[1] not in r[2]:
                r[2].append(t[1])
    per = {}                # container -> parameters of one expert
    for c, (a, b, held) in runs.items():
        n = b - a + 1
        if any(id(p) not in expert or expert[id(p)][0] != c for p in params[a:b + 1]) or \
                n % len(held) or held != sorted(held):
            return None, 0
        per[c] = n // len(held)
    glob = {}
    for i, p in enumerate(params):
        g = i
        for c, (a, b, held) in runs.items():
            if i > b:           # after the container: every expert not held here
                g += (totals[c] - len(held)) * per[c]
            elif i >= a:        # in it: the experts not held here before this one's
                e = expert[id(p)][1]
                g += sum(1 for x in range(e) if x not in held) * per[c]
        glob[id(p)] = g
    n = len(params) + sum((totals[c] - len(h)) * per[c] for c, (_, _, h) in runs.items())
    return glob, n


def begin(d, opt):
    """A StepNumbering for optimizer `opt`'s step under debugger `d`, or
    None when nothing is to be renumbered (no expert parameter, or every
    parameter where one process has it)."""
    params = [p for g in opt.param_groups for p in g["params"]]
    glob, n = _positions(d, params)
    if glob is None:
        if not getattr(d, "_ep_optim_warned", False):
            d._ep_optim_warned = True
            warnings.warn("nprobe: the optimizer's expert parameters are not contiguous in "
                          "expert order (or the experts' parameter counts differ): its calls "
                          "are numbered per rank, not as one process numbers them",
                          stacklevel=3)
        return None
    if all(glob[id(p)] == i for i, p in enumerate(params)) and n == len(params):
        return None
    owners, keep = {}, []
    for p in params:
        ts = [p, p.grad] + [v for v in opt.state.get(p, {}).values()
                            if isinstance(v, torch.Tensor)]
        for t in ts:
            if isinstance(t, torch.Tensor) and id(t) not in owners:
                owners[id(t)] = id(p)
                keep.append(t)
    return StepNumbering(d, glob, owners, n, keep)
