"""scripts/bench/torch_dtensor_overhead.py - the cost of nprobe.torch's
PrecisionDebugger on a DTensor-parallel training step (issue 26): a stack
of pre-norm MLP blocks (x + down(gelu(up(norm(x))))) parallelised with
tensor parallel (ColwiseParallel up, RowwiseParallel down) on gloo CPU
ranks, or FSDP2 x TP on a (dp, tp) mesh of 4, trained with SGD with and
without the debugger (task statistics, level L1, every step dumped, every
API call, the collectives as Distributed.* calls). Each mode is one group of
forked ranks of its own, the modes interleaved round by round; per round,
rank 0's median step time (wall clock, ranks in step by a barrier) and its
process's CPU time per step; the ratio is the median of the rounds' ratios.

usage: torch_dtensor_overhead.py [--layout tp|fsdp_tp] [--rounds R] [--steps N]
                                 [--warmup W] [--layers L] [--width D]
  tp:      2 ranks, mesh (tp=2)
  fsdp_tp: 4 ranks, mesh (dp=2, tp=2), fully_shard on dp over the TP plan
One thread per rank. The package must be importable (PYTHONPATH=python
NPROBE_LIB=build/release/lib/libnprobe.so). Prints a Markdown table.
"""
import argparse
import datetime
import json
import os
import statistics
import sys
import tempfile
import time

import torch
import torch.distributed as dist
import torch.distributed.fsdp  # noqa: F401 - imported before the ranks fork
import torch.distributed.tensor.parallel  # noqa: F401
import torch.multiprocessing as mp

import nprobe.torch  # noqa: F401


class Block(torch.nn.Module):
    def __init__(self, d):
        super().__init__()
        self.norm = torch.nn.LayerNorm(d)
        self.up = torch.nn.Linear(d, 4 * d)
        self.down = torch.nn.Linear(4 * d, d)

    def forward(self, x):
        return x + self.down(torch.nn.functional.gelu(self.up(self.norm(x))))


class Net(torch.nn.Module):
    def __init__(self, layers, d):
        super().__init__()
        self.blocks = torch.nn.ModuleList(Block(d) for _ in range(layers))

    def forward(self, x):
        for b in self.blocks:
            x = b(x)
        return x


def rank_main(rank, a, mode, tmp, world, rnd):
    torch.set_num_threads(1)
    dist.init_process_group("gloo", init_method=f"file://{tmp}/store_{mode}_{rnd}", rank=rank,
                            world_size=world, timeout=datetime.timedelta(seconds=600))
    from torch.distributed.device_mesh import init_device_mesh
    from torch.distributed.tensor.parallel import (ColwiseParallel, RowwiseParallel,
                                                   parallelize_module)
    torch.manual_seed(0)
    m = Net(a.layers, a.width)
    plan = {}
    for i in range(a.layers):
        plan[f"blocks.{i}.up"] = ColwiseParallel()
        plan[f"blocks.{i}.down"] = RowwiseParallel()
    if a.layout == "tp":
        mesh = init_device_mesh("cpu", (world,), mesh_dim_names=("tp",))
        parallelize_module(m, mesh, plan)
    else:
        from torch.distributed.fsdp import fully_shard
        mesh = init_device_mesh("cpu", (2, world // 2), mesh_dim_names=("dp", "tp"))
        parallelize_module(m, mesh["tp"], plan)
        for b in m.blocks:
            fully_shard(b, mesh=mesh["dp"])
        fully_shard(m, mesh=mesh["dp"])
    opt = torch.optim.SGD(m.parameters(), lr=1e-3)
    g = torch.Generator().manual_seed(1)
    x = torch.randn(a.batch, a.seq, a.width, generator=g)
    d = None
    if mode == "statistics":
        from nprobe.torch import PrecisionDebugger
        cfg = os.path.join(tmp, "stats.json")
        d = PrecisionDebugger(cfg)
    times, cpu = [], []
    for s in range(a.warmup + a.steps):
        dist.barrier()
        t0, c0 = time.perf_counter(), time.process_time()
        if d is not None:
            d.start(m)
        m(x).pow(2).mean().backward()
        opt.step()
        opt.zero_grad()
        if d is not None:
            d.stop()
            d.step()
        dist.barrier()
        if s >= a.warmup:
            times.append(time.perf_counter() - t0)
            cpu.append(time.process_time() - c0)
    if d is not None:
        d.close()
    if rank == 0:
        with open(os.path.join(tmp, f"res_{mode}.json"), "w") as f:
            json.dump({"wall": statistics.median(times), "cpu": statistics.median(cpu)}, f)
    dist.destroy_process_group()


def main():
    p = argparse.ArgumentParser()
    p.add_argument("--layout", choices=("tp", "fsdp_tp"), default="tp")
    p.add_argument("--rounds", type=int, default=3)
    p.add_argument("--steps", type=int, default=5)
    p.add_argument("--warmup", type=int, default=2)
    p.add_argument("--layers", type=int, default=4)
    p.add_argument("--width", type=int, default=256)
    p.add_argument("--batch", type=int, default=8)
    p.add_argument("--seq", type=int, default=128)
    a = p.parse_args()
    world = 2 if a.layout == "tp" else 4
    torch.set_num_threads(1)
    ratios_w, ratios_c, rows = [], [], {"plain": [], "statistics": []}
    with tempfile.TemporaryDirectory() as tmp:
        with open(os.path.join(tmp, "stats.json"), "w") as f:
            json.dump({"task": "statistics", "dump_path": os.path.join(tmp, "dump"),
                       "level": "L1", "step": [], "rank": []}, f)
        for r in range(a.rounds):
            res = {}
            for mode in ("plain", "statistics") if r % 2 == 0 else ("statistics", "plain"):
                mp.start_processes(rank_main, args=(a, mode, tmp, world, r), nprocs=world,
                                   join=True, start_method="fork")
                with open(os.path.join(tmp, f"res_{mode}.json")) as f:
                    res[mode] = json.load(f)
                rows[mode].append(res[mode])
            ratios_w.append(res["statistics"]["wall"] / res["plain"]["wall"])
            ratios_c.append(res["statistics"]["cpu"] / res["plain"]["cpu"])
            print(f"round {r}: plain {res['plain']['wall'] * 1e3:.1f} ms, statistics "
                  f"{res['statistics']['wall'] * 1e3:.1f} ms (x{ratios_w[-1]:.3f} wall, "
                  f"x{ratios_c[-1]:.3f} cpu)", file=sys.stderr)
    med = {k: statistics.median(x["wall"] for x in v) * 1e3 for k, v in rows.items()}
    medc = {k: statistics.median(x["cpu"] for x in v) * 1e3 for k, v in rows.items()}
    rw, rc = statistics.median(ratios_w), statistics.median(ratios_c)
    print("| work | statistics L1 ms/step (cpu) | plain ms/step (cpu) | ratio | cpu ratio "
          "| target | met? |")
    print("|---|---:|---:|---:|---:|---|---|")
    print(f"| {a.layout} on {world} gloo ranks, {a.layers} blocks x {a.width} (MLP "
          f"{4 * a.width}), batch {a.batch} x {a.seq}, wall time per step | "
          f"{med['statistics']:.1f} ({medc['statistics']:.1f}) | "
          f"{med['plain']:.1f} ({medc['plain']:.1f}) | x{rw:.3f} | x{rc:.3f} | <= x1.3 | "
          f"{'yes' if rw <= 1.3 else 'no'} (noisy) |")

if __name__ == "__main__":
    main()
