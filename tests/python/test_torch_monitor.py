"""nprobe.torch.TrainerMon (msprobe's monitor API name, docs/MONITOR.md
"PyTorch"): a small PyTorch model trained 14 steps with Adam, monitored
every step. Checks against torch's own computation in float64: the last
step's activation and activation-gradient statistics of every module
(norm, min, max, mean, zeros; captured by hooks of the test's own), the
parameter gradients, the weights after the update, Adam's exp_avg and
exp_avg_sq, the update ratio (from a copy of the weights the test keeps)
and the global gradient norm; a spike injected at a random step (fc2's
output x 1e4, past the rules' warmup) is named by `nprobe monitor` (the
C reader of the same file) with its step and module; a clean run has no
anomaly; `nprobe monitor --tensorboard` writes event files whose every
series tensorboard's own reader gives back equal to the file's records; an
unknown config key is refused naming it."""
import json
import os
import random
import subprocess
import sys
import tempfile
import time

import torch

from nprobe.torch import TrainerMon

sys.path.insert(0, os.path.join(os.path.dirname(os.path.abspath(__file__)), ".."))
from nptest import ratio_worst, step_ratios  # noqa: E402

torch.manual_seed(0)
nprobe = os.environ["NPROBE_BIN"]
tmp = tempfile.mkdtemp()
fail = []


def check(cond, what):
    if not cond:
        fail.append(what)
        print("FAIL", what)


class Net(torch.nn.Module):
    def __init__(self):
        super().__init__()
        self.fc1 = torch.nn.Linear(16, 32)
        self.act = torch.nn.GELU()
        self.fc2 = torch.nn.Linear(32, 8)

    def forward(self, x):
        return self.fc2(self.act(self.fc1(x)))


def run(name, spike_step=None, steps=14):
    torch.manual_seed(1)
    model = Net()
    opt = torch.optim.Adam(model.parameters(), lr=1e-2)
    cfg = os.path.join(tmp, f"{name}.json")
    with open(cfg, "w") as f:
        json.dump({"task": "monitor", "dump_path": os.path.join(tmp, name),
                   "monitor": {"targets": ["fc", "act"], "xy_distribution": True}}, f)
    state = {"step": 0}
    if spike_step is not None:  # before the monitor's hooks: they see the spike
        model.fc2.register_forward_hook(
            lambda m, a, out: out * 1e4 if state["step"] == spike_step else None)
    mon = TrainerMon(cfg)
    mon.set_monitor(model, opt)
    seen = {}
    for n, m in model.named_modules():
        if n:
            m.register_forward_hook(lambda m, a, out, n=n: seen.__setitem__((n, "activation"), out.detach().clone()))
            m.register_full_backward_hook(
                lambda m, gi, go, n=n: seen.__setitem__((n, "activation_grad"), go[0].detach().clone()))
    before = {}
    for s in range(steps):
        state["step"] = s
        x = torch.randn(4, 16)
        y = torch.randn(4, 8)
        opt.zero_grad()
        loss = torch.nn.functional.mse_loss(model(x), y)
        loss.backward()
        before = {n: p.detach().clone() for n, p in model.named_parameters()}
        opt.step()
    mon.stop()
    return model, opt, seen, before


U32 = 2.0 ** -24   # float32's unit roundoff


def ratio_run(name, make_opt, source="derived", steps=5, mv=False, extra=None):
    """Net trained `steps` steps under make_opt(params); every step's
    update_ratio records against torch's own ||W_after - W_before|| /
    ||W_after|| (clones around opt.step(), in float64); returns the largest
    |difference| / bound, the paths taken, the records' count and the
    weights' snapshots the monitor holds. extra: more monitor keys."""
    torch.manual_seed(2)
    model = Net()
    opt = make_opt(model.parameters())
    cfg = os.path.join(tmp, f"{name}.json")
    with open(cfg, "w") as f:
        json.dump({"task": "monitor", "dump_path": os.path.join(tmp, name),
                   "monitor": dict({"xy_distribution": False, "mv_distribution": mv,
                                    "update_source": source}, **(extra or {}))}, f)
    mon = TrainerMon(cfg)
    mon.set_monitor(model, opt)
    want, paths = {}, set()
    for s in range(steps):
        opt.zero_grad()
        torch.nn.functional.mse_loss(model(torch.randn(4, 16)), torch.randn(4, 8)).backward()
        want.update(((s, n), r) for n, r in step_ratios(model, opt.step).items())
        paths |= set(mon.update_paths.values())
    mon.stop()
    worst, count = ratio_worst(os.path.join(tmp, name, "monitor_rank0.h5"), want)
    return worst, paths, count, len(mon._snap)


