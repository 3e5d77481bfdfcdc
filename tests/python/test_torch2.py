"""test_torch2.py - the package on PyTorch 2.x as users write it (issue 23):
torch's own F.scaled_dot_product_attention with its arguments,
torch.amp.GradScaler("cpu") under fp16 autocast on CPU (the loss scale in
the dump is the scaler's), activation checkpointing (torch.utils.checkpoint,
use_reentrant False and True: the dump of a checkpointed model has the rows
of the plain model, each once, with equal values; the recomputed calls are
marked), strided tensors (channels_last, transposed, expanded, offset
slices: statistics against float64 on the logical values, payloads and
crc32 against the logical tensor), and the APIs added from msprobe 26's
list. Run through pyrun.sh; exits 1 on any failed check."""
import json
import os
import sys
import tempfile
import warnings
import zlib

import h5py
import numpy as np
import torch
import torch.nn as nn
import torch.nn.functional as F
from torch.utils.checkpoint import checkpoint

sys.path.insert(0, os.path.join(os.path.dirname(os.path.abspath(__file__)), ".."))
from nptest import check, finish  # noqa: E402
from nprobe.torch import PrecisionDebugger  # noqa: E402


def cfg(path, **kw):
    with open(path, "w") as f:
        json.dump(kw, f)
    return path


def load(path):
    with h5py.File(path, "r") as f:
        rows = {r["name"].decode(): r for r in f["entries"][:]}
        calls = [(c["call"].decode(), c["parent"].decode(), c["callsite"].decode())
                 for c in f["calls"][:]]
        attrs = {k: (v.decode() if isinstance(v, bytes) else v) for k, v in f.attrs.items()}
        data = {k: np.array(v) for k, v in f["data"].items()} if "data" in f else {}
    return rows, calls, attrs, data


def stats64(t):
    x = t.detach().double().reshape(-1)
    return float(x.max()), float(x.min()), float(x.mean()), float(x.norm())


def close(a, b, rel=1e-12):
    return abs(a - b) <= rel * max(1.0, abs(b))


# ---- scaled_dot_product_attention ------------------------------------------

def test_sdpa(tmp):
    F_sdpa = F.scaled_dot_product_attention
    d = PrecisionDebugger(cfg(f"{tmp}/a.json", task="tensor", dump_path=f"{tmp}/sdpa",
                              level="L1"))
    g = torch.Generator().manual_seed(5)
    q, k, v = (torch.randn(2, 2, 4, 8, generator=g, requires_grad=True) for _ in range(3))
    mask = torch.randn(4, 4, generator=g)
    d.start()
    check(getattr(F.scaled_dot_product_attention, "_nprobe_orig", None) is
          torch._C._nn.scaled_dot_product_attention,
          "torch 2.x: the wrapper runs torch's own scaled_dot_product_attention, not the shim")
    y0 = F.scaled_dot_product_attention(q, k, v, mask, 0.0, False, scale=0.25)   # positional
    y1 = F.scaled_dot_product_attention(q, k, v, is_causal=True, dropout_p=0.0)
    y2 = F.scaled_dot_product_attention(q, k, v, attn_mask=mask > 0)
    (y0 + y1 + y2).sum().backward()
    d.stop()
    d.close()
    rows, calls, _, data = load(f"{tmp}/sdpa/step0/rank0/dump.h5")
    names = [c[0] for c in calls]
    for i in range(3):
        check(f"Functional.scaled_dot_product_attention.{i}.forward" in names and
              f"Functional.scaled_dot_product_attention.{i}.backward" in names,
              f"SDPA call {i}: one forward and one backward row")
    check(not any(n.startswith(("Torch.matmul", "Torch.softmax", "Tensor.masked_fill"))
                  for n in names), "the native SDPA is one call (no inner rows)")
    p = "Functional.scaled_dot_product_attention."

    def kw(i, key):
        r = rows.get(f"{p}{i}.forward.kwargs.{key}")
        return None if r is None else float(r["max"])
    check(kw(0, "scale") == 0.25 and kw(0, "is_causal") == 0.0 and kw(0, "dropout_p") == 0.0,
          f"positional dropout_p/is_causal named from the multi-line docstring: "
          f"{[kw(0, x) for x in ('scale', 'is_causal', 'dropout_p')]}")
    check(f"{p}0.forward.kwargs.5" not in rows, "no positional argument named by its index")
    check(kw(1, "is_causal") == 1.0 and kw(1, "scale") is None, "is_causal=True; scale=None left out")
    m0 = data.get(f"{p}0.forward.input.3")
    check(m0 is not None and np.array_equal(m0, mask.numpy()), "the float attn_mask is input.3")
    m2 = rows.get(f"{p}2.forward.input.3")
    check(m2 is not None and m2["dtype"] == b"bool", "the bool attn_mask keyword is input.3")
    want = torch.nn.functional.scaled_dot_product_attention(q, k, v, mask, scale=0.25)
    out = data.get(f"{p}0.forward.output.0")
    check(out is not None and np.array_equal(out, want.detach().numpy()), "SDPA output payload")


