"""scripts/bench/torch_profile_instr.py - the package's profile task cost in
instructions: the HF Llama 4x256 of torch_profile_cost.py (sequence 128,
batch 8, AdamW, one thread) in one process under callgrind, which counts
only the measured phases (instrumentation off until the first, so Python's
and torch's start are not counted; the counts are zeroed before and dumped
after each phase through callgrind's client requests, from a small helper
library built from <valgrind/callgrind.h>):

  plain    STEPS training steps, no profiler
  profile  STEPS steps under the package's profile task (PrecisionDebugger
           with "task": "profile": torch.profiler + the module ranges,
           every step recorded) and its close, which writes the trace
  plain    again: the run-to-run difference of the plain steps

Instruction counts do not move with the machine's load (2 cores shared by
many here), unlike wall or CPU time. Valgrind runs the threads one at a
time and hides AVX-512, so the kernels are the AVX2 ones; the ratio is of
that build's instructions, not of time.

usage: scripts/bench/torch_profile_instr.py [--steps N] [--python PY]
       (PYTHONPATH=python and NPROBE_LIB=build/release/lib/libnprobe.so as
       for the other package benches; needs valgrind and its headers)
"""
import argparse
import glob
import json
import os
import re
import subprocess
import sys
import tempfile

HELPER = r"""
#include <valgrind/callgrind.h>
void cg_start(void) { CALLGRIND_START_INSTRUMENTATION; }
void cg_zero(void) { CALLGRIND_ZERO_STATS; }
void cg_dump(const char *s) { CALLGRIND_DUMP_STATS_AT(s); }
"""


def child(steps, out, helper):
    import ctypes
    import torch
    cg = ctypes.CDLL(helper)
    torch.set_num_threads(1)
    from transformers import LlamaConfig, LlamaForCausalLM
    cfg = LlamaConfig(hidden_size=256, intermediate_size=688, num_hidden_layers=4,
                      num_attention_heads=4, num_key_value_heads=4, vocab_size=512,
                      max_position_embeddings=128)
    torch.manual_seed(0)
    model = LlamaForCausalLM(cfg)
    opt = torch.optim.AdamW(model.parameters(), lr=1e-3)
    idx = torch.randint(0, 512, (8, 128), generator=torch.Generator().manual_seed(1))

    def step():
        opt.zero_grad(set_to_none=True)
        model(input_ids=idx, labels=idx).loss.backward()
        opt.step()
    from nprobe.torch import PrecisionDebugger
    path = os.path.join(out, "c.json")
    with open(path, "w") as f:
        json.dump({"task": "profile", "dump_path": os.path.join(out, "prof")}, f)
    step()  # lazy initialisation, not counted
    cg.cg_start()
    for phase in ("plain", "profile", "plain"):
        cg.cg_zero()
        if phase == "plain":
            for _ in range(steps):
                step()
        else:
            d = PrecisionDebugger(config_path=path)
            for _ in range(steps):
                d.start(model)
                step()
                d.stop()
                d.step()
            d.close()
        cg.cg_dump(phase.encode())


def main():
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--steps", type=int, default=2)
    ap.add_argument("--python", default=sys.executable)
    ap.add_argument("--child", nargs=2, help=argparse.SUPPRESS)
    a = ap.parse_args()
    if a.child:
        return child(a.steps, *a.child)
    with tempfile.TemporaryDirectory() as tmp:
        helper = os.path.join(tmp, "cg.so")
        with open(os.path.join(tmp, "cg.c"), "w") as f:
            f.write(HELPER)
        subprocess.run(["cc", "-shared", "-fPIC", "-O1", "-o", helper, os.path.join(tmp, "cg.c")], check=True)
        env = dict(os.environ, OMP_NUM_THREADS="1")
        subprocess.run(["valgrind", "--tool=callgrind", "--instr-atstart=no",
                        "--callgrind-out-file=" + os.path.join(tmp, "cg.%p"), a.python, __file__,
                        "--steps", str(a.steps), "--child", tmp, helper], check=True, env=env,
                       stderr=subprocess.DEVNULL)
        ir = []
        for p in sorted(glob.glob(os.path.join(tmp, "cg.*.*")), key=lambda p: int(p.rsplit(".", 1)[1])):
            text = open(p).read()
            m = re.search(r"^desc: Trigger: Client Request: (\S+)", text, re.M)
            t = re.search(r"^(?:summary|totals): (\d+)", text, re.M)
            if m and t:
                ir.append((m.group(1), int(t.group(1))))
    for name, n in ir:
        print(f"{name:8} {n / 1e9:10.4f} G instructions ({a.steps} steps)")
    plain = [n for name, n in ir if name == "plain"]
    prof = [n for name, n in ir if name == "profile"]
    if plain and prof:
        print(f"profile / plain: x{prof[0] / plain[0]:.4f} (first plain), x{prof[0] / plain[-1]:.4f} "
              f"(last plain); plain run to run x{plain[-1] / plain[0]:.4f}")


if __name__ == "__main__":
    main()
