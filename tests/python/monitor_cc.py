"""monitor_cc.py - TrainerMon's collectives (cc_distribution) on the 4 gloo
ranks of test_torch_fsdp_tp.py: rank_part(rank, tmp, tp_mesh) in each rank,
check(tmp, world) in the parent (a list of failures).

- a NaN in rank 2's gradient before the gradients' all-reduce at step S (a
  random step): `nprobe monitor` of the run with cc_distribution names rank
  2's `Distributed.all_reduce.0.forward comm_in` at step S; without it the
  first anomaly is rank 0's gradient (the NaN arrived everywhere);
- on a clean step every comm_in/comm_out record equals torch's float64
  statistics of the tensors sent and received (worked out here): all_reduce,
  all_gather (a list of outputs: one record), an async all_reduce (comm_in
  only), and the functional all_reduce of a tensor-parallel Linear pair
  (parallelize_module on the tp line: the RowwiseParallel output's) against
  the tensors the PrecisionDebugger dumped of the same call and the module's
  output; a bf16 all_reduce under the debugger: the monitor's float() not
  in the dump; FSDP2's all-gather (the full parameters, padded) and
  reduce-scatter (the local gradient shards), and the monitor's grad_norm
  of FSDP2's DTensor gradients (their local shards: a DTensor's data
  pointer is 0, which crashed the statistics kernel before);
- with anomaly_calls, the ring fires online at that comm_in on rank 2 (at
  comm_out on the others) and its dump holds the all-reduce with the NaN;
- msprobe's config with all four keys loads; cc_log_only writes
  cc_stacks_rank{R}.json (this file's line in the all_reduce's stack) and no
  comm record; cc_codeline keeps only the calls whose stack matches.
"""
import json
import os
import random
import subprocess

import h5py
import numpy as np
import torch
import torch.distributed as dist

WORLD_NAN_RANK = 2
CC = {"enable": True, "cc_codeline": [], "cc_pre_hook": False, "cc_log_only": False}


def configs(tmp):
    """The runs' configs; the NaN's step S (random) in {tmp}/cc_step."""
    s = random.Random().randint(1, 3)
    with open(f"{tmp}/cc_step", "w") as f:
        f.write(str(s))
    runs = {"cc_nan": CC, "nocc_nan": None, "cc_tp": CC, "cc_ring": CC, "cc_fsdp": CC,
            "cc_log": dict(CC, cc_log_only=True, cc_pre_hook=True),
            "cc_line": dict(CC, cc_codeline=[r"monitor_cc\.py\[\d+\]   only_this"])}
    for name, cc in runs.items():
        sec = {"targets": ["fc"], "xy_distribution": False, "mv_distribution": False,
               "step_interval": 2 if name == "cc_line" else 1}
        if cc is not None:
            sec["cc_distribution"] = cc
        if name == "cc_ring":
            sec.update(anomaly_calls=4, anomaly_calls_after=2)
        with open(f"{tmp}/{name}.json", "w") as f:
            json.dump({"task": "monitor", "dump_path": f"{tmp}/mon_{name}", "monitor": sec}, f)
    with open(f"{tmp}/cc_tp_dump.json", "w") as f:
        json.dump({"task": "tensor", "dump_path": f"{tmp}/dump_cc_tp", "level": "mix",
                   "step": [0]}, f)
    return s


def stats64(ts):
    """torch float64 statistics of the tensors taken as one: numel, norm,
    min, max, mean, zeros, nans (all finite here)."""
    x = torch.cat([t.detach().reshape(-1).double() for t in ts])
    return [x.numel(), float(x.norm()), float(x.min()), float(x.max()), float(x.mean()),
            int((x == 0).sum()), int(x.isnan().sum())]


class Net(torch.nn.Module):
    def __init__(self):
        super().__init__()
        self.fc = torch.nn.Linear(8, 4)

    def forward(self, x):
        return self.fc(x)


