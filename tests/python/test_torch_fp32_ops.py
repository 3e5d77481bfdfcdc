"""test_torch_fp32_ops.py - per-op precision overrides in the PyTorch
package (docs/TORCH.md, docs/CONFIG.md "fp32_ops"): a small model (Linear,
LayerNorm, GELU, Linear, cross_entropy) trained one step under CPU bf16
autocast with the config's fp32_ops (an API name, a module path) and
$NPROBE_FP32_OPS (an API call):
  - exactly the listed calls carry kwargs fp32_override = 1;
  - a promoted linear's output is bf16 (cast back, as autocast's) and
    equals torch's float32 linear of the float32 inputs rounded once to
    bf16, where the unpromoted one equals the bf16 linear;
  - a promoted layer_norm ran outside autocast on float32 inputs, its
    output cast back to the bf16 autocast gives a bf16 input;
  - the program's results are those of the same promotions made by hand.
Run through pyrun.sh; exits 1 on any failed check."""
import json
import os
import sys
import tempfile

import h5py
import torch
import torch.nn.functional as F

HERE = os.path.dirname(os.path.abspath(__file__))
sys.path[:0] = [HERE, os.path.join(HERE, "..")]
from nprobe.torch import PrecisionDebugger  # noqa: E402
from nptest import check, finish  # noqa: E402


class M(torch.nn.Module):
    def __init__(self):
        super().__init__()
        self.fc1 = torch.nn.Linear(16, 32)
        self.ln = torch.nn.LayerNorm(32)
        self.fc2 = torch.nn.Linear(32, 5)

    def forward(self, x):
        return self.fc2(F.gelu(self.ln(self.fc1(x))))


torch.manual_seed(0)
x = torch.randn(8, 16)
t = torch.randint(0, 5, (8,))


def step(model, dbg=None):
    if dbg:
        dbg.start(model)
    with torch.autocast("cpu", dtype=torch.bfloat16):
        y = model(x)
        loss = F.cross_entropy(y.float(), t)
    loss.backward()
    if dbg:
        dbg.stop()
        dbg.step()
    return y.detach(), loss.detach()


with tempfile.TemporaryDirectory() as tmp:
    cfg = os.path.join(tmp, "c.json")
    with open(cfg, "w") as f:
        json.dump({"task": "tensor", "dump_path": os.path.join(tmp, "d"), "level": "mix",
                   "fp32_ops": ["Functional.layer_norm", "fc2"]}, f)
    os.environ["NPROBE_FP32_OPS"] = "Functional.linear.0"
    torch.manual_seed(1)
    model = M()
    ref = M()
    ref.load_state_dict(model.state_dict())
    y, loss = step(model, PrecisionDebugger(cfg))
    del os.environ["NPROBE_FP32_OPS"]
    with h5py.File(os.path.join(tmp, "d", "step0", "rank0", "dump.h5"), "r") as f:
        names = [r["name"].decode() for r in f["entries"][:]]
        marked = sorted(n for n in names if n.endswith(".forward.kwargs.fp32_override"))
        want = sorted(["Functional.linear.0.forward.kwargs.fp32_override",
                       "Functional.layer_norm.0.forward.kwargs.fp32_override",
                       "Functional.linear.1.forward.kwargs.fp32_override"])
        check(marked == want, f"marked calls {marked}, want {want}")
        check(all(f["entries"][:][names.index(n)]["max"] == 1.0 for n in marked), "fp32_override is 1")
        x0 = torch.from_numpy(f["data"]["Functional.linear.0.forward.input.0"][...])
        w0 = torch.from_numpy(f["data"]["Functional.linear.0.forward.input.1"][...])
        b0 = torch.from_numpy(f["data"]["Functional.linear.0.forward.input.2"][...])
        y0 = f["data"]["Functional.linear.0.forward.output.0"]
        dt0 = [r["dtype"].decode() for r in f["entries"][:] if r["name"].decode() ==
               "Functional.linear.0.forward.output.0"][0]
        y0 = torch.from_numpy(y0[...].astype("float32"))
        ln_in = [r["dtype"].decode() for r in f["entries"][:] if r["name"].decode() ==
                 "Functional.layer_norm.0.forward.input.0"][0]
    # the promoted linear: float32 product rounded once to bf16
    want0 = F.linear(x0.double(), w0.double(), b0.double()).float().bfloat16().float()
    check(dt0 == "bfloat16", f"the promoted linear's output is {dt0}, want bfloat16 (cast back)")
    check(torch.equal(y0, want0), "the promoted linear's output is not the float32 product rounded to bf16")
    check(ln_in == "bfloat16", f"layer_norm's input as the program passed it: {ln_in}")
    # the same promotions by hand, without the package
    with torch.autocast("cpu", dtype=torch.bfloat16):
        with torch.autocast("cpu", enabled=False):
            h = F.linear(x, ref.fc1.weight, ref.fc1.bias).bfloat16()
            # layer_norm of a bf16 input gives bf16 under CPU autocast: cast back
            h = F.layer_norm(h.float(), (32,), ref.ln.weight, ref.ln.bias, 1e-5).bfloat16()
        g = F.gelu(h)
        with torch.autocast("cpu", enabled=False):
            yr = F.linear(g.float(), ref.fc2.weight, ref.fc2.bias)
        yr = yr.to(torch.bfloat16)
    check(y.dtype == yr.dtype, f"output dtype {y.dtype}, by hand {yr.dtype}")
    check(torch.equal(y.float(), yr.float()), f"outputs differ from the promotions by hand: "
          f"{(y.float() - yr.float()).abs().max().item()}")
sys.exit(finish())
