"""test_torch_ddp.py - a real 2-process DistributedDataParallel run on CPU
(gloo, torch.multiprocessing, a file store) dumped through
nprobe.torch.PrecisionDebugger: rank0/ and rank1/ from torch.distributed
(root attributes rank and world_size), each rank's step 0 equal to a
single-process run of the same model on that rank's batch (`nprobe compare`
exits 0 pairing both ranks), the local parameter gradients recorded before
DDP's all-reduce, and the step-1 parameters identical on both ranks and
equal to w - lr * mean of the ranks' gradients worked out here; the
package's monitor (TrainerMon) on the same run: grad_pre the rank's own
gradient, grad the mean, loss the rank's (float64 here). With
PrecisionDebugger(data_parallel="dp") (a 1-D mesh "dp" over the world):
each rank's batch Shard(0) of the ranks' batches, the cross-entropy loss
Partial(avg), the local parameter gradients Partial(sum) under dp_grad_scale
2 (DDP's average; loss_scale 1); `nprobe compare` of one process on both
batches against it exits 0, fc2.bias changed on rank 1 after DDP's
broadcast (replicas that part) is named with rank 1, and a NaN put into
rank 0's gradient of fc1.weight in a copy of the dump is an error naming
Module.module.fc1.Linear (exit 1), not a step a loss scaler skipped. Run through pyrun.sh; exits 1 on any
failed check."""
import json
import os
import shutil
import subprocess
import sys
import tempfile

import h5py
import numpy as np
import torch
import torch.distributed as dist
import torch.multiprocessing as mp
import torch.nn.functional as F

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
from test_torch_dtensor import check_nan_not_skipped, inject_nan  # noqa: E402

FAILS = []
LR = 0.1


def check(cond, what):
    if not cond:
        FAILS.append(what)
        print("FAIL:", what)


class Net(torch.nn.Module):
    def __init__(self):
        super().__init__()
        self.fc1 = torch.nn.Linear(8, 16)
        self.fc2 = torch.nn.Linear(16, 4)

    def forward(self, x):
        return self.fc2(F.gelu(self.fc1(x)))


class Wrap(torch.nn.Module):
    """The single-process stand-in: DDP's `module.` prefix in the names."""

    def __init__(self, m):
        super().__init__()
        self.module = m

    def forward(self, x):
        return self.module(x)


def batch(rank, step):
    g = torch.Generator().manual_seed(100 * step + rank)
    return torch.randn(6, 8, generator=g), torch.randint(0, 4, (6,), generator=g)


def train(model, d, rank, steps, mon=None):
    opt = torch.optim.SGD(model.parameters(), lr=LR)
    if mon is not None:
        mon.set_monitor(model, opt)
    for step in range(steps):
        x, y = batch(rank, step)
        d.start(model)
        loss = F.cross_entropy(model(x), y)
        if mon is not None:
            mon.record_loss(loss)
        loss.backward()
        opt.step()
        opt.zero_grad()
        d.stop()
        d.step()
    d.close()
    if mon is not None:
        mon.stop()


def ddp_rank(rank, tmp):
    from nprobe.torch import PrecisionDebugger, TrainerMon
    torch.set_num_threads(1)
    dist.init_process_group("gloo", init_method=f"file://{tmp}/store", rank=rank,
                            world_size=2)
    torch.manual_seed(0)
    model = torch.nn.parallel.DistributedDataParallel(Net())
    d = PrecisionDebugger(f"{tmp}/ddp.json")
    train(model, d, rank, 2, TrainerMon(f"{tmp}/mon.json"))
    # data_parallel="dp": each rank's batch Shard(0) of the ranks' batches,
    # DDP's average in the loss scale; the bug: fc2.bias changed on rank 1
    # after DDP's broadcast (a rank-local re-init or load), replicas part
    for label in ("dp", "bug_replica"):
        torch.manual_seed(0)
        model = torch.nn.parallel.DistributedDataParallel(Net())
        if label == "bug_replica" and rank == 1:
            with torch.no_grad():
                model.module.fc2.bias.add_(0.01)
        d = PrecisionDebugger(f"{tmp}/{label}.json", data_parallel="dp")
        train(model, d, rank, 1)
    dist.destroy_process_group()


def read(path):
    with h5py.File(path, "r") as f:
        attrs = {k: (v.decode() if isinstance(v, bytes) else v) for k, v in f.attrs.items()}
        data = {k: np.array(v) for k, v in f["data"].items()}
    return attrs, data