# ---- torch.amp.GradScaler with fp16 autocast on CPU -------------------------

def test_grad_scaler(tmp):
    torch.manual_seed(0)
    m = nn.Sequential(nn.Linear(8, 8), nn.ReLU(), nn.Linear(8, 2))
    opt = torch.optim.SGD(m.parameters(), lr=0.1)
    # growth every step: the scale differs per step
    sc = torch.amp.GradScaler("cpu", init_scale=2.0 ** 10, growth_interval=1)
    d = PrecisionDebugger(cfg(f"{tmp}/g.json", task="statistics", dump_path=f"{tmp}/gs",
                              level="mix", step=[0, 1, 2]))
    x = torch.randn(4, 8)
    want, grads = [], []
    with warnings.catch_warnings():
        warnings.simplefilter("error", DeprecationWarning)   # no deprecated autocast query
        warnings.filterwarnings("ignore", category=DeprecationWarning, module="h5py")
        for _ in range(3):
            d.start(m)
            want.append(sc.get_scale())
            with torch.autocast("cpu", dtype=torch.float16):
                h = m(x)
                check(h.dtype == torch.float16, "fp16 autocast on CPU")
                loss = h.float().pow(2).mean()
            sc.scale(loss).backward()
            sc.unscale_(opt)
            grads.append(m[0].weight.grad.detach().double().norm().item())
            sc.step(opt)
            sc.update()
            opt.zero_grad()
            d.stop()
            d.step()
    d.close()
    check(want == [1024.0, 2048.0, 4096.0], f"the scaler grew per step: {want}")
    for s in range(3):
        rows, _, attrs, _ = load(f"{tmp}/gs/step{s}/rank0/dump.h5")
        check(attrs["loss_scale"] == want[s], f"step {s}: loss_scale {attrs['loss_scale']}, "
              f"the scaler's {want[s]}")
        check(attrs["precision"] == "fp16", f"step {s}: precision {attrs['precision']}")
        pg = rows.get("Module.0.Linear.parameters_grad.weight")
        # recorded as computed (scaled); / loss_scale = the gradient unscale_ made
        check(pg is not None and abs(pg["norm"] / attrs["loss_scale"] - grads[s]) <=
              1e-6 * grads[s], f"step {s}: the parameter gradient carries the scale")
        r = rows.get("Functional.linear.0.forward.output.0")
        check(r is not None and r["dtype"] == b"float16", "the autocast output is fp16")