def records(d):
    import h5py
    with h5py.File(os.path.join(d, "monitor_rank0.h5"), "r", swmr=True) as f:
        keys = [(a.decode(), b.decode()) for a, b in f["keys"][:]]
        rec = f["records"][:]
        last = int(f["steps"][-1]["step"])
    out = {}
    for r in rec:
        if int(r["step"]) == last:
            out[keys[r["key"]]] = r
    return out, last


def close(a, b, what, rtol=1e-9):
    ok = abs(a - b) <= rtol * max(abs(b), 1e-30)
    check(ok, f"{what}: monitor {a!r} torch {b!r}")


def stats_of(rec, t, what):
    t = t.double()
    close(rec["norm"], float(torch.linalg.vector_norm(t)), what + " norm")
    close(rec["min"], float(t.min()), what + " min")
    close(rec["max"], float(t.max()), what + " max")
    close(rec["mean"], float(t.mean()), what + " mean", 1e-7)
    check(int(rec["zeros"]) == int((t == 0).sum()), what + " zeros")
    check(int(rec["numel"]) == t.numel(), what + " numel")


# clean run: every record of the last step against torch
model, opt, seen, before = run("clean")
got, last = records(os.path.join(tmp, "clean"))
check(last == 13, f"last step {last}")
for (n, metric), t in seen.items():
    check((n, metric) in got, f"{n} {metric} recorded")
    if (n, metric) in got:
        stats_of(got[(n, metric)], t, f"{n} {metric}")
total = 0.0
for n, p in model.named_parameters():
    total += float(torch.linalg.vector_norm(p.grad.double())) ** 2
    stats_of(got[(n, "grad")], p.grad, f"{n} grad")
    stats_of(got[(n, "weight")], p.detach(), f"{n} weight")
    for s in ("exp_avg", "exp_avg_sq"):
        stats_of(got[(n, s)], opt.state[p][s], f"{n} {s}")
    ratio = float(torch.linalg.vector_norm((p.detach() - before[n]).double())
                  / torch.linalg.vector_norm(p.detach().double()))
    # Adam: the update derived from its state (docs/MONITOR.md "The update
    # without a snapshot"), within float32 rounding of the weights
    r = float(got[(n, "update_ratio")]["mean"])
    check(abs(r - ratio) <= U32 * (2 + 16 * ratio), f"{n} update_ratio {r!r} torch {ratio!r}")
close(float(got[("grad_norm", "grad_norm")]["mean"]), total ** 0.5, "grad_norm")
r = subprocess.run([nprobe, "monitor", os.path.join(tmp, "clean")], capture_output=True, text=True)
check(r.returncode == 0 and "no anomaly" in r.stdout, "clean run: " + r.stdout + r.stderr)

