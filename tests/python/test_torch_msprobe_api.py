"""test_torch_msprobe_api.py - msprobe's interface as nprobe.torch takes it
(a script written for msprobe runs with its import line changed):

- PrecisionDebugger(config_path, task=, dump_path=, level=, step=) overrides
  the config's keys: the dump lands in dump_path (not the config's), at the
  level asked (L0: module rows only; read back with h5py), only the steps
  asked;
- start/stop/step called on the class act on the latest debugger;
  set_init_step(n) numbers the step in progress n (its file is stepN);
- save() warns and writes nothing; seed_all makes torch's and Python's
  generators repeat; start(token_range=..., rank_id=...) is accepted.
The cases run without msprobe (python.msprobe_live runs them against it)."""
import json
import os
import random
import sys
import tempfile
import warnings

import h5py
import torch

from nprobe.torch import PrecisionDebugger, seed_all

FAILS = []


def check(cond, what):
    if not cond:
        FAILS.append(what)
        print("FAIL:", what)


def calls(path):
    with h5py.File(path, "r") as f:
        return [c.decode() if isinstance(c, bytes) else str(c) for c in f["entries"]["call"]]


def main():
    with tempfile.TemporaryDirectory(prefix="np_msp_api_") as tmp:
        cfg = os.path.join(tmp, "config.json")
        with open(cfg, "w") as f:
            json.dump({"task": "statistics", "dump_path": os.path.join(tmp, "from_config"),
                       "rank": [], "step": [], "level": "L1"}, f)
        out = os.path.join(tmp, "over")
        dbg = PrecisionDebugger(config_path=cfg, dump_path=out, level="L0", step=[1, 5])
        model = torch.nn.Sequential(torch.nn.Linear(3, 4), torch.nn.ReLU(), torch.nn.Linear(4, 2))
        with warnings.catch_warnings(record=True) as w:
            warnings.simplefilter("always")
            for i in range(3):
                if i == 2:
                    PrecisionDebugger.set_init_step(5)
                PrecisionDebugger.start(model=model, token_range=None, rank_id=None)
                model(torch.ones(2, 3)).sum().backward()
                PrecisionDebugger.save(torch.ones(1), "x")
                PrecisionDebugger.stop()
                PrecisionDebugger.step()
            dbg.close()
        check(sum("save is not supported" in str(x.message) for x in w) == 1,
              "save: want one warning, got %s" % [str(x.message) for x in w])
        check(not os.path.exists(os.path.join(tmp, "from_config")),
              "dump_path=: the config's dump_path was written")
        got = sorted(os.listdir(out)) if os.path.isdir(out) else []
        check(got == ["step1", "step5"], "steps [1, 5] with set_init_step(5): got %s" % got)
        for s in got:
            c = calls(os.path.join(out, s, "rank0", "dump.h5"))
            check(c and all(x.startswith("Module.") for x in c),
                  "level L0 (override of L1): %s has non-module rows %s" % (s, c[:3]))
        try:
            PrecisionDebugger(config_path=cfg, task="no_such_task")
            check(False, "task='no_such_task' accepted")
        except Exception as e:  # noqa: BLE001
            check("task" in str(e), "a bad task override: %s" % e)
        seed_all(7)
        a = (torch.rand(3).tolist(), random.random())
        seed_all(7)
        b = (torch.rand(3).tolist(), random.random())
        check(a == b, "seed_all: %s != %s" % (a, b))
    print("%d failed" % len(FAILS))
    return 1 if FAILS else 0


if __name__ == "__main__":
    sys.exit(main())
