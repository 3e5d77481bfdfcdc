"""tests/python/msprobe_train.py - a training script written for msprobe, as
its documentation writes one (config.json; PrecisionDebugger(config_path=...,
dump_path=...); start(model=...), stop(), step() around each training step),
on HF transformers models (hf_models.py). test_msprobe_live.py runs it as it
is with msprobe and, with its import lines changed to nprobe's, with nprobe:
nothing else in it may differ.

    msprobe_train.py JOB...    JOB = CONFIG,MODEL,PRECISION,STEPS,DUMP_PATH

Each job trains a fresh model (seed 0, batch seed 1) for STEPS AdamW steps in
fp32 or under CPU bf16 autocast, dumped to DUMP_PATH with CONFIG.
"""
import os
import sys

import torch

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
import hf_models  # noqa: E402

from msprobe.pytorch import PrecisionDebugger, seed_all  # noqa: E402


def job(spec):
    config, name, precision, steps, dump_path = spec.split(",")
    # msprobe's PrecisionDebugger is one per process: a new config needs a
    # new one (this line does nothing under nprobe, which makes one per call)
    PrecisionDebugger._instance = None
    debugger = PrecisionDebugger(config_path=config, dump_path=dump_path)
    seed_all(1234)
    model = hf_models.build(name, seed=0)
    batch = hf_models.batch(name, seed=1)
    optimizer = torch.optim.AdamW(model.parameters(), lr=1e-3)
    for _ in range(int(steps)):
        debugger.start(model=model)
        optimizer.zero_grad()
        if precision == "bf16":
            with torch.autocast("cpu", dtype=torch.bfloat16):
                loss = model(**batch).loss
        else:
            loss = model(**batch).loss
        loss.backward()
        optimizer.step()
        debugger.stop()
        PrecisionDebugger.step()   # msprobe's classmethod form
        print("%s %s %s loss %.6f" % (name, precision, dump_path, loss.item()), flush=True)


if __name__ == "__main__":
    for spec in sys.argv[1:]:
        job(spec)