def test_grad_scaler_skip(tmp):
    """GradScaler at its default init scale 65536: the fp16 run's weight
    gradient overflows at step 0, the scaler skips that step (scale halved),
    step 1 runs. Against an fp32 run of the same model and batch, compare
    names no culprit in step 0 and says the step was skipped (the dump's
    loss_scale); in step 1 the weights differ by the skipped update, and the
    culprit says the weights parted."""
    import subprocess

    def run(prec):
        torch.manual_seed(0)
        m = nn.Sequential(nn.Linear(16, 32), nn.ReLU(), nn.Linear(32, 4))
        x, y = torch.randn(8, 16), torch.randn(8, 4)
        opt = torch.optim.SGD(m.parameters(), lr=0.05)
        sc = torch.amp.GradScaler("cpu") if prec == "fp16" else None
        d = PrecisionDebugger(cfg(f"{tmp}/s{prec}.json", task="tensor", dump_path=f"{tmp}/s{prec}",
                                  level="mix", step=[0, 1]))
        scales, finite = [], []
        for _ in range(2):
            opt.zero_grad()
            d.start(m)
            with torch.autocast("cpu", dtype=torch.float16, enabled=sc is not None):
                loss = F.mse_loss(m(x).float(), y) * 4
            (sc.scale(loss) if sc else loss).backward()
            d.stop()
            finite.append(all(bool(p.grad.isfinite().all()) for p in m.parameters()))
            if sc:
                scales.append(sc.get_scale())
                sc.step(opt)
                sc.update()
            else:
                opt.step()
            d.step()
        d.close()
        return scales, finite, sc.get_scale() if sc else None

    run("fp32")
    scales, finite, last = run("fp16")
    # the scaler's own account: step 0 overflowed and was skipped, step 1 ran
    check(scales == [65536.0, 32768.0] and last == 32768.0 and finite == [False, True],
          f"GradScaler skipped step 0 only: scales {scales} -> {last}, finite grads {finite}")
    for s in range(2):
        _, _, attrs, _ = load(f"{tmp}/sfp16/step{s}/rank0/dump.h5")
        check(attrs["loss_scale"] == scales[s], f"step {s}: loss_scale {attrs['loss_scale']}")
    for s, want in ((0, 0), (1, 1)):
        out = f"{tmp}/srep{s}"
        p = subprocess.run([os.environ["NPROBE_BIN"], "compare", "-b", f"{tmp}/sfp32", "-c",
                            f"{tmp}/sfp16", "--step", str(s), "-o", out, "--format", "json"],
                           capture_output=True, text=True)
        check(p.returncode == want, f"step {s}: compare exit {p.returncode}, want {want}\n"
              + p.stdout + p.stderr)
        j = json.load(open([f"{out}/{f}" for f in os.listdir(out) if f.endswith(".json")][0]))
        if s == 0:
            rows = [r for r in j["rows"] if "loss scaler skips" in (r[j["headers"].index("Reason")] or "")]
            check(not j.get("first_culprit") and j["summary"].get("error", 0) == 0 and rows and
                  "Step skipped by the cmp's loss scaler" in j["inputs"]["notes"] and
                  j["inputs"]["cmp_run"]["loss_scale"] == 65536,
                  f"step 0: the skipped step said as such, no culprit: {j.get('first_culprit')}, "
                  f"{j['summary']}, {len(rows)} overflow rows, notes {j['inputs']['notes'][:300]}")
        else:
            c = j.get("first_culprit") or {}
            check("weights parted" in (c.get("reason") or ""),
                  f"step 1: the culprit says the weights parted: {c}")


# ---- activation checkpointing -------------------------------------------------

class Inner(nn.Module):
    def __init__(self):
        super().__init__()
        self.fc = nn.Linear(6, 6)
        self.ln = nn.LayerNorm(6)

    def forward(self, x):
        return self.ln(F.gelu(self.fc(x)) + x)


class CkModel(nn.Module):
    def __init__(self, mode):
        super().__init__()
        self.mode = mode
        self.a = nn.Linear(6, 6)
        self.b = Inner()
        self.c = nn.Linear(6, 3)

    def forward(self, x):
        x = torch.relu(self.a(x))
        if self.mode == "plain":
            x = self.b(x)
        else:
            x = checkpoint(self.b, x, use_reentrant=self.mode == "reentrant")
        return self.c(torch.tanh(x))


def ck_run(tmp, mode, grad_api=False):
    torch.manual_seed(7)
    m = CkModel(mode)
    x = torch.randn(5, 6)
    d = PrecisionDebugger(cfg(f"{tmp}/ck_{mode}{grad_api}.json", task="statistics",
                              dump_path=f"{tmp}/ck_{mode}{grad_api}", level="mix"))
    d.start(m)
    loss = m(x).pow(2).mean()
    if grad_api:   # autograd.grad: nprobe does not pause it as it pauses backward()
        torch.autograd.grad(loss, list(m.parameters()))
    else:
        loss.backward()
    F.gelu(x)                  # after the backward: gelu.1 (gelu.0 is in the region)
    d.stop()
    d.close()
    return load(f"{tmp}/ck_{mode}{grad_api}/step0/rank0/dump.h5")


