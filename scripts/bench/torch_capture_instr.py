#!/usr/bin/env python3
"""The capture's cost in instructions: a dumped HF Llama step under callgrind.

Runs HF Llama (4 layers, as torch_dump_overhead.py's `llama`, but narrow:
width 32, MLP 64, sequence 16, batch 2, vocabulary 64, so that the same
838 calls and 2751 tensors a step cost almost nothing in torch and in the
statistics kernels, and what is left is the capture's per-call work) under
valgrind's callgrind, one warm-up step, then --steps steps with callgrind
collecting only around them (a client request from a helper built here
with cc against valgrind's callgrind.h). Prints instructions per step for
each task (plain: no debugger), and the capture's instructions per step
(task - plain). Instruction counts do not depend on the machine's load,
so a change to the package is measured by two runs, each with its own
PYTHONPATH (--pythonpath A,B: one line per tree, same library):

    NPROBE_LIB=build/release/lib/libnprobe.so \\
      scripts/bench/torch_capture_instr.py --pythonpath BASE/python,python --steps 2

About 2 minutes a run at load ~20 (valgrind, torch's import uninstrumented).
"""
import argparse
import ctypes
import json
import os
import re
import shutil
import subprocess
import sys
import tempfile

HELPER = r"""
#include <valgrind/callgrind.h>
void np_cg_on(void) { CALLGRIND_START_INSTRUMENTATION; CALLGRIND_TOGGLE_COLLECT; }
void np_cg_off(void) { CALLGRIND_TOGGLE_COLLECT; CALLGRIND_STOP_INSTRUMENTATION; }
"""


def child(a):
    import torch
    from transformers import LlamaConfig, LlamaForCausalLM
    cg = ctypes.CDLL(a.helper)
    torch.set_num_threads(1)
    torch.manual_seed(0)
    cfg = LlamaConfig(hidden_size=32, intermediate_size=64, num_hidden_layers=4,
                      num_attention_heads=4, num_key_value_heads=4, vocab_size=64,
                      max_position_embeddings=16)
    model = LlamaForCausalLM(cfg)
    opt = torch.optim.AdamW(model.parameters(), lr=3e-3, betas=(0.9, 0.95), weight_decay=0.01)
    d = None
    if a.task != "plain":
        from nprobe.torch import PrecisionDebugger
        path = os.path.join(a.out, "config.json")
        with open(path, "w") as f:
            json.dump({"task": a.task, "dump_path": os.path.join(a.out, "dump"),
                       "level": "L1"}, f)
        d = PrecisionDebugger(config_path=path)

    def step():
        idx = torch.randint(0, 64, (2, 16))
        tgt = torch.randint(0, 64, (2, 16))
        if d:
            d.start(model)
        opt.zero_grad(set_to_none=True)
        model(input_ids=idx, labels=tgt).loss.backward()
        torch.nn.utils.clip_grad_norm_(model.parameters(), 1.0)
        opt.step()
        if d:
            d.stop()
            d.step()
    step()
    cg.np_cg_on()
    for _ in range(a.steps):
        step()
    cg.np_cg_off()
    if d:
        d.close()
        s = d.summary
        n = max(1, s["steps"])
        print(f"calls {s['calls'] // n} tensors {s['tensors'] // n}")


def run(a, pythonpath, task, helper, tmp):
    out = os.path.join(tmp, f"cg.{task}.{abs(hash(pythonpath))}")
    os.makedirs(out, exist_ok=True)
    env = dict(os.environ, PYTHONPATH=pythonpath, OMP_NUM_THREADS="1")
    cmd = ["valgrind", "--tool=callgrind", "--instr-atstart=no", "--collect-atstart=no",
           f"--callgrind-out-file={out}/cg.out", sys.executable, os.path.abspath(__file__),
           "--child", "--task", task, "--steps", str(a.steps), "--helper", helper, "--out", out]
    r = subprocess.run(cmd, env=env, capture_output=True, text=True)
    if r.returncode:
        sys.exit(f"torch_capture_instr: {task} under {pythonpath} failed:\n{r.stderr[-3000:]}")
    with open(f"{out}/cg.out") as f:
        text = f.read()
    if a.keep:
        shutil.copy(f"{out}/cg.out", os.path.join(a.keep, f"callgrind.{task}.out"))
    m = re.search(r"^totals: (\d+)", text, re.M) or re.search(r"^summary: (\d+)", text, re.M)
    extra = " ".join(ln for ln in r.stdout.splitlines() if ln.startswith("calls"))
    return int(m.group(1)) / a.steps, extra


def main():
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--steps", type=int, default=2)
    ap.add_argument("--tasks", default="plain,statistics")
    ap.add_argument("--pythonpath", default="python",
                    help="comma-separated package trees (PYTHONPATH), one run each")
    ap.add_argument("--keep", help="copy each run's callgrind output into this folder")
    ap.add_argument("--child", action="store_true", help=argparse.SUPPRESS)
    ap.add_argument("--task", help=argparse.SUPPRESS)
    ap.add_argument("--helper", help=argparse.SUPPRESS)
    ap.add_argument("--out", help=argparse.SUPPRESS)
    a = ap.parse_args()
    if a.child:
        return child(a)
    if not shutil.which("valgrind"):
        sys.exit("torch_capture_instr: valgrind is not installed")
    tmp = tempfile.mkdtemp(prefix="nprobe_capture_instr_")
    try:
        helper = os.path.join(tmp, "np_cg.so")
        with open(os.path.join(tmp, "np_cg.c"), "w") as f:
            f.write(HELPER)
        subprocess.run(["cc", "-O2", "-shared", "-fPIC", "-o", helper,
                        os.path.join(tmp, "np_cg.c")], check=True)
        tasks = a.tasks.split(",")
        for pp in a.pythonpath.split(","):
            ir = {}
            for t in tasks:
                ir[t], extra = run(a, os.path.abspath(pp), t, helper, tmp)
                print(f"{pp}: {t}: {ir[t]:,.0f} instructions per step {extra}", flush=True)
            for t in tasks:
                if t != "plain" and "plain" in ir:
                    print(f"{pp}: {t} - plain: {ir[t] - ir['plain']:,.0f} instructions per step "
                          f"(x{ir[t] / ir['plain']:.4f})", flush=True)
    finally:
        shutil.rmtree(tmp, ignore_errors=True)


if __name__ == "__main__":
    main()
