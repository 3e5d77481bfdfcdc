"""samples/torch/train.py - a short real PyTorch training run (a small GPT on
a repeating token pattern, AdamW) dumped by nprobe with msprobe's three lines.

    nprobe dump -c samples/configs/statistics.json -- python3 samples/torch/train.py
    python3 samples/torch/train.py --config my_config.json --steps 20 --bf16

The package must be importable (`pip install .` at the root, or PYTHONPATH=python
with NPROBE_LIB=build/release/lib/libnprobe.so; `nprobe dump` finds the
library beside itself). Without --config and NPROBE_DUMP_CONFIG the run is
not dumped.
"""
import argparse
import math
import os
import sys

import torch
import torch.nn as nn
import torch.nn.functional as F


class Block(nn.Module):
    def __init__(self, C, H):
        super().__init__()
        self.H = H
        self.ln_1 = nn.LayerNorm(C)
        self.c_attn = nn.Linear(C, 3 * C)
        self.c_proj = nn.Linear(C, C)
        self.ln_2 = nn.LayerNorm(C)
        self.mlp = nn.Sequential(nn.Linear(C, 4 * C), nn.GELU(), nn.Linear(4 * C, C))

    def forward(self, x):
        B, T, C = x.shape
        q, k, v = self.c_attn(self.ln_1(x)).split(C, dim=-1)
        q, k, v = (t.view(B, T, self.H, C // self.H).transpose(1, 2) for t in (q, k, v))
        att = (q @ k.transpose(-2, -1)) / math.sqrt(C // self.H)
        att = att.masked_fill(torch.ones(T, T, dtype=torch.bool).triu(1), float("-inf"))
        y = (F.softmax(att, dim=-1) @ v).transpose(1, 2).reshape(B, T, C)
        x = x + self.c_proj(y)
        return x + self.mlp(self.ln_2(x))


class GPT(nn.Module):
    def __init__(self, V=64, T=32, C=64, H=4, L=2):
        super().__init__()
        self.wte, self.wpe = nn.Embedding(V, C), nn.Embedding(T, C)
        self.h = nn.ModuleList(Block(C, H) for _ in range(L))
        self.ln_f = nn.LayerNorm(C)
        self.lm_head = nn.Linear(C, V, bias=False)

    def forward(self, idx):
        x = self.wte(idx) + self.wpe(torch.arange(idx.shape[1]))
        for b in self.h:
            x = b(x)
        return self.lm_head(self.ln_f(x))


def main():
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--config", help="nprobe dump config.json (else $NPROBE_DUMP_CONFIG)")
    ap.add_argument("--steps", type=int, default=5)
    ap.add_argument("--seed", type=int, default=0)
    ap.add_argument("--bf16", action="store_true", help="autocast the forward to bfloat16")
    a = ap.parse_args()
    torch.manual_seed(a.seed)
    torch.set_num_threads(1)
    model = GPT()
    opt = torch.optim.AdamW(model.parameters(), lr=3e-3)
    data = torch.arange(4 * 33).remainder(7).view(4, 33)   # a pattern the model can learn

    debugger = None
    if a.config or os.environ.get("NPROBE_DUMP_CONFIG"):
        try:
            from nprobe.torch import PrecisionDebugger
        except ImportError:  # a source tree: the package beside samples/
            sys.path.insert(0, os.path.join(os.path.dirname(os.path.abspath(__file__)), "..", "..", "python"))
            from nprobe.torch import PrecisionDebugger
        debugger = PrecisionDebugger(config_path=a.config)          # 1
    for step in range(a.steps):
        if debugger:
            debugger.start(model)                                   # 2
        with torch.autocast("cpu", dtype=torch.bfloat16, enabled=a.bf16):
            logits = model(data[:, :-1])
        loss = F.cross_entropy(logits.float().reshape(-1, 64), data[:, 1:].reshape(-1))
        loss.backward()
        opt.step()
        opt.zero_grad()
        if debugger:
            debugger.stop()                                         # 3
            debugger.step()
        print(f"step {step} loss {loss.item():.4f}")


if __name__ == "__main__":
    main()
