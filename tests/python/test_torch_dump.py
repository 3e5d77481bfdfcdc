"""test_torch_dump.py - nprobe.torch.PrecisionDebugger on plain PyTorch
models (tests/python/torch_models.py): names, statistics against float64,
payloads and crc32 against the tensors PyTorch computed, bf16, L0/L1/mix,
overflow_check, positional scalars, `nprobe dump -- python3`, and a killed
run. Run through pyrun.sh; exits 1 on any failed check."""
import json
import os
import signal
import subprocess
import sys
import tempfile
import zlib

import h5py
import numpy as np
import torch
import torch.nn.functional as F

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
import torch_models  # noqa: E402
from nprobe.torch import PrecisionDebugger  # noqa: E402

FAILS = []


def check(cond, what):
    if not cond:
        FAILS.append(what)
        print("FAIL:", what)


def cfg(path, **kw):
    with open(path, "w") as f:
        json.dump(kw, f)
    return path


def entries(path):
    with h5py.File(path, "r") as f:
        e = f["entries"][:]
        calls = f["calls"][:]
        attrs = {k: (v.decode() if isinstance(v, bytes) else v) for k, v in f.attrs.items()}
        data = {k: np.array(v) for k, v in f["data"].items()} if "data" in f else {}
    rows = {r["name"].decode(): r for r in e}
    return rows, calls, attrs, data


def keep(seen, key):
    """A forward hook that keeps the module's first output (returns None:
    the output itself is left alone)."""
    def hook(mod, inputs, out):
        seen.setdefault(key, out.detach().clone())
    return hook


def stats64(t):
    x = t.detach().double().reshape(-1)
    x = x[torch.isfinite(x)]
    return float(x.max()), float(x.min()), float(x.mean()), float(x.norm())


def train(model, data, d, steps=1, opt=None):
    opt = opt or torch.optim.SGD(model.parameters(), lr=0.1)
    for _ in range(steps):
        d.start(model)
        x, y = data
        loss = F.cross_entropy(model(x).reshape(-1, 10 if y.dim() == 1 else 32), y.reshape(-1))
        loss.backward()
        opt.step()
        opt.zero_grad()
        d.stop()
        d.step()
    d.close()


def gpt_data():
    g = torch.Generator().manual_seed(3)
    idx = torch.randint(0, 32, (2, 8), generator=g)
    return idx, torch.roll(idx, -1, 1)


def test_gpt_statistics_mix(tmp):
    torch.manual_seed(0)
    m = torch_models.GPT()
    seen = {}
    m.wte.register_forward_hook(keep(seen, "wte"))
    d = PrecisionDebugger(cfg(f"{tmp}/s.json", task="statistics", dump_path=f"{tmp}/gs",
                              level="mix", step=[0, 1]))
    train(m, gpt_data(), d, steps=3)
    check(not os.path.exists(f"{tmp}/gs/step2"), "step 2 is not selected")
    rows, calls, attrs, _ = entries(f"{tmp}/gs/step0/rank0/dump.h5")
    check(attrs["framework"] == "pytorch" and attrs["complete"] == 1, f"root attributes {attrs}")
    names = {c["call"].decode(): c for c in calls}
    for want in ("Functional.embedding.0.forward", "Tensor.__add__.0.forward",
                 "Functional.layer_norm.0.forward", "Functional.linear.0.forward",
                 "Tensor.split.0.forward", "Functional.scaled_dot_product_attention.1.forward",
                 "Functional.gelu.1.backward", "Functional.linear.8.backward",
                 "Module.h.0.attn.Attn.forward.0", "Module.h.1.Block.backward.0",
                 "Module.h.0.attn.c_attn.Linear"):
        check(want in names, f"call {want} in the GPT dump")
    check("Torch.ones_like.0.forward" not in names, "autograd's own calls are not captured")
    check("Tensor.add_.0.forward" in names, "the optimizer's in-place update is captured")
    c = names.get("Functional.linear.0.forward")
    check(c is not None and c["parent"].decode() == "Module.h.0.attn.c_attn.Linear.forward.0",
          "parent of a module's API call")
    check(c is not None and c["callsite"].decode().startswith("torch_models.py:"),
          "callsite in the user's code")
    b = names.get("Functional.layer_norm.0.backward")
    check(b is not None and b["parent"].decode() == "Module.h.0.ln_1.LayerNorm.backward.0",
          "parent of a backward call is the module's backward")
    r = rows.get("Module.wte.Embedding.forward.0.output.0")
    if r is None:
        check(False, "wte output row")
    else:
        mx, mn, mean, norm = stats64(seen["wte"])
        check(abs(r["max"] - mx) == 0 and abs(r["min"] - mn) == 0, "embedding max/min exact")
        check(abs(r["mean"] - mean) <= 1e-12 * max(1, abs(mean)) and
              abs(r["norm"] - norm) <= 1e-12 * norm, "embedding mean/norm in float64")
    pg = rows.get("Module.h.0.attn.c_attn.Linear.parameters_grad.weight")
    check(pg is not None and pg["numel"] == 48 * 16, "parameter gradient row")
    check(rows.get("Functional.layer_norm.0.forward.kwargs.eps") is not None and
          abs(rows["Functional.layer_norm.0.forward.kwargs.eps"]["max"] - 1e-5) < 1e-20,
          "layer_norm eps passed positionally by nn.LayerNorm is a kwargs row")


