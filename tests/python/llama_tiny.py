"""llama_tiny.py OUT f32|bf16 TASK SEED - a tiny Llama-style decoder (RMSNorm
by hand with a float32 upcast, SiLU-gated MLP, `x = x + attn(norm(x))`)
trained 2 steps with SGD, dumped by nprobe.torch at level mix; bf16: the
forward under CPU bf16 autocast. The dump's precision is declared fp32 in
both runs (as a run whose autocast starts after the step's first row is
detected), so only the data tell that tensors carry bf16 rounding."""
import json, sys, torch, torch.nn as nn, torch.nn.functional as F
from nprobe.torch import PrecisionDebugger
out, bf16, task, seed = sys.argv[1], sys.argv[2] == "bf16", sys.argv[3], int(sys.argv[4])
json.dump({"task": task, "dump_path": out, "level": "mix", "step": [0, 1]}, open(out + ".json", "w"))
class RMS(nn.Module):
    def __init__(s, C): super().__init__(); s.w = nn.Parameter(torch.ones(C)); s.eps = 1e-6
    def forward(s, x):
        v = x.float().pow(2).mean(-1, keepdim=True)
        return s.w * (x.float() * torch.rsqrt(v + s.eps)).to(x.dtype)
class Block(nn.Module):
    def __init__(s, C, H):
        super().__init__(); s.H = H; s.n1, s.n2 = RMS(C), RMS(C)
        s.qkv = nn.Linear(C, 3 * C, bias=False); s.o = nn.Linear(C, C, bias=False)
        s.g = nn.Linear(C, 2 * C, bias=False); s.u = nn.Linear(C, 2 * C, bias=False); s.d = nn.Linear(2 * C, C, bias=False)
    def forward(s, x):
        B, T, C = x.shape
        q, k, v = s.qkv(s.n1(x)).split(C, -1)
        q, k, v = (t.view(B, T, s.H, -1).transpose(1, 2) for t in (q, k, v))
        y = F.scaled_dot_product_attention(q, k, v, is_causal=True).transpose(1, 2).reshape(B, T, C)
        x = x + s.o(y)
        h = s.n2(x)
        return x + s.d(F.silu(s.g(h)) * s.u(h))
class M(nn.Module):
    def __init__(s, V=64, C=32, L=2):
        super().__init__(); s.e = nn.Embedding(V, C); s.b = nn.ModuleList(Block(C, 2) for _ in range(L)); s.n = RMS(C); s.h = nn.Linear(C, V, bias=False)
    def forward(s, i):
        x = s.e(i)
        for b in s.b: x = b(x)
        return s.h(s.n(x))
torch.manual_seed(seed)
m = M(); opt = torch.optim.SGD(m.parameters(), lr=0.1)
idx = torch.randint(0, 64, (4, 17))
dbg = PrecisionDebugger(config_path=out + ".json", precision="fp32")  # as a mis-detected run
dbg.start(m)
for step in range(2):
    pre = torch.zeros(1) + 1  # a row before autocast
    with torch.autocast("cpu", dtype=torch.bfloat16, enabled=bf16):
        logits = m(idx[:, :-1])
    loss = F.cross_entropy(logits.float().reshape(-1, 64), idx[:, 1:].reshape(-1))
    opt.zero_grad(); loss.backward(); opt.step(); dbg.step()
dbg.stop()