# the update ratio without a snapshot: Adam and AdamW (with and without
# weight decay, amsgrad, maximize, foreach, lr as a tensor) derive it from
# their state, within U32 * (2 + 16 r) of torch's measured ratio at every
# step; the others, and update_source "snapshot", measure it
A, AW, SGD = torch.optim.Adam, torch.optim.AdamW, torch.optim.SGD
for name, mk, source, path in (
        ("adam", lambda p: A(p, lr=1e-2), "derived", "derived"),
        ("adam_wd", lambda p: A(p, lr=1e-2, weight_decay=0.1), "derived", "derived"),
        ("adamw", lambda p: AW(p, lr=1e-2), "derived", "derived"),
        ("adamw_wd", lambda p: AW(p, lr=3e-3, weight_decay=0.5, betas=(0.8, 0.9)), "derived", "derived"),
        ("adamw_ams", lambda p: AW(p, lr=1e-2, amsgrad=True, maximize=True), "derived", "derived"),
        ("adamw_foreach", lambda p: AW(p, lr=1e-2, foreach=True), "derived", "derived"),
        ("adamw_lr_tensor", lambda p: AW(p, lr=torch.tensor(1e-2)), "derived", "derived"),
        ("adamw_fused", lambda p: AW(p, lr=1e-2, fused=True), "derived", "snapshot"),
        ("adamw_auto_no_mv", lambda p: AW(p, lr=1e-2), "auto", "snapshot"),
        ("adamw_ams_auto", lambda p: AW(p, lr=1e-2, amsgrad=True), "auto+mv", "snapshot"),
        ("adamw_forced", lambda p: AW(p, lr=1e-2), "snapshot+mv", "snapshot"),
        ("sgd", lambda p: SGD(p, lr=1e-2, momentum=0.9), "derived", "snapshot")):
    worst, paths, count, _ = ratio_run(name, mk, source.split("+")[0], mv="+mv" in source)
    check(paths == {path} and count == 5 * 4 and worst <= 1.0,
          f"update ratio {name}: paths {paths} (want {path}), {count} records, "
          f"largest difference {worst:.3g} of the bound")
    print(f"update ratio {name}: {path}, largest |difference| {worst:.3g} of U32 (2 + 16 r)")

# ur_distribution (msprobe's key): the update ratio apart from the weights.
# Off: no update_ratio record and no snapshot of the weights taken, the
# weights still recorded; alone (param_distribution off): the same ratios
# as above and no weight record
for name, extra, want_ur, want_w in (
        ("ur_off", {"ur_distribution": False}, False, True),
        ("ur_only", {"param_distribution": False, "ur_distribution": True}, True, False)):
    worst, paths, count, snaps = ratio_run(name, lambda p: AW(p, lr=1e-2), "auto", extra=extra)
    got_k, _ = records(os.path.join(tmp, name))
    n_w = sum(1 for _, m in got_k if m == "weight")
    n_g = sum(1 for _, m in got_k if m == "grad")
    check(n_g == 4 and n_w == (4 if want_w else 0) and
          (count == 5 * 4 and worst <= 1.0 and snaps == 4 if want_ur else
           count == 0 and paths == set() and snaps == 0),
          f"{name}: {n_g} grad and {n_w} weight records a step, {count} update ratios "
          f"(largest difference {worst:.3g} of the bound), {snaps} snapshots")
    print(f"{name}: {n_w} weight records a step, {count} update ratios, {snaps} snapshots: ok")
# a run's record is never overwritten: a second monitor on the same folder
# is refused naming the file (FileExistsError), which stays as it was
kept = os.path.join(tmp, "ur_off", "monitor_rank0.h5")
with open(kept, "rb") as f:
    kept_bytes = f.read()
again = TrainerMon(os.path.join(tmp, "ur_off.json"))
try:
    again.set_monitor(Net(), torch.optim.SGD(Net().parameters(), lr=0.1))
    check(False, "a second monitor overwrote " + kept)
except FileExistsError as e:
    check(kept in str(e) and "never overwrites" in str(e), f"the error names the file: {e}")
with open(kept, "rb") as f:
    check(f.read() == kept_bytes, kept + " changed")
bad_ur = os.path.join(tmp, "bad_ur.json")
with open(bad_ur, "w") as f:
    json.dump({"task": "monitor", "dump_path": tmp, "monitor": {"ur_distribution": "yes"}}, f)
try:
    TrainerMon(bad_ur)
    check(False, "ur_distribution \"yes\" accepted")
except ValueError as e:
    check("ur_distribution" in str(e), f"error names ur_distribution: {e}")

# TensorBoard event files of the same file, read by tensorboard's own reader:
# every record's norm (tensors) or value (scalars) at its step
tb = os.path.join(tmp, "tb")
r = subprocess.run([nprobe, "monitor", os.path.join(tmp, "clean"), "--tensorboard", tb],
                   capture_output=True, text=True)
check(r.returncode == 0, "--tensorboard: " + r.stderr)
try:
    from tensorboard.backend.event_processing.event_accumulator import EventAccumulator
except ImportError:
    EventAccumulator = None
    print("tensorboard not installed: its reader's check skipped")