def test_cnn_tensor_l1(tmp):
    torch.manual_seed(1)
    m = torch_models.CNN()
    seen = {}
    m.conv1.register_forward_hook(keep(seen, "c1"))
    x = torch.randn(4, 1, 8, 8)
    y = torch.randint(0, 10, (4,))
    d = PrecisionDebugger(cfg(f"{tmp}/t.json", task="tensor", dump_path=f"{tmp}/ct",
                              level="L1", step=[0]))
    d.start(m)
    loss = F.cross_entropy(m(x), y)
    loss.backward()
    gw = m.conv1.weight.grad.detach().clone()
    d.stop()
    d.step()
    d.close()
    rows, calls, _, data = entries(f"{tmp}/ct/step0/rank0/dump.h5")
    check(not any(c["kind"] == b"module" for c in calls), "L1 has no module calls")
    out = data.get("Functional.conv2d.0.forward.output.0")
    check(out is not None and np.array_equal(out, seen["c1"].numpy()), "conv2d output payload")
    g = data.get("Functional.conv2d.0.backward.output.1")
    check(g is not None and np.array_equal(g, gw.numpy()), "conv2d weight gradient payload")
    p = rows.get("Functional.conv2d.0.forward.kwargs.padding.0")
    check(p is not None and p["max"] == 1.0, "conv2d positional padding is a kwargs row")
    check("Functional.max_pool2d.1.backward.input.0" in rows, "max_pool2d backward row")


def test_md5_bf16_l0(tmp):
    torch.manual_seed(2)
    m = torch_models.CNN().to(torch.bfloat16)
    seen = {}
    m.fc.register_forward_hook(keep(seen, "fc"))
    x = torch.randn(4, 1, 8, 8).to(torch.bfloat16)
    for task, lvl in (("md5", "L1"), ("tensor", "L0")):
        d = PrecisionDebugger(cfg(f"{tmp}/{task}.json", task=task, dump_path=f"{tmp}/{task}",
                                  level=lvl, step=[0]))
        d.start(m)
        m(x).float().sum().backward()
        d.stop()
        d.step()
        d.close()
    rows, _, attrs, _ = entries(f"{tmp}/md5/step0/rank0/dump.h5")
    check(attrs["precision"] == "bf16", f"precision detected from the parameters: {attrs}")
    r = rows.get("Functional.linear.0.forward.output.0")
    want = zlib.crc32(seen["fc"].float().numpy().tobytes()) & 0xFFFFFFFF
    check(r is not None and r["dtype"] == b"bfloat16" and int(r["crc32"]) == want,
          "md5: crc32 of the stored float32 bytes of a bf16 tensor")
    rows, calls, _, data = entries(f"{tmp}/tensor/step0/rank0/dump.h5")
    check(all(c["kind"] == b"module" for c in calls), "L0 has module calls only")
    o = data.get("Module.fc.Linear.forward.0.output.0")
    check(o is not None and np.array_equal(o, seen["fc"].float().numpy()),
          "bf16 payload widened to float32 exactly")


