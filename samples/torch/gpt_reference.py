"""gpt_reference.py - a PyTorch reference run of nprobe's GPT, dumped in
nprobe's format, so `nprobe compare` can check the runtime against PyTorch.

    nprobe train --model gpt --steps 0 --save init.h5              # initial weights
    nprobe dump -c tensor.json -- nprobe train --model gpt --steps 1   # runtime dump (tensor task)
    python3 samples/torch/gpt_reference.py --ckpt init.h5 \\
        --batch-from dump_rt/step0/rank0/dump.h5 --out dump_torch
    nprobe compare -b dump_torch -c dump_rt -o report

The model is built from the checkpoint (GPT-2 names and layout, lm head tied
to wte, erf gelu, causal attention, layer-norm eps from the checkpoint) as
torch.nn modules with the runtime's module paths and classes, and its
functional calls go through nprobe_dump's wrappers, so names line up with the
runtime's dump. The batch (token ids and targets) is read from the runtime's
tensor dump: Functional.embedding.0.forward.input.0 and
Functional.cross_entropy.0.forward.input.1. Needs python3-torch and
python3-h5py (Debian packages).
"""
import argparse
import math
import os
import sys

import h5py
import numpy as np
import torch

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
from nprobe_dump import Dumper  # noqa: E402


def attr(f, k):
    v = f.attrs[k]
    return v.decode() if isinstance(v, bytes) else v


class Linear(torch.nn.Module):
    def __init__(self, F, w, b):
        super().__init__()
        self.F = [F]
        self.weight = torch.nn.Parameter(w)
        self.bias = torch.nn.Parameter(b) if b is not None else None

    def forward(self, x):
        return self.F[0].linear(x, self.weight, self.bias)


class LayerNorm(torch.nn.Module):
    def __init__(self, F, w, b, eps):
        super().__init__()
        self.F, self.eps = [F], eps
        self.weight = torch.nn.Parameter(w)
        self.bias = torch.nn.Parameter(b)

    def forward(self, x):
        return self.F[0].layer_norm(x, (x.shape[-1],), self.weight, self.bias, eps=self.eps)


class Embedding(torch.nn.Module):
    def __init__(self, F, w):
        super().__init__()
        self.F = [F]
        self.weight = torch.nn.Parameter(w)

    def forward(self, idx):
        return self.F[0].embedding(idx, self.weight)


class CausalSelfAttention(torch.nn.Module):
    def __init__(self, F, P, pre, n_head):
        super().__init__()
        self.F, self.n_head = [F], n_head
        self.c_attn = Linear(F, P[pre + "c_attn.weight"], P[pre + "c_attn.bias"])
        self.c_proj = Linear(F, P[pre + "c_proj.weight"], P[pre + "c_proj.bias"])

    def forward(self, x):
        F = self.F[0]
        B, T, C = x.shape
        H, D = self.n_head, C // self.n_head
        q, k, v = self.c_attn(x).split(C, dim=2)
        q, k, v = (t.view(B, T, H, D).transpose(1, 2) for t in (q, k, v))
        y = F.scaled_dot_product_attention(q, k, v, is_causal=1, scale=1.0 / math.sqrt(D))
        return self.c_proj(y.transpose(1, 2).reshape(B, T, C))


class MLP(torch.nn.Module):
    def __init__(self, F, P, pre):
        super().__init__()
        self.F = [F]
        self.c_fc = Linear(F, P[pre + "c_fc.weight"], P[pre + "c_fc.bias"])
        self.c_proj = Linear(F, P[pre + "c_proj.weight"], P[pre + "c_proj.bias"])

    def forward(self, x):
        return self.c_proj(self.F[0].gelu(self.c_fc(x)))


class Block(torch.nn.Module):
    def __init__(self, F, P, i, n_head, eps):
        super().__init__()
        self.F = [F]
        pre = f"h.{i}."
        self.ln_1 = LayerNorm(F, P[pre + "ln_1.weight"], P[pre + "ln_1.bias"], eps)
        self.attn = CausalSelfAttention(F, P, pre + "attn.", n_head)
        self.ln_2 = LayerNorm(F, P[pre + "ln_2.weight"], P[pre + "ln_2.bias"], eps)
        self.mlp = MLP(F, P, pre + "mlp.")

    def forward(self, x):
        F = self.F[0]
        x = F.add(x, self.attn(self.ln_1(x)))
        return F.add(x, self.mlp(self.ln_2(x)))


class GPT(torch.nn.Module):
    def __init__(self, F, P, cfg):
        super().__init__()
        self.F = [F]
        self.wte = Embedding(F, P["wte.weight"])
        self.wpe = Embedding(F, P["wpe.weight"])
        self.h = torch.nn.ModuleList(Block(F, P, i, cfg["n_head"], cfg["eps"])
                                     for i in range(cfg["n_layer"]))
        self.ln_f = LayerNorm(F, P["ln_f.weight"], P["ln_f.bias"], cfg["eps"])

    def forward(self, idx, targets):
        F = self.F[0]
        T = idx.shape[1]
        x = F.add(self.wte(idx), self.wpe(torch.arange(T)))
        for block in self.h:
            x = block(x)
        logits = F.linear(self.ln_f(x), self.wte.weight)
        return F.cross_entropy_btv(logits, targets)


def main():
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--ckpt", required=True, help="nprobe checkpoint with the weights (nprobe train --save)")
    ap.add_argument("--batch-from", required=True, help="the runtime's tensor dump.h5 of the same step")
    ap.add_argument("--out", required=True, help="dump_path for the PyTorch dump")
    ap.add_argument("--task", default="tensor", choices=["tensor", "statistics", "md5"])
    ap.add_argument("--level", default="mix", choices=["L0", "L1", "mix"])
    ap.add_argument("--step", type=int, default=0)
    ap.add_argument("--threads", type=int, default=1)
    a = ap.parse_args()
    torch.set_num_threads(a.threads)

    with h5py.File(a.ckpt, "r") as f:
        if attr(f, "format") != "nprobe-checkpoint":
            sys.exit(f"gpt_reference.py: {a.ckpt}: not an nprobe checkpoint (attribute format)")
        cfg = {k: int(f.attrs[k]) for k in ("n_layer", "n_head", "n_embd", "block_size", "vocab_size")}
        cfg["eps"] = float(attr(f, "ln_eps"))
        P = {k: torch.tensor(np.array(v), dtype=torch.float32) for k, v in f["params"].items()}
    with h5py.File(a.batch_from, "r") as f:
        try:
            idx = torch.tensor(np.array(f["data/Functional.embedding.0.forward.input.0"]))
            tgt = torch.tensor(np.array(f["data/Functional.cross_entropy.0.forward.input.1"]))
        except KeyError as e:
            sys.exit(f"gpt_reference.py: {a.batch_from}: needs a tensor dump with the "
                     f"embedding input and the cross_entropy targets ({e})")

    d = Dumper(a.out, task=a.task, level=a.level, device="cpu", precision="fp32")
    F = d.functional
    F.cross_entropy_btv = d.api(
        "Functional.cross_entropy",
        lambda logits, targets: torch.nn.functional.cross_entropy(
            logits.reshape(-1, logits.shape[-1]), targets.reshape(-1)))
    model = GPT(F, P, cfg)
    d.watch(model)
    d.step_begin(a.step)
    loss = model(idx, tgt)
    loss.backward()
    d.step_end()
    d.close()
    print(f"gpt_reference.py: step {a.step} loss {loss.item():.6f}; "
          f"wrote {a.out}/step{a.step}/rank0/dump.h5")


if __name__ == "__main__":
    main()
