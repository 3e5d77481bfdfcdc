"""test_replay_args.py - one argument contract between the package's dumps and
`nprobe replay` (issue 31). Real calls of every op the replay claims, made in
float64 through nprobe.torch and dumped at L1 (forward and backward); the
replay recomputes each from the dumped inputs and arguments, so its float64
result is checked against torch's own float64 result (the dumped output):
every call the replay recomputes must agree to RelL2Err <= 1e-10, and a call
whose arguments the float64 reference does not take (dilation, groups,
asymmetric strides, an attention mask, reduction='sum', a class weight, a
string it does not know) is "not recomputable", never judged."""
import json
import os
import sys
import tempfile

import torch
import torch.nn.functional as F

sys.path.insert(0, os.path.join(os.path.dirname(os.path.abspath(__file__)), ".."))
from nptest import check, finish, run  # noqa: E402
from nprobe.torch import PrecisionDebugger  # noqa: E402

torch.manual_seed(0)
D = torch.float64


def t(*shape):
    return torch.randn(*shape, dtype=D, requires_grad=True)


# (forward call name, expected: "pass" or "not recomputable", the call)
x4, w4, b4 = t(2, 4, 7, 7), t(6, 4, 3, 3), t(6)
wg = t(6, 2, 3, 3)
xs, ln_w, ln_b = t(3, 5, 8), t(8), t(8)
q, k, v = t(2, 2, 5, 4), t(2, 2, 6, 4), t(2, 2, 6, 4)
mask = torch.randn(5, 6, dtype=D)
emb = t(10, 4)
idx = torch.tensor([[1, 0, 3], [9, 0, 2]])
logits, target = t(6, 5), torch.tensor([0, 4, 2, 2, 1, 3])
lw, lb = t(5, 8), t(5)
CASES = [
    ("Functional.conv2d.0", "pass", lambda: F.conv2d(x4, w4, b4, stride=2, padding=1)),
    ("Functional.conv2d.1", "pass", lambda: F.conv2d(x4, w4, None, 1, 2)),
    ("Functional.conv2d.2", "pass", lambda: F.conv2d(x4, w4, b4, (2, 2), (1, 1), (1, 1), 1)),
    ("Functional.conv2d.3", "not recomputable", lambda: F.conv2d(x4, w4, b4, stride=(2, 1))),
    ("Functional.conv2d.4", "not recomputable", lambda: F.conv2d(x4, w4, b4, dilation=2)),
    ("Functional.conv2d.5", "not recomputable", lambda: F.conv2d(x4, wg, None, groups=2)),
    ("Functional.conv2d.6", "not recomputable", lambda: F.conv2d(x4, w4, b4, padding="same")),
    ("Functional.max_pool2d.0", "pass", lambda: torch.nn.MaxPool2d(2)(x4)),
    ("Functional.max_pool2d.1", "not recomputable", lambda: torch.nn.MaxPool2d(3, 2, 1)(x4)),
    ("Functional.gelu.0", "pass", lambda: F.gelu(xs)),
    ("Functional.gelu.1", "pass", lambda: F.gelu(xs, approximate="tanh")),
    ("Functional.layer_norm.0", "pass", lambda: F.layer_norm(xs, (8,), ln_w, ln_b, 1e-3)),
    ("Functional.layer_norm.1", "not recomputable", lambda: F.layer_norm(xs, (5, 8))),
    ("Functional.softmax.0", "pass", lambda: F.softmax(xs, dim=1)),
    ("Functional.softmax.1", "pass", lambda: F.softmax(xs, -1, dtype=D)),
    ("Functional.scaled_dot_product_attention.0", "pass",
     lambda: F.scaled_dot_product_attention(q, k, v, is_causal=True, scale=0.3)),
    ("Functional.scaled_dot_product_attention.1", "pass",
     lambda: F.scaled_dot_product_attention(q, k, v)),
    ("Functional.scaled_dot_product_attention.2", "not recomputable",
     lambda: F.scaled_dot_product_attention(q, k, v, attn_mask=mask, scale=0.3)),
    ("Functional.linear.1", "pass", lambda: F.linear(xs, lw, lb)),
    ("Functional.linear.2", "pass", lambda: F.linear(xs, lw)),
    ("Functional.embedding.0", "pass", lambda: F.embedding(idx, emb)),
    ("Functional.embedding.1", "pass", lambda: F.embedding(idx, emb, padding_idx=0)),
    ("Functional.cross_entropy.0", "pass", lambda: F.cross_entropy(logits, target)),
    ("Functional.cross_entropy.1", "pass",
     lambda: F.cross_entropy(logits, target, ignore_index=2, label_smoothing=0.1)),
    ("Functional.cross_entropy.2", "not recomputable",
     lambda: F.cross_entropy(logits, target, reduction="sum")),
    ("Functional.cross_entropy.3", "not recomputable",
     lambda: F.cross_entropy(logits, target, weight=torch.rand(5, dtype=D))),
    ("Functional.cross_entropy.4", "not recomputable",
     lambda: F.cross_entropy(t(2, 5, 3), torch.tensor([[0, 4, 1], [2, 2, 3]]))),
]

root = tempfile.mkdtemp()
cfg = os.path.join(root, "c.json")
with open(cfg, "w") as f:
    json.dump({"task": "tensor", "dump_path": os.path.join(root, "dump"), "level": "L1",
               "step": [0]}, f)
dbg = PrecisionDebugger(config_path=cfg)
dbg.start()
# a model's own code in a library whose folder starts like torch's
# (torchvision): its calls' callsite is that code, not the training loop
code = compile("y_vision = F.linear(xs, lw, lb)\n",
               os.path.dirname(torch.__file__) + "vision" + os.sep + "resnet_like.py", "exec")
exec(code)
loss = 0
for _, _, fn in CASES:
    y = fn()
    loss = loss + (y * torch.randn_like(y)).sum()
loss.backward()
dbg.stop()
dbg.step()

import h5py  # noqa: E402
with h5py.File(os.path.join(root, "dump", "step0", "rank0", "dump.h5"), "r") as f:
    calls = {r["call"].decode(): r["callsite"].decode() for r in f["calls"][...]}
site = calls.get("Functional.linear.0.forward", "")
print("callsite of the torchvision-like call:", site)
check(site.startswith("resnet_like.py:1"), f"callsite {site!r}, want resnet_like.py:1")

code, out, err = run(["replay", "dump", "-o", "rep", "--format", "json"], root)
check(code in (0, 1), f"nprobe replay exit {code}: {err}")
rows = {}
for name in os.listdir(os.path.join(root, "rep")):
    with open(os.path.join(root, "rep", name)) as f:
        doc = json.load(f)
    hdr = doc["headers"]
    for r in doc["rows"]:
        rows.setdefault(r[0], []).append(dict(zip(hdr, r)))
for call, want, _ in CASES:
    for p in ("forward", "backward"):
        got = rows.get(f"{call}.{p}")
        if not got:
            check(False, f"{call}.{p}: not in the replay report")
            continue
        st = {r["Status"] for r in got}
        if want == "pass":
            ok = st == {"pass"} and all(r["RelL2Err"] is not None and r["RelL2Err"] <= 1e-10
                                        for r in got)
            print(f"{call}.{p}: {st}, RelL2Err "
                  f"{max((r['RelL2Err'] or 0) for r in got):.2e}")
        else:
            ok = st == {"not recomputable"}
            print(f"{call}.{p}: {st}: {got[0]['Reason']}")
        check(ok, f"{call}.{p}: want {want}, got {[(r['Status'], r['Leaf'], r['RelL2Err'], r['Reason']) for r in got]}")
sys.exit(finish())