if EventAccumulator is not None and r.returncode == 0:
    import h5py
    import numpy as np
    ea = EventAccumulator(os.path.join(tb, "rank0"), size_guidance={"scalars": 0})
    ea.Reload()
    with h5py.File(os.path.join(tmp, "clean", "monitor_rank0.h5"), "r") as f:
        keys = [(a.decode(), b.decode()) for a, b in f["keys"][:]]
        want = {}
        for rec in f["records"][:]:
            n, m = keys[rec["key"]]
            v = rec["mean"] if m in ("grad_norm", "update_ratio") else rec["norm"]
            want.setdefault(f"{n}/{m}", []).append((int(rec["step"]), float(np.float32(v))))
    check(sorted(ea.Tags()["scalars"]) == sorted(want), "tensorboard tags")
    for tag, series in want.items():
        got_tb = [(e.step, e.value) for e in ea.Scalars(tag)] if tag in ea.Tags()["scalars"] else []
        check(got_tb == series, f"tensorboard {tag}: {got_tb[:3]} vs {series[:3]}")

# a spike at a random step past the warmup: named with its step and module
s = random.randint(11, 12)
run("spike", spike_step=s)
r = subprocess.run([nprobe, "monitor", os.path.join(tmp, "spike"), "--format", "json"],
                   capture_output=True, text=True)
first = json.loads(r.stdout)["anomalies"][0] if r.returncode == 1 else {}
check((first.get("step"), first.get("name"), first.get("metric")) == (s, "fc2", "activation"),
      f"spike at {s}: {r.stdout[:400]} {r.stderr}")

# a bad config key is refused, naming it
bad = os.path.join(tmp, "bad.json")
with open(bad, "w") as f:
    json.dump({"task": "monitor", "dump_path": tmp, "monitor": {"step_intervall": 2}}, f)
try:
    TrainerMon(bad)
    check(False, "unknown key accepted")
except ValueError as e:
    check("step_intervall" in str(e), f"error names the key: {e}")



# an HF Llama (tiny config, random weights) monitored by msprobe's own
# TrainerMon and by nprobe's, two runs of the same seeds and batches: where
# the two record the same thing, the last step's figures agree to the digits
# msprobe's csv keeps (6 decimals): module outputs (msprobe's actv NAME.output
# or NAME.output_0), the gradients at them (actv_grad), parameter gradients
# (grad_reduced), weights after the update (param_updated), Adam's m and v
# (msprobe reads them in the optimizer's pre-step hook: its step s holds
# the state after step s-1, which nprobe records at s-1); nprobe's loss
# record is the model's output's .loss
def llama_run(use_msprobe, out):
    from transformers import LlamaConfig, LlamaForCausalLM
    torch.manual_seed(3)
    cfg = LlamaConfig(vocab_size=64, hidden_size=32, intermediate_size=64, num_hidden_layers=2,
                      num_attention_heads=2, num_key_value_heads=2, max_position_embeddings=32)
    model = LlamaForCausalLM(cfg)
    opt = torch.optim.AdamW(model.parameters(), lr=1e-3)
    path = os.path.join(tmp, "llama_ms.json" if use_msprobe else "llama_np.json")
    sec = {"targets": {}, "xy_distribution": True, "wg_distribution": True,
           "mv_distribution": True, "param_distribution": True}
    if use_msprobe:
        from msprobe.pytorch import TrainerMon as MsMon
        sec.update({"ops": ["norm", "min", "max", "mean"], "format": "csv"})
        with open(path, "w") as f:
            json.dump(sec, f)
        mon = MsMon(path, params_have_main_grad=False)
    else:
        with open(path, "w") as f:
            json.dump({"task": "monitor", "dump_path": out, "monitor": sec}, f)
        mon = TrainerMon(path)
    mon.set_monitor(model, opt)
    g = torch.Generator().manual_seed(5)
    losses = []
    for _ in range(3):
        x = torch.randint(0, 64, (2, 16), generator=g)
        loss = model(input_ids=x, labels=x).loss
        losses.append(float(loss))
        loss.backward()
        opt.step()
        opt.zero_grad()
    if not use_msprobe:
        mon.stop()
    return losses


try:
    import importlib.util
    have = all(importlib.util.find_spec(m) for m in ("transformers", "msprobe"))
except (ImportError, ValueError):
    have = False