def test_overflow_and_positional_eps(tmp):
    d = PrecisionDebugger(cfg(f"{tmp}/e.json", task="statistics", dump_path=f"{tmp}/ep",
                              level="L1"))
    d.start()
    F.layer_norm(torch.ones(4), (4,), None, None, 1e-3)
    d.stop()
    d.close()
    rows, _, _, _ = entries(f"{tmp}/ep/step0/rank0/dump.h5")
    r = rows.get("Functional.layer_norm.0.forward.kwargs.eps")
    check(r is not None and abs(r["max"] - 1e-3) < 1e-18, "positional eps is a kwargs row")
    d = PrecisionDebugger(cfg(f"{tmp}/o.json", task="overflow_check", dump_path=f"{tmp}/of",
                              level="L1"))
    w = torch.ones(4, requires_grad=True)
    for step in range(2):
        d.start()
        x = torch.tensor([1.0, 2.0, float("inf") if step == 1 else 3.0, 4.0])
        F.layer_norm(x, (4,), w, None, 1e-3).sum()
        d.stop()
        d.step()
    d.close()
    check(not os.path.exists(f"{tmp}/of/step0/rank0/dump.h5"), "no overflow, no file")
    rows, _, _, _ = entries(f"{tmp}/of/step1/rank0/dump.h5")
    r = rows.get("Functional.layer_norm.0.forward.input.0")
    check(r is not None and r["posinf_count"] == 1, "the overflowing input is kept")
    for leaf in ("input.1", "kwargs.eps", "output.0"):
        check(f"Functional.layer_norm.0.forward.{leaf}" in rows,
              f"overflow_check keeps the whole call: {leaf}")


def near(r, t, what):
    """Row r's statistics against tensor t's, computed in float64 here."""
    if r is None:
        check(False, f"{what}: no row")
        return
    mx, mn, mean, norm = stats64(t)
    ok = all(abs(a - b) <= 1e-6 * max(1.0, abs(b)) for a, b in
             ((r["max"], mx), (r["min"], mn), (r["mean"], mean), (r["norm"], norm)))
    check(ok, f"{what}: {r['max']} {r['min']} {r['mean']} {r['norm']} vs {mx} {mn} {mean} {norm}")


def test_inplace_and_module_grads(tmp):
    """In-place methods: input before the write, output after, backward
    from the node the write made; the optimizer's in-place update; a
    module's gradients for its inputs (its own contribution where the input
    has another consumer); Conv + ReLU(inplace=True) under the hooks."""
    torch.manual_seed(5)
    lin = torch.nn.Linear(4, 4)
    m = torch.nn.ModuleDict({"lin": lin})
    opt = torch.optim.AdamW(lin.parameters(), lr=0.1)
    d = PrecisionDebugger(cfg(f"{tmp}/i.json", task="statistics", dump_path=f"{tmp}/ip",
                              level="mix", step=[0]))
    x = torch.randn(3, 4, requires_grad=True)
    w_before = lin.weight.detach().clone()
    b_before = lin.bias.detach().clone()
    d.start(m)
    h = x * 1.0
    h_before = h.detach().clone()
    h.mul_(3.0)
    h_after = h.detach().clone()
    y = h + lin(h)                      # h: a residual input of `lin`
    (y * y).sum().backward()
    opt.step()
    d.stop()
    d.step()
    d.close()
    rows, calls, _, _ = entries(f"{tmp}/ip/step0/rank0/dump.h5")
    near(rows.get("Tensor.mul_.0.forward.input.0"), h_before, "mul_ input before the write")
    near(rows.get("Tensor.mul_.0.forward.output.0"), h_after, "mul_ output after the write")
    g_y = 2 * (h_after + h_after @ w_before.t() + b_before)  # d(sum y^2)/dy
    g_h = g_y + g_y @ w_before                               # arriving at mul_'s output
    near(rows.get("Tensor.mul_.0.backward.input.0"), g_h, "mul_ backward: gradient arriving")
    near(rows.get("Tensor.mul_.0.backward.output.0"), 3.0 * g_h, "mul_ backward: produced")
    near(rows.get("Module.lin.Linear.backward.0.input.0"), g_y, "module backward input")
    near(rows.get("Module.lin.Linear.backward.0.output.0"), g_y @ w_before,
         "module backward output: the module's own contribution (residual left out)")
    names = {c["call"].decode() for c in calls}
    check(any(n.startswith("Tensor.addcdiv_.") for n in names), "AdamW's addcdiv_ is captured")
    near(rows.get("Tensor.mul_.1.forward.input.0"), w_before, "AdamW's decay reads the weight "
         "before the update")
    # Conv + ReLU(inplace=True): torch's full backward hooks refuse it
    cnn = torch.nn.Sequential(torch.nn.Conv2d(1, 2, 3), torch.nn.ReLU(inplace=True),
                              torch.nn.Flatten(), torch.nn.Linear(18, 2))
    d = PrecisionDebugger(cfg(f"{tmp}/r.json", task="statistics", dump_path=f"{tmp}/rl",
                              level="mix", step=[0]))
    d.start(cnn)
    cnn(torch.randn(2, 1, 5, 5)).sum().backward()
    d.stop()
    d.close()
    rows, calls, _, _ = entries(f"{tmp}/rl/step0/rank0/dump.h5")
    check("Module.1.ReLU.forward.0.output.0" in rows and
          "Module.0.Conv2d.backward.0.input.0" in rows, "Conv + ReLU(inplace=True) dumped")