def test_checkpoint(tmp):
    bases = {ga: ck_run(tmp, "plain", ga) for ga in (False, True)}
    for mode, grad_api in (("nonreentrant", False), ("nonreentrant", True), ("reentrant", False)):
        base_rows, base_calls, _, _ = bases[grad_api]
        base_names = [c[0] for c in base_calls]
        check(len(base_names) == len(set(base_names)), "plain run: call names unique")
        rows, calls, _, _ = ck_run(tmp, mode, grad_api)
        what = f"checkpoint {mode}{' autograd.grad' if grad_api else ''}"
        names = [c[0] for c in calls]
        check(len(names) == len(set(names)), f"{what}: no duplicate call rows")
        check(sorted(names) == sorted(base_names),
              f"{what}: the calls of the plain model, each once: extra "
              f"{sorted(set(names) - set(base_names))}, missing "
              f"{sorted(set(base_names) - set(names))}")
        check("Functional.gelu.1.forward" in names and "Functional.gelu.2.forward" not in names,
              f"{what}: the call after the backward keeps its number (1)")
        check(sorted(rows) == sorted(base_rows), f"{what}: the rows of the plain model")
        bad = [n for n in rows if n in base_rows and not (
            close(float(rows[n]["max"]), float(base_rows[n]["max"]), 1e-6) and
            close(float(rows[n]["norm"]), float(base_rows[n]["norm"]), 1e-6))]
        check(not bad, f"{what}: every row equals the plain run's: {bad[:4]}")
        marked = sorted(c[0] for c in calls if c[2].startswith("(recomputed)"))
        if mode == "reentrant":
            # the backward rows of the region come from its recomputed graph
            want = ["Functional.gelu.0.backward", "Functional.layer_norm.0.backward",
                    "Functional.linear.1.backward", "Module.b.Inner.backward.0",
                    "Module.b.fc.Linear.backward.0", "Module.b.ln.LayerNorm.backward.0",
                    "Tensor.__add__.0.backward"]
            check(marked == want, f"{what}: the recomputed calls' backward rows are "
                  f"marked: {marked}")
            site = {c[0]: c[2] for c in calls}
            check(site.get("Functional.linear.1.backward", "").endswith(
                site.get("Functional.linear.1.forward", "?")),
                f"{what}: the marked callsite is the forward's")
            parent = {c[0]: c[1] for c in calls}
            check(parent.get("Functional.linear.1.backward") == "Module.b.fc.Linear.backward.0",
                  f"{what}: the recomputed call's parent")
        else:
            check(marked == [], f"{what}: the recompute leaves no row, nothing marked: {marked}")


# ---- strided tensors ------------------------------------------------------------

def test_strided(tmp):
    g = torch.Generator().manual_seed(11)
    base = torch.randn(3, 4, 5, 6, generator=g)
    cases = {
        "channels_last": base.contiguous(memory_format=torch.channels_last),
        "transposed": base.transpose(1, 3),
        "expanded": torch.randn(4, 1, 6, generator=g).expand(4, 5, 6),
        "broadcast_row": torch.randn(6, generator=g).expand(3, 6),
        "offset_slice": base[1:, 2:, ::2, 1:5],
        "offset_1d": torch.randn(40, generator=g)[7:31:3],
        "bf16_transposed": base.to(torch.bfloat16).permute(3, 1, 0, 2),
        "fp16_offset": base.to(torch.float16)[2, 1:3],
        "f64_channels_last": base.double().contiguous(memory_format=torch.channels_last),
        "int_expanded": torch.arange(5).expand(3, 5),
    }
    for t in cases.values():
        check(not t.is_contiguous() or t.storage_offset() > 0 or
              t.is_contiguous(memory_format=torch.channels_last), "the cases are strided")
    conv = nn.Conv2d(4, 3, 3, padding=1).to(memory_format=torch.channels_last)
    cl_in = torch.randn(2, 4, 5, 5, generator=g).contiguous(memory_format=torch.channels_last)
    for task in ("statistics", "tensor", "md5"):
        d = PrecisionDebugger(cfg(f"{tmp}/s{task}.json", task=task, dump_path=f"{tmp}/st_{task}",
                                  level="L1"))
        d.start()
        for t in cases.values():
            torch.clone(t)                 # input.0: the strided tensor as it is
        y = conv(cl_in)
        d.stop()
        d.close()
        check(y.is_contiguous(memory_format=torch.channels_last), "the conv output is channels_last")
        rows, _, _, data = load(f"{tmp}/st_{task}/step0/rank0/dump.h5")
        every = dict(cases)
        every["conv_out"] = y
        names = {k: f"Torch.clone.{i}.forward.input.0" for i, k in enumerate(cases)}
        names["conv_out"] = "Functional.conv2d.0.forward.output.0"
        for k, t in every.items():
            r = rows.get(names[k])
            if r is None:
                check(False, f"{task} {k}: row {names[k]}")
                continue
            check(tuple(int(s) for s in r["shape"][:t.dim()]) == tuple(t.shape),
                  f"{task} {k}: the logical shape")
            mx, mn, mean, norm = stats64(t)
            check(r["max"] == mx and r["min"] == mn and close(float(r["mean"]), mean) and
                  close(float(r["norm"]), norm),
                  f"{task} {k}: statistics {r['max']} {r['min']} {r['mean']} {r['norm']} vs "
                  f"float64 {mx} {mn} {mean} {norm}")
            # stored as FORMAT.md says: bf16/fp16 widened to float32, float64
            # as it is, integers as int64
            want = (t if t.dtype == torch.float64 else
                    t.float() if t.is_floating_point() else t.long()).detach()
            if task == "tensor":
                p = data.get(names[k])
                check(p is not None and np.array_equal(p, want.numpy()),
                      f"tensor {k}: the payload is the logical tensor")
            if task == "md5":
                crc = zlib.crc32(want.contiguous().numpy().tobytes()) & 0xFFFFFFFF
                check(int(r["crc32"]) == crc, f"md5 {k}: crc32 of the logical tensor's bytes")


