"""tests/python/moe_router.py - a tiny HF Mixtral (tests/python/hf_models.py)
trained K steps under the PyTorch package, for `nprobe promote`
(test_moe_promote.sh): run under `nprobe dump -c CFG -- python moe_router.py
fp32|bf16 [K]`, it prints 'step S loss L' per step.

Layer 0's router is made the way trained routers become (a large component
shared by every expert, small differences between experts): W_e = 20 u +
w_e, u one random direction. The shared part cancels in the softmax and the
top-k, so the routing follows the small differences, but it makes the
logits large (about +-100): a bf16 router GEMM (the inputs and weight
rounded to 8 bits of mantissa, the logits to bf16) moves the logits by a
few tenths, more than the experts' gaps, and tokens change experts. The
rest of the model under bf16 autocast perturbs the router's input by ~2^-9,
which the shared part does not amplify in the gaps. So an fp32 router in an
otherwise-bf16 run routes as the fp32 reference does."""
import os
import sys

import torch

HERE = os.path.dirname(os.path.abspath(__file__))
sys.path[:0] = [HERE, os.path.join(HERE, "..", "..", "python")]
import hf_models  # noqa: E402
from nprobe.torch import PrecisionDebugger  # noqa: E402

prec = sys.argv[1] if len(sys.argv) > 1 else "fp32"
steps = int(sys.argv[2]) if len(sys.argv) > 2 else 4
torch.manual_seed(0)
model = hf_models.build("mixtral", seed=0)
with torch.no_grad():
    g = torch.Generator().manual_seed(5)
    w = model.model.layers[0].mlp.gate.weight            # (experts, hidden)
    u = torch.randn(w.shape[1], generator=g)
    w.copy_(20.0 * u[None, :] + 0.05 * torch.randn(w.shape, generator=g))
b = hf_models.batch("mixtral", seed=1)
dbg = PrecisionDebugger(config_path=os.environ.get("NPROBE_DUMP_CONFIG"))


def hook(i, phase):
    if phase == "begin":
        dbg.start(model)
    else:
        dbg.stop()
        dbg.step()


losses = hf_models.train(model, b, steps=steps, lr=1e-3,
                         autocast=torch.bfloat16 if prec == "bf16" else None, hook=hook)
for i, lo in enumerate(losses):
    print(f"step {i} loss {lo:.6f}")
