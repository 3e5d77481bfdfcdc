"""scripts/bench/torch_monitor_cc_cost.py - the cost of TrainerMon's
cc_distribution (the collectives' records, docs/MONITOR.md "PyTorch") on a
2-rank gloo run (docs/PERFORMANCE.md "Monitor").

Two forked gloo ranks, one thread each, train an MLP (LAYERS Linear layers
of WIDTH, batch 64, SGD) with data parallel by hand: each parameter's
gradient all-reduced (torch.distributed.all_reduce, one call a parameter)
and averaged, then the step. Configurations, interleaved within each
round (a fresh model, optimizer and monitor each, the monitor stopped
after):

  off   TrainerMon with gradients and weights (wg_distribution,
        param_distribution), cc_distribution off
  cc    the same with cc_distribution on (comm_in and comm_out of every
        all-reduce: 2 x 2 x LAYERS records more a step)

Each runs WARM + STEPS steps; rank 0 prints the median wall time per step
over the last STEPS, the process CPU time per step (gloo's threads
included) and, under cc, the observer's own thread CPU a step (its
before/after calls: statistics and records), per configuration and
round, and the medians over rounds of cc / off.

Then the wrappers' per-call cost, all_reduce of one float32 element
(median of CALLS calls each, interleaved in blocks): torch's own function
(`_nprobe_orig`), nprobe's wrapper with no observer (the fast path: what
every collective pays once nprobe.torch.distributed is installed), with
the cc monitor on a step it does not record (the observer is in the
wrappers' list on recorded steps only), and on one it records.

usage: PYTHONPATH=python NPROBE_LIB=build/release/lib/libnprobe.so \\
       python scripts/bench/torch_monitor_cc_cost.py [--rounds 5] [--steps 20] [--warm 3]
           [--layers 8] [--width 512] [--calls 2000]
       python scripts/bench/torch_monitor_cc_cost.py --wrapper [--calls 2000]
           (the fast path alone: wrapper_cost)
"""
import argparse
import json
import os
import statistics
import sys
import tempfile
import time


def train(cfg, a, rank, tmp, tag):
    import torch
    import torch.distributed as dist
    from nprobe.torch import TrainerMon
    torch.manual_seed(0)
    layers = [torch.nn.Linear(a.width, a.width) for _ in range(a.layers)]
    m = torch.nn.Sequential(*[x for lay in layers for x in (lay, torch.nn.ReLU())])
    opt = torch.optim.SGD(m.parameters(), lr=1e-3)
    path = f"{tmp}/{tag}.json"
    if rank == 0:
        sec = {"xy_distribution": False, "mv_distribution": False}
        if cfg == "cc":
            sec["cc_distribution"] = {"enable": True}
        with open(path + ".tmp", "w") as f:
            json.dump({"task": "monitor", "dump_path": f"{tmp}/mon_{tag}", "monitor": sec}, f)
        os.replace(path + ".tmp", path)
    dist.barrier()
    mon = TrainerMon(path)
    mon.set_monitor(m, opt)
    spent = []
    if mon._cc is not None:
        # the observer's own CPU (its before and after: the statistics and records)
        cc = mon._cc
        before = cc.before

        def timed_before(dname, ins):
            t0 = time.thread_time()
            after = before(dname, ins)
            spent.append(time.thread_time() - t0)
            if after is None:
                return None

            def timed_after(outs):
                t1 = time.thread_time()
                after(outs)
                spent.append(time.thread_time() - t1)
            return timed_after
        cc.before = timed_before
    x = torch.randn(64, a.width, generator=torch.Generator().manual_seed(rank))
    walls = []
    c0 = 0.0
    for s in range(a.warm + a.steps):
        if s == a.warm:
            c0 = time.process_time()
            spent.clear()
        t0 = time.perf_counter()
        m(x).square().mean().backward()
        for p in m.parameters():
            dist.all_reduce(p.grad)
            p.grad /= 2
        opt.step()
        opt.zero_grad()
        walls.append(time.perf_counter() - t0)
    cpu = (time.process_time() - c0) / a.steps
    mon.stop()
    dist.barrier()
    return statistics.median(walls[a.warm:]), cpu, sum(spent) / a.steps


def per_call(a, rank, tmp):
    """The wrappers' cost per all_reduce call (us)."""
    import torch
    import torch.distributed as dist
    from nprobe.torch import TrainerMon
    from nprobe.torch import distributed as D
    D.install()
    orig = dist.all_reduce._nprobe_orig
    wrapped = dist.all_reduce
    t = torch.ones(1)
    res = {k: [] for k in ("torch", "wrapper", "cc_unrecorded", "cc_recorded")}
    if rank == 0:
        for i in range(3):
            for k in res:
                with open(f"{tmp}/calls_{k}{i}.json", "w") as f:
                    json.dump({"task": "monitor", "dump_path": f"{tmp}/mon_calls_{k}{i}",
                               "monitor": {"xy_distribution": False,
                                           "cc_distribution": {"enable": True}}}, f)
    dist.barrier()
    m = torch.nn.Linear(2, 2)
    opt = torch.optim.SGD(m.parameters(), lr=0.1)
    for i in range(3):
        for k in res:
            mon = None
            if k.startswith("cc"):
                mon = TrainerMon(f"{tmp}/calls_{k}{i}.json")
                if k == "cc_unrecorded":
                    mon.config["start_step"] = 1 << 40     # no step recorded
                mon.set_monitor(m, opt)
            fn = orig if k == "torch" else wrapped
            dist.barrier()
            ts = []
            for _ in range(a.calls):
                t0 = time.perf_counter()
                fn(t)
                ts.append(time.perf_counter() - t0)
            res[k].append(statistics.median(ts) * 1e6)
            if mon is not None:
                mon._rec = []          # the records of no step: not written
                mon.stop()
    return {k: statistics.median(v) for k, v in res.items()}