# ---- APIs added from msprobe's list ------------------------------------------------

def test_added_apis(tmp):
    d = PrecisionDebugger(cfg(f"{tmp}/x.json", task="tensor", dump_path=f"{tmp}/api",
                              level="L1"))
    g = torch.Generator().manual_seed(13)
    x = torch.randn(3, 4, generator=g)
    d.start()
    a = x.clone()
    F.relu_(a)                                   # Functional in-place
    b = x.clone()
    torch.sigmoid_(b)                            # Torch in-place
    c = x.arctan2(x.flip(0))                     # Tensor method
    e = torch.hypot(x, x)                        # Torch
    m = x.bool()                                 # Tensor alias/conversion
    f = torch.full((2, 2), 3.0)                  # a factory with no tensor input
    d.stop()
    d.close()
    rows, calls, _, data = load(f"{tmp}/api/step0/rank0/dump.h5")
    names = [c_[0] for c_ in calls]
    for n in ("Functional.relu_.0.forward", "Torch.sigmoid_.0.forward",
              "Tensor.arctan2.0.forward", "Torch.hypot.0.forward", "Tensor.bool.0.forward",
              "Torch.full.0.forward"):
        check(n in names, f"added API {n} captured")
    i = data.get("Functional.relu_.0.forward.input.0")
    o = data.get("Functional.relu_.0.forward.output.0")
    check(i is not None and o is not None and np.array_equal(i, x.numpy()) and
          np.array_equal(o, a.numpy()), "F.relu_: the input before the write, the output after")
    o = data.get("Torch.sigmoid_.0.forward.output.0")
    check(o is not None and np.array_equal(o, b.numpy()), "torch.sigmoid_ output after the write")
    o = data.get("Tensor.arctan2.0.forward.output.0")
    check(o is not None and np.array_equal(o, c.numpy()), "Tensor.arctan2 output")
    o = data.get("Torch.hypot.0.forward.output.0")
    check(o is not None and np.array_equal(o, e.numpy()), "torch.hypot output")
    o = data.get("Tensor.bool.0.forward.output.0")
    check(o is not None and np.array_equal(o, m.numpy()), "Tensor.bool output")
    o = data.get("Torch.full.0.forward.output.0")
    check(o is not None and np.array_equal(o, f.numpy()), "torch.full output")


def main():
    with tempfile.TemporaryDirectory() as tmp:
        for t in (test_sdpa, test_grad_scaler, test_grad_scaler_skip, test_checkpoint, test_strided, test_added_apis):
            print("--", t.__name__)
            t(tmp)
    return finish()


if __name__ == "__main__":
    sys.exit(main())
