"""The monitor's ring of calls for PyTorch (TrainerMon's `anomaly_calls`,
docs/MONITOR.md "The ring of calls in the package"; a compiled model:
"The ring under torch.compile").

The package's capture (PrecisionDebugger's API wrappers and module hooks,
a tensor task) with its writer held back: each call's tensors (inputs,
parameters, outputs; the gradients of a backward call) are copied, detached,
on their own device, into a ring of the step's last K calls instead of
being written. On the run's first anomaly (TrainerMon's rules, online) the
ring is written as the tensor dump of the step, through the probe (the
same rows and HDF5 file as a PrecisionDebugger tensor dump: `nprobe
compare`, `replay` and `ls` read it), then the next N calls as they come
(into the next step's file when the step ends first), then the capture
stops for the rest of the run.

Memory: the K calls' tensors; a tensor that two kept calls share (one
call's output, the next one's input: the same Python tensor, unchanged)
is copied once.
"""
import collections
import json
import os
import weakref

import torch

from . import debugger as _dbg


class CallRing(_dbg.PrecisionDebugger):
    """A PrecisionDebugger (task tensor, level L1: the API calls, forward
    and backward) whose calls go into a ring of `before` until fire(),
    then `after` more are written, then it stops. `want(step)`: whether a
    step can raise an anomaly (the monitor records it); the others are not
    captured while the ring waits."""

    _use_env = False    # its own config, also under `nprobe dump` ($NPROBE_DUMP_CONFIG)

    def __init__(self, dump_path, before, after, step, want, level="L1", torch_compile="capture"):
        parent = os.path.dirname(dump_path)
        cfg = os.path.join(parent, f".anomaly_calls.{os.getpid()}.json")
        with open(cfg, "w") as f:
            json.dump({"task": "tensor", "dump_path": dump_path, "level": level, "rank": [],
                       "step": []}, f)
        latest = _dbg.PrecisionDebugger._latest
        try:
            super().__init__(cfg, torch_compile=torch_compile)
        finally:
            os.unlink(cfg)
            # PrecisionDebugger.step() and friends, called on the class, stay the user's
            _dbg.PrecisionDebugger._latest = latest
        self.dump_dir = dump_path
        self._ring = collections.deque(maxlen=before) if before > 0 else None
        self._after = after
        self._left = 0
        self._want = want
        self._memo = {}      # id(tensor) -> (its weak reference, its version, the copy's)
        self.state = "keep"  # keep -> after (fired) -> done
        self.info = None
        self._step = step

    # ---- the copies ---------------------------------------------------------
    def _copy(self, t):
        """A detached copy of t on its device (requires_grad as t's: the
        dump's row says it); t's copy already kept when t is unchanged."""
        if not isinstance(t, torch.Tensor):
            return t
        ver = _dbg._version(t)
        m = self._memo.get(id(t))
        if m is not None and ver >= 0 and m[0]() is t and m[1] == ver:
            c = m[2]()
            if c is not None:
                return c
        try:
            c = t.detach().clone()
            if t.requires_grad and (c.is_floating_point() or c.is_complex()):
                c.requires_grad_(True)
            self._memo[id(t)] = (weakref.ref(t), ver, weakref.ref(c))
        except Exception as e:  # noqa: BLE001 - the user's op must not fail for the ring
            self._skip("ring " + type(e).__name__,
                       f"a tensor could not be copied into the ring ({type(e).__name__}: {e})")
            return None
        return c

    @staticmethod
    def _bytes(kept):
        seen, n = set(), 0
        for e in kept:
            ts = list(e[3]) + [t for _, t in e[5]] + list(e[6]) + [x[2] for x in e[10]]
            for t in ts:
                if isinstance(t, torch.Tensor):
                    try:
                        s = t.untyped_storage()
                        k = (s.data_ptr(), t.device)
                        if k not in seen:
                            seen.add(k)
                            n += s.nbytes()
                    except Exception:  # noqa: BLE001 - a tensor without storage
                        pass
        return n

    # ---- the capture ----------------------------------------------------------
    def _open_step(self):
        super()._open_step()
        if self.state == "keep" and not self._want(self._step):
            self._sel = 0       # a step the monitor does not record: no anomaly, no ring

    def _emit(self, call, parent, site, ins, scalars, params, outs, in_keys=None,
              out_keys=None, bw=False):
        if (not bw and _dbg._tls.replay is not None) or self._foreign:
            return False
        if self.state == "keep":
            if self._ring is not None:
                cp = self._copy
                self._ring.append([call, parent, site, [cp(t) for t in ins], list(scalars),
                                   [(k, c) for k, c in ((k, cp(t)) for k, t in params)
                                    if c is not None],
                                   [cp(t) for t in outs], in_keys, out_keys, bw, []])
            return True
        if self.state == "after":
            if self._left <= 0:
                self.finish()
                return False
            self._left -= 1
            began = super()._emit(call, parent, site, ins, scalars, params, outs, in_keys,
                                  out_keys, bw)
            self.info["after"] += bool(began)
            return began
        return False

    def _safe_leaf(self, call, role, key, t, known=False):
        if self.state == "keep":
            # an in-place call's output, after its row (_inplace_call)
            for e in reversed(self._ring or ()):
                if e[0] == call:
                    c = self._copy(t)
                    if c is not None:
                        e[10].append((role, key, c, known))
                    break
            return
        if self.state == "after":
            super()._safe_leaf(call, role, key, t, known)

    def _flush_param_grads(self):
        # level mix (a compiled model): the parameters' gradients are rows
        # of the step's end, not calls; written only after the anomaly
        if self.state == "keep":
            self._pgrads = {}
            return
        super()._flush_param_grads()

    # ---- the anomaly ----------------------------------------------------------
    def fire(self):
        """The run's first anomaly: the kept calls are written as the step's
        dump, the next `after` calls follow. False when it fired before."""
        if self.state != "keep":
            return False
        kept = list(self._ring or ())
        self._ring = None
        self._memo = {}
        self.info = {"step": self._step, "before": 0, "after": 0, "bytes": self._bytes(kept),
                     "dir": self.dump_dir}
        self.state = "after"
        self._left = self._after
        self._sel = _dbg._lib.probe_selects(self._p, self._step)
        for call, parent, site, ins, scalars, params, outs, ik, ok, bw, extra in kept:
            if super()._emit(call, parent, site, ins, scalars, params, outs, ik, ok, bw):
                self.info["before"] += 1
                for role, key, t, known in extra:
                    super()._safe_leaf(call, role, key, t, known)
        if self._left <= 0:
            self.finish()
        return True

    def step(self):
        """The step's end (TrainerMon's optimizer post-hook)."""
        if self.state == "done":
            return
        if self.state == "keep" and self._ring is not None:
            self._ring.clear()
            self._memo = {}
        super().step()
        if self.state == "after" and self._left <= 0:
            self.finish()

    def _at_exit(self):
        # the kept calls are whole: their step is completed, not left partial
        self.finish()

    def finish(self):
        """Stop capturing; the dump's step in progress is completed (and a
        compiled model runs compiled again: torch_compile "eager")."""
        if self.state == "done" or self._closed:
            return
        after = self.state == "after"
        self.state = "done"
        self.stop()
        if after:
            super().step()
        self.close()
