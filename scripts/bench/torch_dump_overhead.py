"""scripts/bench/torch_dump_overhead.py - the cost of nprobe.torch's
PrecisionDebugger on a PyTorch training step: the same script (the GPT of
torch_gpt.py, AdamW, clipping) without the debugger and with it (every step
dumped at L1, every API call), statistics and md5, each mode a process of
its own, modes interleaved round by round; prints the median step time of
each mode and the ratios to the plain script.

usage: torch_dump_overhead.py [--model big|tiny] [--rounds R] [--steps N] [--out DIR]
  big:  4 layers x 256 wide, context 128, batch 8 (the issue's GPT 4x256)
  tiny: 2 layers x 32 wide, context 16, batch 4
One thread (torch.set_num_threads(1)). The package must be importable
(PYTHONPATH=python NPROBE_LIB=build/release/lib/libnprobe.so).
"""
import argparse
import json
import os
import statistics
import subprocess
import sys
import tempfile
import time

SIZES = {"big": dict(layers=4, heads=4, width=256, context=128, batch=8, vocab=512),
         "tiny": dict(layers=2, heads=2, width=32, context=16, batch=4, vocab=64)}
MODES = ("plain", "statistics", "md5")


def child(a):
    import torch
    sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
    from torch_gpt import GPT
    s = SIZES[a.model]
    torch.set_num_threads(1)
    torch.manual_seed(0)
    model = GPT(s["layers"], s["heads"], s["width"], s["context"], s["vocab"])
    opt = torch.optim.AdamW(model.parameters(), lr=3e-3, betas=(0.9, 0.95), weight_decay=0.01)
    d = None
    if a.mode != "plain":
        from nprobe.torch import PrecisionDebugger
        cfg = os.path.join(a.out, f"{a.mode}.json")
        with open(cfg, "w") as f:
            json.dump({"task": a.mode, "dump_path": os.path.join(a.out, "dump_" + a.mode),
                       "level": "L1"}, f)
        d = PrecisionDebugger(config_path=cfg)
    times, cpu = [], []
    for step in range(a.warmup + a.steps):
        idx = torch.randint(0, s["vocab"], (s["batch"], s["context"]))
        tgt = torch.randint(0, s["vocab"], (s["batch"], s["context"]))
        t0, c0 = time.perf_counter(), time.process_time()
        if d:
            d.start(model)
        opt.zero_grad(set_to_none=True)
        loss = model(idx, tgt)
        loss.backward()
        torch.nn.utils.clip_grad_norm_(model.parameters(), 1.0)
        opt.step()
        if d:
            d.stop()
            d.step()
        if step >= a.warmup:
            times.append((time.perf_counter() - t0) * 1000.0)
            cpu.append((time.process_time() - c0) * 1000.0)
    if d:
        d.close()
    print(f"median_ms {statistics.median(times):.4f} {statistics.median(cpu):.4f}")


def main():
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--model", choices=sorted(SIZES), default="big")
    ap.add_argument("--rounds", type=int, default=5)
    ap.add_argument("--steps", type=int, default=10)
    ap.add_argument("--warmup", type=int, default=2)
    ap.add_argument("--markdown", action="store_true", help="print table rows for bench_torch.sh")
    ap.add_argument("--mode", choices=MODES, help=argparse.SUPPRESS)
    ap.add_argument("--out", help=argparse.SUPPRESS)
    a = ap.parse_args()
    if a.mode:
        return child(a)
    env = dict(os.environ, OMP_NUM_THREADS="1")
    res = {m: [] for m in MODES}
    cpu = {m: [] for m in MODES}
    with tempfile.TemporaryDirectory() as out:
        for r in range(a.rounds):
            for m in MODES:
                p = subprocess.run([sys.executable, __file__, "--model", a.model, "--mode", m,
                                    "--steps", str(a.steps), "--warmup", str(a.warmup),
                                    "--out", out], env=env, capture_output=True, text=True)
                if p.returncode:
                    sys.exit(f"torch_dump_overhead.py: {m} failed: {p.stderr[-2000:]}")
                w, c = p.stdout.split()[-2:]
                res[m].append(float(w))
                cpu[m].append(float(c))
    base, cbase = statistics.median(res["plain"]), statistics.median(cpu["plain"])
    if a.markdown:
        targets = {("big", "statistics"): 1.3, ("big", "md5"): 1.5,
                   ("tiny", "statistics"): 57 / 8, ("tiny", "md5"): 117 / 8}
        label = "GPT 4x256" if a.model == "big" else "tiny GPT 2x32"
        for m in MODES[1:]:
            t = targets[(a.model, m)]
            for kind, v, b in (("cpu", cpu[m], cbase), ("wall", res[m], base)):
                r = statistics.median(v) / b
                met = ("yes" if r <= t else "no") if kind == "cpu" else "-"
                print(f"| {label}, {m} L1, {kind} time per step | {statistics.median(v):.1f} ms "
                      f"| {b:.1f} ms | x{r:.2f} | <= x{t:.3g} | {met} |")
        return
    print(f"model {a.model} ({SIZES[a.model]}), {a.rounds} interleaved rounds of "
          f"{a.steps} steps, one thread; medians of the per-round medians")
    for m in MODES:
        med, cmed = statistics.median(res[m]), statistics.median(cpu[m])
        print(f"  {m:<11} wall {med:9.2f} ms  x{med / base:.2f}   cpu {cmed:9.2f} ms  "
              f"x{cmed / cbase:.2f}")


if __name__ == "__main__":
    main()