def main():
    torch.set_num_threads(1)
    with tempfile.TemporaryDirectory() as tmp:
        for name, path in (("ddp", "dump_ddp"), ("single", "dump_single"), ("dp", "dump_dp"),
                           ("bug_replica", "dump_bug_replica"), ("whole", "dump_whole")):
            with open(f"{tmp}/{name}.json", "w") as f:
                json.dump({"task": "tensor", "dump_path": f"{tmp}/{path}", "level": "mix",
                           "step": [0, 1] if name == "ddp" else [0]}, f)
        with open(f"{tmp}/mon.json", "w") as f:
            json.dump({"task": "monitor", "dump_path": f"{tmp}/mon",
                       "monitor": {"targets": ["module.fc1"]}}, f)
        mp.spawn(ddp_rank, args=(tmp,), nprocs=2, join=True)
        # the single-process runs, one per rank's batch (rank from RANK)
        from nprobe.torch import PrecisionDebugger
        grads, losses = {}, {}
        torch.manual_seed(0)
        init = Net().state_dict()
        for r in (0, 1):
            os.environ.update(RANK=str(r), WORLD_SIZE="2")
            net = Net()
            net.load_state_dict(init)
            d = PrecisionDebugger(f"{tmp}/single.json")
            x, y = batch(r, 0)
            d.start(Wrap(net))
            loss = F.cross_entropy(net(x), y)
            losses[r] = float(loss)
            loss.backward()
            d.stop()
            grads[r] = {k: p.grad.clone() for k, p in net.named_parameters()}
            d.close()
        for r in (0, 1):
            for s in (0, 1):
                path = f"{tmp}/dump_ddp/step{s}/rank{r}/dump.h5"
                check(os.path.exists(path), f"{path} written")
            attrs, data = read(f"{tmp}/dump_ddp/step0/rank{r}/dump.h5")
            check(attrs.get("rank") == r and attrs.get("world_size") == 2,
                  f"rank {r}: root attributes rank/world_size {attrs}")
            g = data.get("Module.module.fc1.Linear.parameters_grad.weight")
            check(g is not None and np.array_equal(g, grads[r]["fc1.weight"].numpy()),
                  f"rank {r}: the local gradient of fc1.weight (before the all-reduce)")
        # the package's monitor (TrainerMon) on the same DDP run: grad_pre is
        # this rank's own gradient (before DDP's all-reduce), grad the mean
        # of the ranks', loss this rank's (record_loss), all in float64 here
        for r in (0, 1):
            with h5py.File(f"{tmp}/mon/monitor_rank{r}.h5", "r", swmr=True) as f:
                keys = [(a.decode(), b.decode()) for a, b in f["keys"][:]]
                rec = {keys[x["key"]]: x for x in f["records"][:] if x["step"] == 0}
            for metric, want in (("grad_pre", grads[r]["fc1.weight"]),
                                 ("grad", (grads[0]["fc1.weight"] + grads[1]["fc1.weight"]) / 2)):
                got = rec.get(("module.fc1.weight", metric))
                w = want.double()
                check(got is not None and abs(got["norm"] - float(w.norm())) <= 1e-6 * float(w.norm())
                      and got["max"] == float(want.max()) and got["min"] == float(want.min()),
                      f"rank {r}: monitor {metric} of fc1.weight {got} against {float(w.norm())}")
            got = rec.get(("loss", "loss"))
            check(got is not None and abs(got["mean"] - losses[r]) <= 1e-6 * abs(losses[r]),
                  f"rank {r}: monitor loss {got} against {losses[r]}")
            check(("module.fc2.weight", "grad_pre") not in rec, "grad_pre of a parameter not targeted")
        out = subprocess.run([os.environ["NPROBE_BIN"], "monitor", f"{tmp}/mon"],
                             capture_output=True, text=True)
        check(out.returncode == 0 and "2 rank(s), 2 step(s)" in out.stdout,
              f"nprobe monitor of the package's 2 ranks: {out.stdout} {out.stderr}")
        # step 1: the same parameters on both ranks, w - lr * mean(grads)
        p = [read(f"{tmp}/dump_ddp/step1/rank{r}/dump.h5")[1] for r in (0, 1)]
        key = "Module.module.fc2.Linear.forward.0.parameters.weight"
        want = (init["fc2.weight"] - LR * (grads[0]["fc2.weight"] + grads[1]["fc2.weight"]) / 2)
        check(key in p[0] and key in p[1] and np.array_equal(p[0][key], p[1][key]),
              "step 1: fc2.weight identical on both ranks")
        check(key in p[0] and np.allclose(p[0][key], want.numpy(), rtol=0, atol=1e-6),
              "step 1: fc2.weight = w - lr * mean of the ranks' gradients")
        shutil.copytree(f"{tmp}/dump_ddp/step0", f"{tmp}/ddp_step0/step0")
        out = subprocess.run([os.environ["NPROBE_BIN"], "compare", "-b", f"{tmp}/dump_single",
                              "-c", f"{tmp}/ddp_step0", "-o", f"{tmp}/rep"],
                             capture_output=True, text=True)
        print(out.stdout[-1500:])
        check(out.returncode == 0, f"compare single-process vs DDP: exit {out.returncode} "
              f"{out.stderr[-500:]}")
        check(" 0 error" in out.stdout and "compared 2 step/rank pairs" in out.stdout and "0 of 2 pairs fail" in out.stdout
              and "first culprit: none" in out.stdout, "both ranks paired, no culprit")
        try:
            PrecisionDebugger(f"{tmp}/whole.json", data_parallel="dp", data_parallel_reduce="mean")
            check(False, "data_parallel_reduce='mean' refused")
        except ValueError as e:
            check("data_parallel_reduce='mean'" in str(e), f"the refusal names the key: {e}")
        # data_parallel="dp": one process on both ranks' batches (12 rows)
        net = Net()
        net.load_state_dict(init)
        d = PrecisionDebugger(f"{tmp}/whole.json")
        xs, ys = zip(*(batch(r, 0) for r in (0, 1)))
        x, y = torch.cat(xs), torch.cat(ys)
        d.start(Wrap(net))
        F.cross_entropy(net(x), y).backward()
        d.stop()
        d.close()
        for r in (0, 1):
            with h5py.File(f"{tmp}/dump_dp/step0/rank{r}/dump.h5", "r") as f:
                attrs = dict(f.attrs)
                place = {x["name"].decode(): (x["placements"].decode(),
                                              tuple(x["global_shape"][:x["global_ndim"]]))
                         for x in f["placements"][()]}
            check(attrs.get("dp_grad_scale") == 2.0 and attrs.get("loss_scale") == 1.0
                  and attrs.get("mesh_shape") in ("2", b"2"),
                  f"dp rank {r}: dp_grad_scale {attrs.get('dp_grad_scale')} (DDP's average), "
                  f"loss_scale {attrs.get('loss_scale')}, mesh {attrs.get('mesh_shape')}")
            for leaf, want in (("Module.module.Net.forward.0.input.0", ("Shard(0)", (12, 8))),
                               ("Functional.cross_entropy.0.forward.output.0",
                                ("Partial(avg)", ())),
                               ("Module.module.fc1.Linear.parameters_grad.weight",
                                ("Partial(sum)", (16, 8)))):
                check(place.get(leaf) == want, f"dp rank {r}: {leaf} {place.get(leaf)} != {want}")
        for label, want in (("dp", None), ("bug_replica", "Module.module.fc2.Linear.forward.0")):
            out = subprocess.run([os.environ["NPROBE_BIN"], "compare", "-b", f"{tmp}/dump_whole",
                                  "-c", f"{tmp}/dump_{label}", "-o", f"{tmp}/rep_{label}"],
                                 capture_output=True, text=True)
            print(f"compare one process vs DDP {label}: exit {out.returncode}\n"
                  f"{out.stdout[-1200:]}")
            first = next((ln for ln in out.stdout.splitlines() if "first culprit:" in ln), "")
            if want is None:
                check(out.returncode == 0 and "first culprit: none" in first,
                      f"compare one process vs DDP dp: exit {out.returncode} {out.stderr[-400:]}")
            else:
                check(out.returncode == 1 and want in first and "rank 1" in first,
                      f"compare one process vs DDP {label}: exit {out.returncode}, the culprit "
                      f"{want} with rank 1: {first[:400]!r} {out.stderr[-400:]}")
        # a NaN in rank 0's gradient of fc1.weight under DDP's average, no
        # GradScaler: an error naming the module (was a skipped-step warning
        # while the dp factor rode in loss_scale)
        inject_nan(f"{tmp}/dump_dp", f"{tmp}/dump_bug_dp_nan", 0,
                   "Module.module.fc1.Linear.parameters_grad.weight")
        for fail in check_nan_not_skipped(f"{tmp}/dump_whole", f"{tmp}/dump_bug_dp_nan",
                                          f"{tmp}/rep_bug_dp_nan", "Module.module.fc1.Linear"):
            check(False, fail)
        if os.environ.get("KEEP"):
            shutil.copytree(tmp, os.environ["KEEP"])
    print(f"{len(FAILS)} failed")
    return 1 if FAILS else 0


if __name__ == "__main__":
    sys.exit(main())