def only_this(t):
    dist.all_reduce(t)          # the call cc_codeline selects (by this function's name)


def train(cfg, rank, nan_step, expect=None, steps=4, info=None):
    """4 SGD steps, the gradients averaged by all_reduce (no DDP); at
    nan_step rank 2's fc.weight gradient gets a NaN before it. With expect:
    step 0's collectives' float64 statistics (sent, received). Returns the
    number of the collectives' observers at each step's end."""
    from nprobe.torch import TrainerMon
    from nprobe.torch import distributed as D
    obs = []
    torch.manual_seed(0)
    m = Net()
    opt = torch.optim.SGD(m.parameters(), lr=0.1)
    mon = TrainerMon(cfg)
    mon.set_monitor(m, opt)
    for step in range(steps):
        g = torch.Generator().manual_seed(10 * step + rank)
        m(torch.randn(6, 8, generator=g)).square().mean().backward()
        if step == nan_step and rank == WORLD_NAN_RANK:
            m.fc.weight.grad[1, 2] = float("nan")
        for j, p in enumerate(m.parameters()):
            sent = stats64([p.grad])
            dist.all_reduce(p.grad)
            if expect is not None and step == 0:
                expect[f"all_reduce.{j}"] = [sent, stats64([p.grad])]
            p.grad /= dist.get_world_size()
        if step == 0:
            # several outputs (one record), an asynchronous call (comm_in only),
            # a call cc_codeline selects
            t = torch.arange(3.0) * (rank + 1) - 2
            outs = [torch.empty(3) for _ in range(dist.get_world_size())]
            dist.all_gather(outs, t)
            a = torch.full((5,), float(rank) - 1.5)
            sent_a = stats64([a])
            dist.all_reduce(a, async_op=True).wait()
            u = torch.full((2,), 0.5 * rank)
            sent_u = stats64([u])
            only_this(u)
            if expect is not None:
                expect["all_gather.0"] = [stats64([t]), stats64(outs)]
                expect["all_reduce.2"] = [sent_a, None]
                expect["all_reduce.3"] = [sent_u, stats64([u])]
        obs.append(len(D._observers))
        opt.step()
        opt.zero_grad()
    mon.stop()
    if info is not None:
        info["anomaly"] = mon.anomaly
    return obs + [len(D._observers)]