if have:
    import csv
    import glob
    import warnings
    warnings.simplefilter("ignore")
    ms_out = os.path.join(tmp, "ms_monitor")
    os.environ["MONITOR_OUTPUT_DIR"] = ms_out     # msprobe's output folder
    l_ms = llama_run(True, None)
    l_np = llama_run(False, os.path.join(tmp, "np_llama"))
    check(l_ms == l_np, f"the same training under both monitors: {l_ms} {l_np}")
    got, last = records(os.path.join(tmp, "np_llama"))
    import h5py
    with h5py.File(os.path.join(tmp, "np_llama", "monitor_rank0.h5"), "r", swmr=True) as f:
        keys = [(a.decode(), b.decode()) for a, b in f["keys"][:]]
        prev = {keys[r["key"]]: r for r in f["records"][:] if int(r["step"]) == last - 1}
    check(last == 2, f"llama last step {last}")
    check(abs(float(got[("loss", "loss")]["mean"]) - l_np[-1]) <= 1e-6 * abs(l_np[-1]),
          f"llama loss record {got.get(('loss', 'loss'))} against {l_np[-1]}")
    pairs = {"actv": "activation", "actv_grad": "activation_grad", "grad_reduced": "grad",
             "param_updated": "weight", "exp_avg": "exp_avg", "exp_avg_sq": "exp_avg_sq"}
    n_cmp = {}
    for tag, metric in pairs.items():
        files = glob.glob(os.path.join(ms_out, "*", f"{tag}_{last}-{last}.csv"))
        check(len(files) == 1, f"msprobe's {tag} csv of step {last}: {files}")
        for row in (csv.DictReader(open(files[0])) if files else []):
            name = row["name"]
            if tag.startswith("actv"):
                if not (name.endswith(".output") or name.endswith(".output_0")):
                    continue
                name = name.rsplit(".", 1)[0]
            rec = (prev if tag.startswith("exp_avg") else got).get((name, metric))
            if rec is None:
                continue
            n_cmp[tag] = n_cmp.get(tag, 0) + 1
            for st in ("norm", "min", "max", "mean"):
                want = float(row[st])
                ok = abs(float(rec[st]) - want) <= 5.1e-7 + 1e-6 * abs(want)
                check(ok, f"llama {name} {metric} {st}: nprobe {float(rec[st])!r} msprobe {want!r}")
    # every parameter, and most module outputs (msprobe leaves some out)
    check(n_cmp.get("grad_reduced") == 21 and n_cmp.get("param_updated") == 21
          and n_cmp.get("exp_avg_sq") == 21 and n_cmp.get("actv", 0) >= 20
          and n_cmp.get("actv_grad", 0) >= 20, f"llama records compared: {n_cmp}")
    print(f"llama against msprobe's monitor: {n_cmp}")
else:
    print("transformers or msprobe not importable: the HF Llama check against msprobe skipped")


# The ring of calls (anomaly_calls K, anomaly_calls_after N): fc2's output x
# 1e4 at step S (a hook's Tensor.__mul__, itself a captured call); the
# monitor's rules fire online at fc2's activation and the ring writes the
# step's last K calls and the next N as a tensor dump. Known answer: a plain
# PrecisionDebugger tensor dump (L1) of step S from a separate run with the
# same seeds: its calls from the spike's (the first whose output exceeds
# 100 in magnitude; the activations are O(1) otherwise) K - 1 back to N on,
# in that order, each leaf's row and payload bitwise equal; nprobe replay
# reads the ring's dump.
def ring_run(name, spike, steps, ring=None, compiled=False, mode=None):
    from nprobe.torch import PrecisionDebugger
    torch.manual_seed(1)
    model = Net()
    opt = torch.optim.Adam(model.parameters(), lr=1e-2)
    state = {"step": 0}
    model.fc2.register_forward_hook(lambda m, a, out: out * 1e4 if state["step"] == spike else None)
    run_model = model
    if compiled:
        torch._dynamo.reset()   # each run compiles its own graphs (no cache limit reached)
        run_model = torch.compile(model, backend="aot_eager")
    out, cfg = os.path.join(tmp, name), os.path.join(tmp, name + ".json")
    dbg = mon = None
    with open(cfg, "w") as f:
        if ring:
            json.dump({"task": "monitor", "dump_path": out, "monitor": {
                "targets": ["fc", "act"], "anomaly_calls": ring[0], "anomaly_calls_after": ring[1],
                "alert": {"rules": [{"rule_name": "AnomalyTurbulence",
                                     "args": {"threshold": 49, "warmup": 3}}]}}}, f)
        else:
            json.dump({"task": "tensor", "dump_path": out, "level": "mix" if compiled else "L1",
                       "step": [spike]}, f)
    if ring:
        mon = TrainerMon(cfg, torch_compile=mode)
        mon.set_monitor(run_model, opt)
    else:
        dbg = PrecisionDebugger(cfg)
    g = torch.Generator().manual_seed(7)
    for st in range(steps):
        state["step"] = st
        if dbg:
            dbg.start(run_model)
        x, y = torch.randn(4, 16, generator=g), torch.randn(4, 8, generator=g)
        opt.zero_grad()
        torch.nn.functional.mse_loss(run_model(x), y).backward()
        opt.step()
        if dbg:
            dbg.stop()
            dbg.step()
    if mon:
        mon.stop()
    else:
        dbg.close()
    return mon