def rank_main(rank, a, tmp):
    import torch
    import torch.distributed as dist
    torch.set_num_threads(1)
    dist.init_process_group("gloo", init_method=f"file://{tmp}/store", rank=rank, world_size=2)
    rows = []
    for r in range(a.rounds):
        row = {}
        for cfg in ("off", "cc") if r % 2 == 0 else ("cc", "off"):
            row[cfg] = train(cfg, a, rank, tmp, f"{cfg}{r}")
        rows.append(row)
    calls = per_call(a, rank, tmp)
    if rank == 0:
        with open(f"{tmp}/result.json", "w") as f:
            json.dump({"rows": rows, "calls": calls}, f)
    dist.destroy_process_group()


def wrapper_cost(calls, rounds=7):
    """The c10d wrapper's fast path alone (no debugger, no observer: what
    every collective pays once nprobe.torch.distributed is installed), ns a
    call over the function it wraps: a do-nothing function with
    all_reduce's signature, wrapped as install() wraps torch's; medians of
    interleaved rounds of `calls` calls. Runs under any nprobe tree on
    PYTHONPATH (main's, to compare the fast path before and after)."""
    import torch
    from nprobe.torch import distributed as D

    def dummy(tensor, op=None, group=None, async_op=False):
        return None
    w = D._c10d_wrapper("all_reduce", D._C10D["all_reduce"], dummy)
    t = torch.ones(1)
    res = {"plain": [], "wrapper": []}
    for _ in range(rounds):
        for k, fn in (("plain", dummy), ("wrapper", w)):
            t0 = time.perf_counter_ns()
            for _ in range(calls):
                fn(t)
            res[k].append((time.perf_counter_ns() - t0) / calls)
    p, q = statistics.median(res["plain"]), statistics.median(res["wrapper"])
    print(f"c10d wrapper fast path: {q - p:.0f} ns a call over the wrapped function "
          f"({p:.0f} -> {q:.0f} ns; median of {rounds} rounds of {calls} calls)")


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--wrapper", action="store_true",
                    help="only the wrapper's fast path (wrapper_cost), one process")
    ap.add_argument("--rounds", type=int, default=5)
    ap.add_argument("--steps", type=int, default=20)
    ap.add_argument("--warm", type=int, default=3)
    ap.add_argument("--layers", type=int, default=8)
    ap.add_argument("--width", type=int, default=512)
    ap.add_argument("--calls", type=int, default=2000)
    a = ap.parse_args()
    if a.wrapper:
        wrapper_cost(a.calls * 100)
        return 0
    import torch.multiprocessing as mp
    with tempfile.TemporaryDirectory() as tmp:
        import nprobe.torch  # noqa: F401 - imported once, before the fork
        mp.start_processes(rank_main, args=(a, tmp), nprocs=2, join=True, start_method="fork")
        with open(f"{tmp}/result.json") as f:
            res = json.load(f)
    print(f"MLP {a.layers} x {a.width}, batch 64, 2 gloo ranks, {a.layers * 2} all-reduces a "
          f"step; {a.rounds} rounds of {a.warm} + {a.steps} steps")
    print("| round | off wall ms | cc wall ms | off cpu ms | cc cpu ms | cc observer ms |")
    print("|---|---|---|---|---|---|")
    for i, row in enumerate(res["rows"]):
        print(f"| {i} | {row['off'][0] * 1e3:.2f} | {row['cc'][0] * 1e3:.2f} | "
              f"{row['off'][1] * 1e3:.2f} | {row['cc'][1] * 1e3:.2f} | "
              f"{row['cc'][2] * 1e3:.2f} |")
    w = statistics.median(r["cc"][0] / r["off"][0] for r in res["rows"])
    c = statistics.median(r["cc"][1] / r["off"][1] for r in res["rows"])
    o = statistics.median(r["cc"][2] / r["off"][1] for r in res["rows"])
    print(f"cc / off: wall x{w:.3f}, cpu x{c:.3f}; the observer's thread CPU {o * 100:.1f} % "
          "of off's process CPU a step (medians of the rounds' ratios)")
    print("all_reduce of one element, us a call (median): " +
          ", ".join(f"{k} {v:.2f}" for k, v in res["calls"].items()))
    return 0


if __name__ == "__main__":
    sys.exit(main())