def tp_run(cfg, dump_cfg, rank, tp_mesh, out):
    """A tensor-parallel Linear pair (up ColwiseParallel, down
    RowwiseParallel on the tp line), one step under the monitor and a
    tensor dump; down's output (the functional all_reduce's result) kept;
    a bf16 all_reduce inside the dump."""
    from nprobe.torch import PrecisionDebugger, TrainerMon
    from torch.distributed.tensor.parallel import (ColwiseParallel, RowwiseParallel,
                                                   parallelize_module)
    torch.manual_seed(1)
    m = torch.nn.Sequential()
    m.add_module("up", torch.nn.Linear(8, 16))
    m.add_module("down", torch.nn.Linear(16, 8))
    parallelize_module(m, tp_mesh, {"up": ColwiseParallel(), "down": RowwiseParallel()})
    opt = torch.optim.SGD(m.parameters(), lr=0.1)
    mon = TrainerMon(cfg)
    mon.set_monitor(m, opt)
    got = []
    m.down.register_forward_hook(lambda mod, a, y: got.append(y.detach().clone()))
    d = PrecisionDebugger(dump_cfg)
    d.start(m)
    x = torch.randn(4, 8, generator=torch.Generator().manual_seed(3 + rank // 2))
    m(x).square().sum().backward()
    dist.all_reduce(torch.full((4,), 1.5, dtype=torch.bfloat16))
    d.stop()
    opt.step()
    d.step()
    d.close()
    out["tp_down"] = stats64(got)
    # step 1 without the dump: the observer on its own around the
    # functional collective (its pending result waited for by the record)
    got.clear()
    opt.zero_grad()
    m(x).square().sum().backward()
    opt.step()
    mon.stop()
    out["tp_down1"] = stats64(got)


def fsdp_run(cfg, rank, dp_mesh, out):
    """FSDP2 (fully_shard on the dp line) over a Linear(8, 5) (uneven
    shards: padded), one step: the full parameters' and this rank's local
    gradients' float64 norms kept (the all-gather brings the former; the
    gradients are DTensors: the monitor reads their local shards)."""
    from nprobe.torch import TrainerMon
    from torch.distributed.fsdp import fully_shard
    torch.manual_seed(4)
    m = torch.nn.Linear(8, 5)
    out["fsdp_full"] = stats64(list(m.parameters()))
    fully_shard(m, mesh=dp_mesh)
    opt = torch.optim.SGD(m.parameters(), lr=0.1)
    mon = TrainerMon(cfg)
    mon.set_monitor(m, opt)
    x = torch.randn(3, 8, generator=torch.Generator().manual_seed(rank))
    m(x).square().mean().backward()
    out["fsdp_grad"] = stats64([p.grad.to_local() for p in m.parameters()])
    opt.step()
    mon.stop()


def check_fsdp(tmp, world, res, fails):
    """FSDP2's all-gather brought the full parameters (its padding zeros
    add to numel and zeros, not to the norm, min or max), the
    reduce-scatter's comm_out is this rank's gradient shards (+ padding),
    and grad_norm is the norm of the local gradients."""
    for r in range(world):
        rec = records(f"{tmp}/mon_cc_fsdp/monitor_rank{r}.h5")
        full, grad = res[r]["fsdp_full"], res[r]["fsdp_grad"]
        ag = rec.get(("Distributed.all_gather_into_tensor.0.forward", "comm_out"))
        rs = rec.get(("Distributed.reduce_scatter_tensor.0.forward", "comm_out"))
        gn = rec.get(("grad_norm", "grad_norm"))
        ok = ag is not None and ag["numel"] == 54 and ag["zeros"] == 9 and \
            abs(ag["norm"] - full[1]) <= 1e-6 * full[1] and ag["min"] == full[2] and \
            ag["max"] == full[3]
        ok = ok and rs is not None and abs(rs["norm"] - grad[1]) <= 1e-6 * grad[1] and \
            rs["numel"] == 27
        ok = ok and gn is not None and abs(gn["mean"] - grad[1]) <= 1e-6 * grad[1]
        if not ok:
            fails.append(f"cc fsdp rank {r}: all-gather {ag} against the parameters {full}; "
                         f"reduce-scatter {rs} and grad_norm {gn} against the local "
                         f"gradients {grad}")


def rank_part(rank, tmp, tp_mesh, dp_mesh=None):
    with open(f"{tmp}/cc_step") as f:
        s = int(f.read())
    expect = {}
    out = {"expect": expect}
    train(f"{tmp}/cc_nan.json", rank, s, expect)
    train(f"{tmp}/nocc_nan.json", rank, s)
    train(f"{tmp}/cc_ring.json", rank, s, info=out)
    out["obs_log"] = train(f"{tmp}/cc_log.json", rank, -1, steps=2)
    out["obs_line"] = train(f"{tmp}/cc_line.json", rank, -1, steps=3)
    tp_run(f"{tmp}/cc_tp.json", f"{tmp}/cc_tp_dump.json", rank, tp_mesh, out)
    if dp_mesh is not None:
        fsdp_run(f"{tmp}/cc_fsdp.json", rank, dp_mesh, out)
    return out


def records(path, step=0):
    with h5py.File(path, "r", swmr=True) as f:
        keys = [(a.decode(), b.decode()) for a, b in f["keys"][:]]
        return {keys[x["key"]]: x for x in f["records"][:] if x["step"] == step}


def close(rec, want):
    """A record against float64 statistics (numel, norm, min, max, mean,
    zeros, nans): the norm within 1e-6 relative (the kernel's float32
    block sums: docs/MONITOR.md "Statistics"), the mean within 1e-6 of the
    largest magnitude, min/max exact (float32 values), counts exact."""
    n, norm, lo, hi, mean, zeros, nans = want
    big = max(abs(lo), abs(hi), 1e-30)
    return (rec is not None and rec["numel"] == n and abs(rec["norm"] - norm) <= 1e-6 * norm
            and rec["min"] == lo and rec["max"] == hi and abs(rec["mean"] - mean) <= 1e-6 * big
            and rec["zeros"] == zeros and rec["nans"] == nans)


def first_anomaly(nprobe, d):
    out = subprocess.run([nprobe, "monitor", d], capture_output=True, text=True)
    line = next((ln for ln in out.stdout.splitlines() if ln.startswith("first anomaly:")), "")
    return out.returncode, line, out.stdout + out.stderr


def check_tp(tmp, world, res, fails):
    """The functional all_reduce of RowwiseParallel's output: comm_in and
    comm_out against the dump's input.0/output.0 of the same call (float64
    here) and comm_out against the module's output."""
    from test_torch_dtensor import read
    for r in range(world):
        rec = records(f"{tmp}/mon_cc_tp/monitor_rank{r}.h5")
        calls, data, _p, _a = read(f"{tmp}/dump_cc_tp/step0/rank{r}/dump.h5")
        dcalls = [c for c in calls if c.startswith("Distributed.")]
        comm = sorted({k[0] for k in rec if k[1] in ("comm_in", "comm_out")})
        if not any(c.startswith("Distributed.all_reduce.") for c in comm):
            fails.append(f"cc tp rank {r}: no functional all_reduce recorded: {comm}")
        for name in comm:
            base = name[:-len(".forward")]
            for metric, leaf in (("comm_in", "input.0"), ("comm_out", "output.0")):
                key = f"{name}.{leaf}"
                if key not in data:
                    fails.append(f"cc tp rank {r}: {key} not in the dump ({dcalls})")
                    continue
                if not close(rec.get((name, metric)), stats64([torch.from_numpy(
                        data[key].astype(np.float64))])):
                    fails.append(f"cc tp rank {r}: {name} {metric} {rec.get((name, metric))} "
                                 f"against the dumped {key}")
            if base not in {c.rsplit(".", 1)[0] for c in dcalls} and \
                    f"{name}" not in dcalls:
                fails.append(f"cc tp rank {r}: {name} not a call of the dump {dcalls}")
        # the RowwiseParallel output's all_reduce: the module's output arrived
        outs = [rec[k] for k in rec if k[1] == "comm_out" and k[0].startswith(
            "Distributed.all_reduce.")]
        if not any(close(o, res[r]["tp_down"]) for o in outs):
            fails.append(f"cc tp rank {r}: no comm_out equals down's output {res[r]['tp_down']}")
        # step 1, no dump: the forward's all_reduce (the first call) brought
        # down's output
        rec1 = records(f"{tmp}/mon_cc_tp/monitor_rank{r}.h5", step=1)
        name = "Distributed.all_reduce.0.forward"
        if not close(rec1.get((name, "comm_out")), res[r]["tp_down1"]) or \
                rec1.get((name, "comm_in")) is None or \
                rec1[(name, "comm_in")]["numel"] != res[r]["tp_down1"][0]:
            fails.append(f"cc tp rank {r}: step 1 (no dump) {name} "
                         f"{rec1.get((name, 'comm_in'))} {rec1.get((name, 'comm_out'))} "
                         f"against down's output {res[r]['tp_down1']}")
        # the bf16 all_reduce: recorded (its float32 values), the monitor's
        # conversion not a call of the dump
        bf = [k for k in rec if k[1] == "comm_in" and rec[k]["numel"] == 4
              and rec[k]["min"] == 1.5 and rec[k]["max"] == 1.5]
        if not bf or any("float" in c or "contiguous" in c for c in calls):
            fails.append(f"cc tp rank {r}: the bf16 all_reduce {bf}; dump calls {calls}")


def check(tmp, world, res, nprobe):
    fails = []
    with open(f"{tmp}/cc_step") as f:
        s = int(f.read())
    # (a) the NaN's source rank, through the all-reduce
    rc, line, text = first_anomaly(nprobe, f"{tmp}/mon_cc_nan")
    want = f"first anomaly: step {s} rank {WORLD_NAN_RANK} Distributed.all_reduce.0.forward comm_in"
    print(f"cc: {line}")
    if rc != 1 or not line.startswith(want):
        fails.append(f"cc: nprobe monitor: exit {rc}, {line!r}, want {want!r}: {text[-600:]}")
    rc, line, text = first_anomaly(nprobe, f"{tmp}/mon_nocc_nan")
    print(f"no cc: {line}")
    if rc != 1 or not line.startswith(f"first anomaly: step {s} rank 0 fc.weight grad"):
        fails.append(f"no cc: the NaN first seen on rank 0's fc.weight grad: exit {rc}, {line!r}")
    # the ring of calls (anomaly_calls) fired online by the comm records:
    # rank 2 by what it sent, the others by what arrived; rank 2's dump of
    # the kept calls holds the all-reduce with the NaN it sent
    from test_torch_dtensor import read
    name = "Distributed.all_reduce.0.forward"
    for r in range(world):
        a = res[r].get("anomaly") or {}
        metric = "comm_in" if r == WORLD_NAN_RANK else "comm_out"
        if (a.get("step"), a.get("name"), a.get("metric"), a.get("rule")) != \
                (s, name, metric, "nan"):
            fails.append(f"cc ring rank {r}: online anomaly {a}, want step {s} {name} {metric}")
    try:
        _c, data, _p, _a = read(f"{tmp}/mon_cc_ring/anomaly_calls/step{s}/rank{WORLD_NAN_RANK}/"
                                "dump.h5")
        x = data.get(f"{name}.input.0")
    except OSError as e:
        x = e
    if not isinstance(x, np.ndarray) or x.shape != (4, 8) or not np.isnan(x[1, 2]) or \
            np.isnan(x).sum() != 1:
        fails.append(f"cc ring: rank {WORLD_NAN_RANK}'s kept calls at step {s}: {name}.input.0 "
                     f"{x}")
    # (b) the statistics on the clean step 0, every rank
    for r in range(world):
        rec = records(f"{tmp}/mon_cc_nan/monitor_rank{r}.h5")
        for call, (sent, got) in res[r]["expect"].items():
            name = f"Distributed.{call}.forward"
            if not close(rec.get((name, "comm_in")), sent):
                fails.append(f"cc rank {r}: {name} comm_in {rec.get((name, 'comm_in'))} "
                             f"against {sent}")
            if got is None:
                if (name, "comm_out") in rec:
                    fails.append(f"cc rank {r}: {name} asynchronous: a comm_out record")
            elif not close(rec.get((name, "comm_out")), got):
                fails.append(f"cc rank {r}: {name} comm_out {rec.get((name, 'comm_out'))} "
                             f"against {got}")
        n = sum(1 for k in rec if k[1].startswith("comm_"))
        if n != 9:
            fails.append(f"cc rank {r}: {n} comm records at step 0, want 9 (5 calls, one async)")
        if any(k[1].startswith("comm_") for k in records(f"{tmp}/mon_nocc_nan/"
                                                          f"monitor_rank{r}.h5")):
            fails.append(f"no cc rank {r}: comm records")
    check_tp(tmp, world, res, fails)
    if "fsdp_full" in res[0]:
        check_fsdp(tmp, world, res, fails)
    # (c) cc_log_only: the stacks, no comm record; cc_codeline: only_this's
    for r in range(world):
        rec = records(f"{tmp}/mon_cc_log/monitor_rank{r}.h5")
        path = f"{tmp}/mon_cc_log/cc_stacks_rank{r}.json"
        try:
            with open(path) as f:
                stacks = json.load(f)
        except OSError as e:
            fails.append(f"cc_log_only rank {r}: {e}")
            stacks = {}
        ar = stacks.get("all_reduce", [])
        if sorted(stacks) != ["all_gather", "all_reduce"] or len(ar) != 3 or \
                not all(any("monitor_cc.py[" in fr and fr.endswith("   train") for fr in st)
                        for st in ar if not any(fr.endswith("   only_this") for fr in st)):
            fails.append(f"cc_log_only rank {r}: stacks {json.dumps(stacks)[:600]}")
        if any(k[1].startswith("comm_") for k in rec) or ("fc.weight", "grad") not in rec:
            fails.append(f"cc_log_only rank {r}: records {sorted(rec)}")
        # the observer in the wrappers' list on recorded steps only, and
        # after cc_log_only's first step and stop() no longer
        if res[r]["obs_log"] != [1, 0, 0] or res[r]["obs_line"] != [1, 0, 1, 0]:
            fails.append(f"rank {r}: observers at the steps' ends: cc_log_only "
                         f"{res[r]['obs_log']} (want [1, 0, 0]), step_interval 2 "
                         f"{res[r]['obs_line']} (want [1, 0, 1, 0])")
        rec = records(f"{tmp}/mon_cc_line/monitor_rank{r}.h5")
        comm = sorted(k for k in rec if k[1].startswith("comm_"))
        if comm != [("Distributed.all_reduce.3.forward", "comm_in"),
                    ("Distributed.all_reduce.3.forward", "comm_out")]:
            fails.append(f"cc_codeline rank {r}: {comm}")
    return fails


def check_config(tmp):
    """msprobe's cc_distribution keys load; a wrong one is named. Several
    tensors as one record: the statistics of their finite values taken
    together (worked out here), their NaN/Inf/zero counts; an integer and an
    empty tensor left out."""
    from nprobe.torch.monitor import _config
    from nprobe.torch.monitor_cc import merged_stats
    fails = []
    nan, inf = float("nan"), float("inf")
    got = merged_stats([torch.tensor([1.0, nan, 3.0, 0.0]), torch.tensor([[2.0, inf], [-4.0, 5.0]]),
                        torch.empty(0), torch.arange(3), torch.tensor([nan, -inf])])
    want = (10, 55 ** 0.5, -4.0, 5.0, 7 / 6, 1, 2, 2)
    if got is None or got[0] != want[0] or got[2:4] != want[2:4] or got[5:] != want[5:] or \
            abs(got[1] - want[1]) > 1e-12 or abs(got[4] - want[4]) > 1e-12:
        fails.append(f"merged_stats: {got}, want {want}")
    got = merged_stats([torch.tensor([nan]), torch.tensor([inf])])
    if got is None or got[0] != 2 or not all(v != v for v in got[1:5]) or got[5:] != (0, 1, 1):
        fails.append(f"merged_stats of no finite value: {got}")
    path = f"{tmp}/cc_bad.json"
    for sec, want in (({"enable": True, "cc_codeline": ["a"], "cc_pre_hook": True,
                        "cc_log_only": False}, None),
                      ({"enable": True, "cc_log": True}, 'unknown key "cc_log"'),
                      ({"enable": 1}, "cc_distribution.enable: expected true or false"),
                      ({"cc_codeline": ["("]}, "cc_codeline: '('")):
        with open(path, "w") as f:
            json.dump({"task": "monitor", "dump_path": f"{tmp}/x",
                       "monitor": {"cc_distribution": sec}}, f)
        try:
            c = _config(path)
            if want is not None or not c["cc"]["enable"]:
                fails.append(f"cc config {sec}: loaded {c['cc']}, want an error {want!r}")
        except ValueError as e:
            if want is None or want not in str(e):
                fails.append(f"cc config {sec}: {e}, want {want!r}")
    return fails