def dump_of(path):
    import h5py
    with h5py.File(path, "r") as f:
        calls = [r["call"].decode() for r in sorted(f["calls"][:], key=lambda r: int(r["seq"]))]
        ent = {}
        for r in f["entries"][:]:
            n = r["name"].decode()
            row = tuple(r[c].tobytes() if hasattr(r[c], "tobytes") else r[c]
                        for c in r.dtype.names if c != "seq")
            ent[n] = (r["call"].decode(), r["role"].decode(), float(max(abs(r["max"]), abs(r["min"]))),
                      row, f["data"][n][()].tobytes() if int(r["has_data"]) else None)
    return calls, ent


K, N = 3, 4
S = random.randint(4, 6)
rmon = ring_run("ring", S, S + 2, (K, N))
ring_run("ring_plain", S, S + 1)
an = rmon.anomaly or {}
check((an.get("step"), an.get("name"), an.get("metric")) == (S, "fc2", "activation"),
      f"ring: the anomaly online {an}, spike at {S}")
pc, pe = dump_of(os.path.join(tmp, "ring_plain", f"step{S}", "rank0", "dump.h5"))
spike_at = next((i for i, c in enumerate(pc) if any(
    e[0] == c and e[1] == "output" and e[2] > 100 for e in pe.values())), None)
want = pc[spike_at - K + 1:spike_at + N + 1] if spike_at is not None and spike_at >= K else None
ring_file = os.path.join(tmp, "ring", "anomaly_calls", f"step{S}", "rank0", "dump.h5")
rc, re_ = dump_of(ring_file) if os.path.exists(ring_file) else ([], {})
check(want is not None and rc == want, f"ring calls {rc}, the plain dump's {want} (spike call {spike_at})")
info = rmon.anomaly_calls or {}
check((info.get("before"), info.get("after")) == (K, N), f"ring info {info}")
check(sorted(os.listdir(os.path.join(tmp, "ring", "anomaly_calls"))) == [f"step{S}"],
      "ring: only the anomaly's step is written")
n_leaves = 0
for n, e in re_.items():
    check(n in pe and pe[n][3] == e[3] and pe[n][4] == e[4] and
          (e[4] is not None or e[1] == "kwargs"), f"ring leaf {n}: row and payload equal to the plain dump's")
    n_leaves += 1
check(n_leaves >= 2 * (K + N), f"ring leaves {n_leaves}")
kept = sum(len(e[4]) for n, e in re_.items() if e[0] in rc[:K] and e[4])
check(0 < info.get("bytes", 0) <= kept, f"ring memory {info.get('bytes')} of {kept} bytes kept")
r = subprocess.run([nprobe, "replay", os.path.join(tmp, "ring", "anomaly_calls")],
                   capture_output=True, text=True)
check(r.returncode == 0, f"nprobe replay of the ring's dump: {r.returncode} {r.stdout[-600:]} {r.stderr}")
print(f"ring: spike at step {S}, calls {rc}, {info.get('bytes')} bytes kept")