TRAIN = r'''
import os, sys, torch, torch.nn.functional as F
sys.path.insert(0, sys.argv[1])
import torch_models
from nprobe.torch import PrecisionDebugger
torch.manual_seed(0)
m = torch_models.GPT()
opt = torch.optim.AdamW(m.parameters(), 1e-3)
d = PrecisionDebugger(config_path="ignored-when-NPROBE_DUMP_CONFIG-is-set.json")
idx = torch.randint(0, 32, (2, 8))
for step in range(4):
    d.start(m)
    loss = F.cross_entropy(m(idx).reshape(-1, 32), idx.reshape(-1))
    loss.backward(); opt.step(); opt.zero_grad()
    d.stop(); d.step()
    if step == int(sys.argv[2]):
        os.kill(os.getpid(), 9)
'''


def test_nprobe_dump_and_kill(tmp):
    script = f"{tmp}/train.py"
    with open(script, "w") as f:
        f.write(TRAIN)
    here = os.path.dirname(os.path.abspath(__file__))
    c = cfg(f"{tmp}/w.json", task="statistics", dump_path=f"{tmp}/wd", level="mix")
    nb = os.environ["NPROBE_BIN"]
    p = subprocess.run([nb, "dump", "-c", c, "--", sys.executable, script, here, "99"],
                       capture_output=True, text=True)
    check(p.returncode == 0, f"nprobe dump -- python3 train.py: exit {p.returncode} {p.stderr}")
    check("nprobe dump summary" in p.stdout and
          any(ln.split() == ["steps", "4"] for ln in p.stdout.splitlines()),
          f"the dump summary: {p.stdout!r}")
    env = dict(os.environ, NPROBE_DUMP_CONFIG=cfg(f"{tmp}/k.json", task="statistics",
                                                  dump_path=f"{tmp}/kd", level="mix"))
    p = subprocess.run([sys.executable, script, here, "1"], env=env, capture_output=True)
    check(p.returncode == -signal.SIGKILL, f"the run was killed ({p.returncode})")
    for s in (0, 1):
        path = f"{tmp}/kd/step{s}/rank0/dump.h5"
        ok = os.path.exists(path)
        if ok:
            with h5py.File(path, "r") as f:
                ok = int(f.attrs["complete"]) == 1 and len(f["entries"]) > 100
        check(ok, f"finished step {s} of a killed run intact")


def main():
    torch.set_num_threads(1)
    with tempfile.TemporaryDirectory() as tmp:
        for t in (test_gpt_statistics_mix, test_cnn_tensor_l1, test_md5_bf16_l0,
                  test_overflow_and_positional_eps, test_inplace_and_module_grads,
                  test_nprobe_dump_and_kill):
            os.makedirs(f"{tmp}/{t.__name__}")
            try:
                t(f"{tmp}/{t.__name__}")
            except Exception as e:  # a crash is a failed check, the others still run
                import traceback
                traceback.print_exc()
                check(False, f"{t.__name__} raised {e!r}")
    print(f"{len(FAILS)} failed")
    return 1 if FAILS else 0


if __name__ == "__main__":
    sys.exit(main())