# The ring under torch.compile (backend aot_eager; docs/MONITOR.md "The ring
# under torch.compile"). "capture" (the default): the package's capture of a
# compiled model, the module rows around the compiled regions (the ring at
# level mix) and the API calls outside them (the loss); known answer: a
# plain PrecisionDebugger mix dump of the compiled model at step S (a
# separate run), its calls from the spike's (the first whose output exceeds
# 100: fc2's module row) K - 1 back to N on, every leaf byte-equal, no API
# row from inside a compiled region. "eager" (TrainerMon(torch_compile=
# "eager")): the compiled model runs uncompiled while the ring waits, and
# its dump is the eager ring's above, call for call and byte for byte.
# Before, a compiled model raised no anomaly online at all (the monitor's
# hooks went into dynamo's graphs, its module names carried _orig_mod).
# On torch < 2.13 (Debian 13's 2.6) "capture" is skipped, said: there
# Dynamo, tracing the hook's Tensor.__mul__ wrapper in the compiled region,
# raises InternalTorchDynamoError ('method_descriptor' object has no
# attribute '__module__', building a graph break's message), and aot_eager's
# runtime clones (Tensor.clone, Torch.clone) are captured as API rows
# (docs/TORCH.md, the 2.6 row).
t_compile = time.time()
tv = tuple(int(p) for p in torch.__version__.split("+")[0].split(".")[:2])
capture = tv >= (2, 13)
runs = []
if capture:
    runs.append((ring_run("ring_cc", S, S + 1, (K, N), compiled=True), "capture"))
    ring_run("ring_cplain", S, S + 1, compiled=True)
else:
    print(f"SKIP: the compiled ring's capture mode (ring_cc, ring_cplain and their checks): "
          f"torch {torch.__version__}'s Dynamo fails on the package's Tensor method wrappers "
          "in a compiled region (InternalTorchDynamoError) and its aot_eager runtime's clones "
          "are captured")
emon = ring_run("ring_ce", S, S + 1, (K, N), compiled=True, mode="eager")
runs.append((emon, "eager"))
for m, what in runs:
    an = m.anomaly or {}
    check((an.get("step"), an.get("name"), an.get("metric")) == (S, "fc2", "activation"),
          f"compiled ring ({what}): the anomaly online {an}, spike at {S}")
    check(((m.anomaly_calls or {}).get("before"), (m.anomaly_calls or {}).get("after")) == (K, N),
          f"compiled ring ({what}): {m.anomaly_calls}")
crc = []
if capture:
    cpc, cpe = dump_of(os.path.join(tmp, "ring_cplain", f"step{S}", "rank0", "dump.h5"))
    at = next((i for i, c in enumerate(cpc) if any(
        e[0] == c and e[1] == "output" and e[2] > 100 for e in cpe.values())), None)
    cwant = cpc[at - K + 1:at + N + 1] if at is not None and at >= K - 1 else None
    cfile = os.path.join(tmp, "ring_cc", "anomaly_calls", f"step{S}", "rank0", "dump.h5")
    crc, cre = dump_of(cfile) if os.path.exists(cfile) else ([], {})
    check(cwant is not None and crc == cwant and cwant[K - 1].startswith("Module.fc2."),
          f"compiled ring calls {crc}, the compiled plain dump's {cwant} (spike call {at})")
    check(all(c.startswith("Module.") or "mse_loss" in c for c in crc),
          f"compiled ring: only module rows and the loss's calls (no compiled region's API rows): {crc}")
    for n, e in cre.items():
        check(n in cpe and cpe[n][3] == e[3] and cpe[n][4] == e[4],
              f"compiled ring leaf {n}: row and payload equal to the compiled plain dump's")
    check(len(cre) >= 2 * (K + N), f"compiled ring leaves {len(cre)}")
efile = os.path.join(tmp, "ring_ce", "anomaly_calls", f"step{S}", "rank0", "dump.h5")
erc, ere = dump_of(efile) if os.path.exists(efile) else ([], {})
check(erc == rc and set(ere) == set(re_) and all(ere[n][3:] == re_[n][3:] for n in ere),
      f"compiled ring (eager): {erc} against the eager ring's {rc}")
print(f"compiled ring: capture {crc}; eager {len(erc)} calls as the eager ring's "
      f"({time.time() - t_compile:.1f} s)")

print("torch monitor:", "FAIL" if fail else "ok", f"(spike at step {s})")
sys.exit(1 if fail else 0)
